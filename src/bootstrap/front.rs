//! Flagger's checks, answered in front of the router. Flagger polls every
//! canary's gate every few seconds, and axum's router cost a check about as
//! much again as the check itself: each middleware's boxed service cloned and
//! its future boxed, the path's parameters copied, the body read twice. Here a
//! check goes through the same steps as every other route (a request id, the
//! access log, the metrics by route, the request deadline, the panic guard and
//! the bounded body: see `router::harden`), in one function. Anything that is
//! not plainly a check goes to the router, which still has every check route,
//! so an unusual path is answered exactly as before.

use std::sync::Arc;
use std::time::Instant;

use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Request};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::future::Either;
use hyper::body::Incoming;

use crate::core::AppState;
use crate::flagger::{self, CheckRoute};
use crate::http::access;
use crate::http::guard::OnFailure;
use crate::http::limits::BodyLimit;
use crate::http::server::Answers;
use crate::http::FLAGGER_BODY_LIMIT;

const X_REQUEST_ID: &str = "x-request-id";

/// The router, with Flagger's checks answered before it.
#[derive(Clone)]
pub(crate) struct Front(Arc<Inner>);

struct Inner {
    state: AppState,
    router: Router,
    limit: BodyLimit,
    on: OnFailure,
}

impl Front {
    /// `router` with Flagger's checks answered in front of it, under the
    /// limits the router's `check_routes` and `harden` give them.
    pub(crate) fn new(state: AppState, router: Router) -> Self {
        let limit = BodyLimit::new(FLAGGER_BODY_LIMIT, state.config.limits.body_read_timeout);
        let on = OnFailure {
            gate_check: true,
            timeout: state.config.limits.request_timeout,
        };
        Self(Arc::new(Inner {
            state,
            router,
            limit,
            on,
        }))
    }
}

impl Answers for Front {
    fn answer(
        self,
        req: Request<Incoming>,
    ) -> impl std::future::Future<Output = Response> + Send + 'static {
        // Boxed, so that every other request does not carry the check's size.
        if CheckRoute::of(req.method(), req.uri().path()).is_some() {
            Either::Left(Box::pin(async move { self.0.check(req).await }))
        } else {
            Either::Right(self.0.router.clone().answer(req))
        }
    }
}

impl Inner {
    async fn check(&self, req: Request<Incoming>) -> Response {
        let (parts, body) = req.into_parts();
        let Some(route) = CheckRoute::of(&parts.method, parts.uri.path()) else {
            return self
                .router
                .clone()
                .answer(Request::from_parts(parts, body))
                .await;
        };
        let id = request_id(&parts.headers);
        let shown = id.to_str().unwrap_or("-");
        let checked = self.observed(route, &parts, body);
        let tokens = self.state.config.flagger_tokens();
        let path = route.shown();
        let mut response = access::logged(&parts.method, true, path, shown, tokens, checked).await;
        response.headers_mut().insert(X_REQUEST_ID, id);
        response
    }

    /// Counted by route, within the deadline, guarded against panics.
    async fn observed(&self, route: CheckRoute<'_>, parts: &Parts, body: Incoming) -> Response {
        let started = Instant::now();
        let guarded = self.on.unless_panics(self.checked(route, parts, body));
        let response = self.on.within(guarded).await;
        super::router::count(
            &self.state.metrics,
            route.pattern(),
            &parts.method,
            started,
            &response,
        );
        response
    }

    async fn checked(&self, route: CheckRoute<'_>, parts: &Parts, mut body: Incoming) -> Response {
        let bytes = match self.limit.read(&parts.headers, &mut body).await {
            Ok((bytes, _no_permit)) => bytes,
            Err(refused) => return refused,
        };
        match flagger::check(&self.state, route, parts.uri.query(), &bytes).await {
            Ok(response) => response,
            Err(refused) => refused.into_response(),
        }
    }
}

/// The request's own id, else a new one (as `SetRequestIdLayer` with
/// `MakeRequestUuid` does on every other route).
fn request_id(headers: &HeaderMap) -> HeaderValue {
    if let Some(id) = headers.get(X_REQUEST_ID) {
        return id.clone();
    }
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text);
    HeaderValue::from_str(id).unwrap_or_else(|_| HeaderValue::from_static("-"))
}
