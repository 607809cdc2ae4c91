//! The pages under `/ui` for release managers (docs/web.md): what waits now,
//! one gate, one pull request, the audit log and the notifications' health,
//! server-rendered from `templates/web/`, kept current by server-sent events.
//! Sign-in (admin token, a trusted proxy's header, GitHub OAuth) lets people
//! act through the same command path as a PR comment or a Slack click.
//!
//! A channel like the others: it reads the core's read models, hands commands
//! to `core::dispatch`, and learns who may act from an [`Authority`] that
//! bootstrap builds (GitHub's permissions live in another channel).

pub(crate) mod actions;
mod events;
pub(crate) mod pages;
mod permit;
pub(crate) mod session;
pub(crate) mod setup;
pub(crate) mod signin;
mod view;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde::Serialize;
use tokio::sync::Semaphore;

pub use crate::config::Cidr;
pub use permit::Authority;

use crate::config::{Config, UiMode};
use crate::core::watch::Changes;
use crate::core::AppState;
use session::Signer;

/// Open pages listening for changes at once, per replica; more are refused
/// (503) and fall back to reloading by hand.
pub const MAX_LIVE_PAGES: usize = 256;

/// The limit on a form's body.
const FORM_BODY_LIMIT: usize = 16 * 1024;

/// Everything the pages need besides [`AppState`], built once in bootstrap.
pub struct Web {
    mode: UiMode,
    signer: Signer,
    /// The operator tokens configured now, by fingerprint: whom each names.
    operators: HashMap<String, String>,
    session_ttl: Duration,
    oauth: Option<signin::OAuth>,
    proxies: Vec<Cidr>,
    public_url: Option<String>,
    authority: Option<Arc<dyn Authority>>,
    changes: Changes,
    live_pages: Arc<Semaphore>,
    /// How long one event stream lasts before the page reconnects (below the
    /// server's idle timeout, which would cut it less politely).
    stream_lifetime: Duration,
    /// Where the set-up page writes the GitHub App's credentials, if anywhere.
    app_secret: std::sync::OnceLock<setup::AppSecret>,
}

impl Web {
    pub fn new(
        config: &Config,
        changes: Changes,
        authority: Option<Arc<dyn Authority>>,
    ) -> anyhow::Result<Self> {
        let ui = &config.ui;
        let proxies = ui
            .trusted_proxies
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<Cidr>()
                    .map_err(|e| anyhow::anyhow!("[ui] trusted_proxies: {e}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let signer = Signer::new(ui.session_key.as_ref());
        let operators = crate::http::auth::operator_hashes(config)
            .into_iter()
            .map(|(name, hash)| (signer.fingerprint(&hash), name))
            .collect();
        Ok(Self {
            mode: ui.mode,
            signer,
            operators,
            session_ttl: config.limits.ui_session_ttl,
            oauth: signin::OAuth::from_config(config)?,
            proxies,
            public_url: config
                .public_url
                .as_ref()
                .map(|u| u.trim().trim_end_matches('/').to_string())
                .filter(|u| !u.is_empty()),
            authority,
            changes,
            live_pages: Arc::new(Semaphore::new(MAX_LIVE_PAGES)),
            stream_lifetime: (config.limits.idle_timeout / 2).min(Duration::from_secs(60)),
            app_secret: std::sync::OnceLock::new(),
        })
    }
}

/// The routes under `/ui` (none when `GATEBOT_UI=off`), and `/` sending people there.
pub fn routes(web: Arc<Web>) -> Router<AppState> {
    if web.mode == UiMode::Off {
        return Router::new();
    }
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui") }))
        .route("/ui", get(pages::waiting))
        .route("/ui/", get(|| async { Redirect::to("/ui") }))
        .route("/ui/gates/{*key}", get(pages::gate))
        .route("/ui/loadtester/{*key}", get(pages::legacy_gate))
        .route("/ui/prs/{owner}/{repo}/{number}", get(pages::pull_request))
        .route("/ui/audit", get(pages::audit))
        .route("/ui/health", get(pages::health))
        .route("/ui/events", get(events::stream))
        .route("/ui/assets/ui.js", get(asset_js))
        .route("/ui/assets/ui.css", get(asset_css))
        .route("/ui/signin", get(signin::page))
        .route("/ui/signin/token", post(signin::token))
        .route("/ui/signin/github", get(signin::github))
        .route("/ui/signin/github/callback", get(signin::callback))
        .route("/ui/signout", post(signin::signout))
        .route("/ui/setup/github", get(setup::page))
        .route("/ui/setup/github/callback", get(setup::callback))
        .route("/ui/setup/github/confirm", post(setup::confirm))
        .route("/ui/act", post(actions::act))
        .layer(axum::extract::DefaultBodyLimit::max(FORM_BODY_LIMIT))
        .layer(middleware::from_fn(secure_headers))
        .layer(Extension(web))
}

/// No inline script or style, no framing, nothing from elsewhere.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

/// [`CSP`] with one more origin that forms may be sent to.
fn csp_with_form_action(origin: &str) -> String {
    CSP.replace(
        "form-action 'self'",
        &format!("form-action 'self' {origin}"),
    )
}

async fn secure_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    // A page that sends a form elsewhere (setup) sets its own, stricter than none.
    h.entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(CSP));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

const UI_JS: &str = include_str!("assets/ui.js");
const UI_CSS: &str = include_str!("assets/ui.css");

async fn asset_js() -> Response {
    asset("text/javascript; charset=utf-8", UI_JS)
}

async fn asset_css() -> Response {
    asset("text/css; charset=utf-8", UI_CSS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// A form sent from gatebot's own pages, as far as the browser says: not
/// `Sec-Fetch-Site: cross-site` (nor `same-site`, another host of the
/// domain), and its `Origin` (else its `Referer`), when it has one, is this
/// server's: its public URL's origin, or the host the request was sent to.
/// On top of the CSRF token, for the forms whose effect reaches outside.
fn same_origin(web: &Web, headers: &axum::http::HeaderMap) -> Result<(), Problem> {
    let refused = |why: &str| {
        Problem::forbidden(format!(
            "refused: {why}; open the page on gatebot itself and send its form from there"
        ))
    };
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        if matches!(site.trim(), "cross-site" | "same-site") {
            return Err(refused("this form was sent from another site"));
        }
    }
    let from = match (text(header::ORIGIN), text(header::REFERER)) {
        (Some(origin), _) => origin,
        (None, Some(referer)) => referer,
        (None, None) => return Ok(()),
    };
    let Some(from) = reqwest::Url::parse(from.trim())
        .ok()
        .filter(|u| u.has_host())
    else {
        return Err(refused("this form was sent from a page of no known origin"));
    };
    let origin = from.origin().ascii_serialization();
    let public = web
        .public_url
        .as_deref()
        .and_then(|u| reqwest::Url::parse(u).ok())
        .map(|u| u.origin().ascii_serialization());
    let host = text(header::HOST)
        .and_then(|h| reqwest::Url::parse(&format!("{}://{}", from.scheme(), h.trim())).ok())
        .map(|u| u.origin().ascii_serialization());
    if public.as_deref() == Some(origin.as_str()) || host.as_deref() == Some(origin.as_str()) {
        return Ok(());
    }
    Err(refused("this form was sent from another site"))
}

/// A page that could not be shown, or a refusal, said in a page.
#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    title: &'static str,
    message: String,
}

impl Problem {
    fn new(status: StatusCode, title: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            title,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Bad request", message)
    }

    fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "Refused", message)
    }

    fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "Try again", message)
    }
}

impl From<crate::store::StoreError> for Problem {
    fn from(e: crate::store::StoreError) -> Self {
        tracing::warn!(error = %e, "a page could not read the store");
        Self::unavailable("gatebot cannot read its store right now: reload in a moment")
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        // Rendered without the shared templates: a failing template must not
        // hide the reason. Escaped by hand, the one place that does.
        let body = format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{title} · gatebot</title><link rel=\"stylesheet\" href=\"/ui/assets/ui.css\"></head>\
             <body><main class=\"problem\"><h1>{title}</h1><p id=\"problem\">{message}</p>\
             <p><a href=\"/ui\">Back to what is waiting</a></p></main></body></html>",
            title = escape(self.title),
            message = escape(&self.message),
        );
        (self.status, Html(body)).into_response()
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Renders `templates/web/<name>` (HTML-escaped by its extension).
fn render(state: &AppState, name: &str, ctx: impl Serialize) -> Result<Response, Problem> {
    match state.templates.render(&format!("web/{name}"), ctx) {
        Ok(html) => Ok(Html(html).into_response()),
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "a page template failed");
            Err(Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Page failed",
                format!("{e:#}"),
            ))
        }
    }
}

/// A gate page's address: `/ui` and the key's path.
pub fn gate_path(key: &crate::gate::GateKey) -> String {
    format!("/ui{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_are_escaped() {
        assert_eq!(
            escape("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
    }
}
