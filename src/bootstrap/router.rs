//! The router: every channel's routes behind their body limits, and the layers
//! every route gets (request ids, access log, metrics, timeouts, panics).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, MatchedPath, RawQuery, Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::Semaphore;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};

use crate::api::{self, health};
use crate::core::AppState;
use crate::flagger;
use crate::gate::GateKind;
use crate::github::redeliver::Redeliveries;
use crate::http::access;
use crate::http::error::{Reject, Rejected};
use crate::http::guard::{self, Failed, OnFailure};
use crate::http::limits::{self, BodyLimit, WebhookReaders};
use crate::http::receipts::Receipts;
use crate::http::{API_BODY_LIMIT, FLAGGER_BODY_LIMIT, GITHUB_BODY_LIMIT, SLACK_BODY_LIMIT};
use crate::metrics::{FailureLabels, HttpLabels, Metrics, RouteLabels};
use crate::{github, slack};

/// The router, shared by `main` and the tests; the pages under /ui see
/// changes but let nobody act by GitHub login ([`app_with`] is what
/// [`crate::Gatebot`] serves).
pub fn app(state: AppState) -> Router {
    let receipts = Receipts::new(
        state.store.clone(),
        state.clock.clone(),
        state.inbox_wake.clone(),
    );
    let receipts = Webhooks {
        receipts,
        redeliveries: Redeliveries::default(),
        readers: WebhookReaders::default(),
    };
    let changes = state.engine.watch().changes().unwrap_or_else(|| {
        let (changes, _) = tokio::sync::broadcast::channel(1024);
        state.engine.watch().publish_to(changes.clone());
        changes
    });
    match crate::web::Web::new(&state.config, changes, None) {
        Ok(web) => compose(state, Some(Arc::new(web)), receipts),
        Err(e) => {
            tracing::error!(error = %e, "the web pages are off");
            compose(state, None, receipts)
        }
    }
}

/// What the webhook routes share with the rest of the server: the receipt
/// writer (which Socket Mode shares) and the GitHub deliveries to ask for again.
pub struct Webhooks {
    pub receipts: Receipts,
    pub redeliveries: Redeliveries,
    /// The cap on webhook bodies handled at once, by channel (Socket Mode
    /// shares Slack's).
    pub readers: WebhookReaders,
}

/// The router with the pages `web`, storing webhook receipts through
/// `webhooks`.
pub fn app_with(state: AppState, web: Arc<crate::web::Web>, webhooks: Webhooks) -> Router {
    compose(state, Some(web), webhooks)
}

fn compose(state: AppState, web: Option<Arc<crate::web::Web>>, webhooks: Webhooks) -> Router {
    let read_timeout = state.config.limits.body_read_timeout;
    let rest = Router::new()
        .merge(flagger_routes(&state, read_timeout))
        .merge(api_routes(&state, read_timeout))
        .merge(webhook_routes(&state, webhooks, read_timeout))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        // Its body is never read: only its secret counts.
        .route("/webhooks/change", post(api::change::changed))
        .merge(web.map(crate::web::routes).unwrap_or_default());
    harden(state, check_routes(read_timeout), rest)
}

/// Flagger's checks: whatever goes wrong here is answered 403, never 5xx.
fn check_routes(read_timeout: std::time::Duration) -> Router<AppState> {
    let limit = middleware::from_fn_with_state(
        BodyLimit::new(FLAGGER_BODY_LIMIT, read_timeout),
        limits::bounded,
    );
    Router::new()
        .route(
            "/gates/{kind}",
            get(flagger::canary_gate).post(flagger::canary_gate),
        )
        .route(
            "/gates/{kind}/{*scope}",
            get(flagger::scoped_gate).post(flagger::scoped_gate),
        )
        // The Flagger token in the path: `/gates/t/…` is matched before `{kind}`.
        .route(
            "/gates/t/{token}/{kind}",
            get(flagger::canary_gate_with_token).post(flagger::canary_gate_with_token),
        )
        .route(
            "/gates/t/{token}/{kind}/{*scope}",
            get(flagger::scoped_gate_with_token).post(flagger::scoped_gate_with_token),
        )
        .route(
            "/gate/check",
            post(|s: State<AppState>, q: RawQuery, b: Bytes| {
                flagger::legacy_check(s, GateKind::LegacyGate, q.0, b)
            }),
        )
        .route(
            "/rollback/check",
            post(|s: State<AppState>, q: RawQuery, b: Bytes| {
                flagger::legacy_check(s, GateKind::LegacyRollback, q.0, b)
            }),
        )
        // Both limits in one layer: axum clones every layer's boxed service on
        // every request, and this is the route Flagger polls.
        .route_layer(
            ServiceBuilder::new()
                .layer(limit)
                .layer(DefaultBodyLimit::max(FLAGGER_BODY_LIMIT)),
        )
}

/// Flagger's loadtester routes and its event webhook.
fn flagger_routes(state: &AppState, read_timeout: std::time::Duration) -> Router<AppState> {
    let limit = middleware::from_fn_with_state(
        BodyLimit::new(FLAGGER_BODY_LIMIT, read_timeout),
        limits::bounded,
    );
    Router::new()
        .route(
            "/gate/open",
            post(|s: State<AppState>, h: HeaderMap, b: Bytes| {
                flagger::legacy_set(s, h, GateKind::LegacyGate, true, b)
            }),
        )
        .route(
            "/gate/close",
            post(|s: State<AppState>, h: HeaderMap, b: Bytes| {
                flagger::legacy_set(s, h, GateKind::LegacyGate, false, b)
            }),
        )
        .route(
            "/rollback/open",
            post(|s: State<AppState>, h: HeaderMap, b: Bytes| {
                flagger::legacy_set(s, h, GateKind::LegacyRollback, true, b)
            }),
        )
        .route(
            "/rollback/close",
            post(|s: State<AppState>, h: HeaderMap, b: Bytes| {
                flagger::legacy_set(s, h, GateKind::LegacyRollback, false, b)
            }),
        )
        .route(
            "/gate/approve",
            get(flagger::legacy_approve).post(flagger::legacy_approve),
        )
        .route(
            "/gate/halt",
            get(flagger::legacy_halt).post(flagger::legacy_halt),
        )
        .route(
            "/flagger/events",
            post(flagger::event).layer(axum::Extension(flagger::events::EventIntake::new(
                state.clone(),
            ))),
        )
        .layer(DefaultBodyLimit::max(FLAGGER_BODY_LIMIT))
        .route_layer(limit)
}

/// The operator API; a write's token is checked before its body is read.
fn api_routes(state: &AppState, read_timeout: std::time::Duration) -> Router<AppState> {
    let limit = middleware::from_fn_with_state(
        BodyLimit::new(API_BODY_LIMIT, read_timeout),
        limits::bounded,
    );
    Router::new()
        .route("/api/v1/gates", get(api::list).post(api::named::create))
        .route("/api/v1/gates/open", post(api::open))
        .route("/api/v1/gates/close", post(api::close))
        .route(
            "/api/v1/gates/{*key}",
            get(api::show).delete(api::named::retire),
        )
        .route(
            "/api/v1/freezes",
            get(api::freezes::list)
                .post(api::freezes::create)
                .delete(api::freezes::lift),
        )
        .route("/api/v1/waits", get(api::waits))
        .route("/api/v1/audit", get(api::audit))
        .route("/api/v1/outbox", get(api::outbox))
        .route("/api/v1/events", get(api::events))
        .layer(DefaultBodyLimit::max(API_BODY_LIMIT))
        .route_layer(limit)
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            api::token_first,
        ))
}

/// GitHub's and Slack's webhooks, stored by one receipt writer: more
/// deliveries per commit.
fn webhook_routes(
    state: &AppState,
    webhooks: Webhooks,
    read_timeout: std::time::Duration,
) -> Router<AppState> {
    let Webhooks {
        receipts,
        redeliveries,
        readers,
    } = webhooks;
    // A cap per webhook channel (Socket Mode shares Slack's): anyone may
    // send to them, and a flood at one leaves the others their readers.
    let webhook_body = |max, readers: &Arc<Semaphore>| {
        middleware::from_fn_with_state(
            BodyLimit::new(max, read_timeout).shared(readers),
            limits::bounded,
        )
    };
    Router::new()
        .merge(
            github::routes()
                .route_layer(webhook_body(GITHUB_BODY_LIMIT, &readers.github))
                // What can be checked in the headers is, before a reader is taken.
                .route_layer(middleware::from_fn_with_state(
                    state.clone(),
                    github::routes::headers_first,
                ))
                // Outside the body limit: its 503s are refusals too.
                .route_layer(middleware::from_fn_with_state(
                    redeliveries,
                    github::redeliver::note_refusals,
                )),
        )
        .merge(
            slack::routes()
                .route_layer(webhook_body(SLACK_BODY_LIMIT, &readers.slack))
                .route_layer(middleware::from_fn_with_state(
                    state.clone(),
                    slack::routes::headers_first,
                )),
        )
        // Teams' token is checked before its body is read (`teams::routes`).
        .merge(crate::teams::routes(
            state,
            BodyLimit::new(crate::teams::BODY_LIMIT, read_timeout).shared(&readers.teams),
        ))
        .layer(axum::Extension(receipts))
}

/// The layers every route gets, from the outside in: request ids, the access
/// log, metrics (`observe`), the request timeout and panic catching; `checks`
/// (Flagger's gate checks, not empty) answer failures 403 with a reason, `rest`
/// (not empty) 500 or 503. Public so that tests can put failing handlers
/// behind exactly these layers.
pub fn harden(state: AppState, checks: Router<AppState>, rest: Router<AppState>) -> Router {
    let timeout = state.config.limits.request_timeout;
    let tokens = Arc::new(state.config.flagger_tokens().clone());
    let guarded = |routes: Router<AppState>, gate_check: bool| {
        let on = OnFailure {
            gate_check,
            timeout,
        };
        // Panics are caught inside the timeout, and both inside `observe`, so
        // every failure is counted by route.
        routes
            .route_layer(CatchPanicLayer::custom(on))
            .route_layer(middleware::from_fn_with_state(on, guard::deadline))
    };
    Router::new()
        .merge(guarded(checks, true))
        .merge(guarded(rest, false))
        .route_layer(middleware::from_fn_with_state(state.clone(), observe))
        .fallback(not_found)
        // The access log (`http::access`): at debug for routes machines poll.
        .layer(middleware::from_fn_with_state(tokens, access::log))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .with_state(state)
}

/// Counts requests by matched route (bounded cardinality) and refusals by reason.
async fn observe(
    State(state): State<AppState>,
    matched: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let method = req.method().clone();
    let started = Instant::now();
    let response = next.run(req).await;
    let route = matched.as_ref().map_or("unmatched", MatchedPath::as_str);
    count(&state.metrics, route, &method, started, &response);
    response
}

/// What `observe` counts of one answered request.
pub(super) fn count(
    m: &Metrics,
    route: &str,
    method: &Method,
    started: Instant,
    response: &Response,
) {
    let status = response.status();
    m.http_requests
        .get_or_create(&HttpLabels {
            method: method.as_str().to_string(),
            route: route.to_string(),
            status: status.as_u16(),
        })
        .inc();
    m.http_duration
        .get_or_create(&RouteLabels {
            route: route.to_string(),
        })
        .observe(started.elapsed().as_secs_f64());
    if let Some(Failed(cause)) = response.extensions().get::<Failed>() {
        m.http_failures
            .get_or_create(&FailureLabels {
                route: route.to_string(),
                cause,
            })
            .inc();
    } else if let Some(Rejected(reason)) = response.extensions().get::<Rejected>() {
        m.reject(route, reason);
    } else if matches!(
        status.as_u16(),
        400 | 401 | 404 | 405 | 408 | 413 | 415 | 422
    ) {
        // Refused by an extractor before our handler ran (e.g. body too large).
        m.reject(route, status.as_str());
    }
}

async fn not_found(State(state): State<AppState>) -> Response {
    state.metrics.reject("unmatched", "not_found");
    Reject::not_found(
        "no such route: Flagger gates are /gates/<kind>/…, the API is /api/v1/gates, webhooks are /webhooks/…",
    )
    .into_response()
}
