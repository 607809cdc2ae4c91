//! `/ui/setup/github`: gatebot's GitHub App from GitHub's manifest flow
//! (docs/github.md). An operator signed in with a token posts the manifest to
//! GitHub (its own host for GitHub Enterprise), GitHub sends the browser back
//! with a code, the operator confirms, and gatebot trades the code for the
//! App's id, private key and webhook secret, which it writes into its Secret
//! or shows once, and never keeps or logs.
//!
//! The credentials in place are replaced only by a deliberate act of the
//! operator who started: the `state` is bound to that sign-in, good for
//! [`TRIP_MS`] and used once (on every replica); GitHub's way back (a GET
//! anyone can make a browser send) only asks; the confirmation is a POST
//! with the session's CSRF token, from gatebot's own pages.

use std::time::Duration;

use axum::extract::{Form, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::session::Via;
use super::view::Viewer;
use super::{render, Problem};
use crate::core::AppState;

/// How long the form's `state` is good for, from the set-up page to the
/// confirmation: creating the App on GitHub takes a minute or two.
const TRIP_MS: i64 = 10 * 60 * 1000;

/// What a `state` is sealed for.
const STATE_PURPOSE: &str = "github-app";

/// GitHub's answer to a conversion is a few KB; anything much larger is not it.
const MAX_ANSWER: usize = 64 * 1024;

/// What the App asks for: the same as deploy/github-app-manifest.json, with
/// this server's URLs in place of the example's.
const MANIFEST: &str = include_str!("../../deploy/github-app-manifest.json");
const EXAMPLE_URL: &str = "https://gatebot.example.com";

#[derive(Deserialize)]
pub struct Start {
    /// Create the App under this organization instead of the signed-in user.
    #[serde(default)]
    org: String,
    /// The App's name, unique on the GitHub host.
    #[serde(default)]
    name: String,
}

pub async fn page(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<Start>,
) -> Result<Response, Problem> {
    operator(&viewer)?;
    let public = viewer.web.public_url.clone().ok_or_else(|| {
        Problem::bad_request(
            "set GATEBOT_PUBLIC_URL to where GitHub reaches gatebot (https://gatebot.example.com): \
             the App's webhook and the way back from GitHub are under it",
        )
    })?;
    let org = checked("org", q.org.trim(), 39)?;
    let name = match checked("name", q.name.trim(), 34)? {
        "" => "gatebot",
        given => given,
    };
    let web = github_web(&state);
    let target = match org {
        "" => format!("{web}/settings/apps/new"),
        org => format!("{web}/organizations/{org}/settings/apps/new"),
    };
    let sealed = new_state(&viewer, state.clock.now_ms())?;
    let action = format!(
        "{target}?state={}",
        form_urlencoded::byte_serialize(sealed.as_bytes()).collect::<String>()
    );
    let manifest = manifest(&public, name)?;
    // Shown from the manifest sent, so the page can't list less than it asks.
    let asks = asks(&manifest);
    let manifest =
        serde_json::to_string(&manifest).map_err(|e| Problem::unavailable(e.to_string()))?;
    let mut response = render(
        &state,
        "setup_github.html.j2",
        json!({
            "base": viewer.base("/ui/setup/github"), "action": action, "manifest": manifest,
            "org": org, "name": name, "public": public, "web": web,
            "permissions": asks.permissions, "events": asks.events,
        }),
    )?;
    // The one form that leaves gatebot: form-action names GitHub's origin too.
    let csp = super::csp_with_form_action(&origin(&web)?);
    let csp = HeaderValue::from_str(&csp)
        .map_err(|_| Problem::bad_request("GATEBOT_GITHUB_API_URL is not a usable URL"))?;
    response
        .headers_mut()
        .insert(header::CONTENT_SECURITY_POLICY, csp);
    Ok(response)
}

#[derive(Deserialize)]
pub struct Back {
    #[serde(default)]
    code: String,
    #[serde(default)]
    state: String,
}

/// What GitHub gives for the App, shown once.
#[derive(Debug, Deserialize, Serialize)]
struct CreatedApp {
    id: u64,
    slug: String,
    html_url: String,
    pem: String,
    webhook_secret: Option<String>,
    client_id: String,
    client_secret: String,
}

/// A `state` for this operator's trip to GitHub: until when it is good, a
/// nonce (each trip its own), and its session's binding, sealed.
fn new_state(viewer: &Viewer, now: i64) -> Result<String, Problem> {
    let binding = session_binding(viewer)?;
    let until = now.saturating_add(TRIP_MS);
    let nonce = super::session::random_token();
    Ok(viewer
        .web
        .signer
        .seal(STATE_PURPOSE, &format!("{until}.{nonce}.{binding}")))
}

/// What ties a `state` to the sign-in that made it: an HMAC of the session's
/// id (the id itself never leaves in a URL).
fn session_binding(viewer: &Viewer) -> Result<String, Problem> {
    let id = viewer
        .session
        .as_ref()
        .and_then(|s| s.id.as_deref())
        .ok_or_else(|| Problem::forbidden(SIGN_IN))?;
    Ok(viewer.web.signer.sign("github-app-session", id)[..32].to_string())
}

/// A `state` checked: sealed by this server, still good, made by this very
/// sign-in. Returns until when it is good and its key in the used-once table.
fn checked_state(viewer: &Viewer, sealed: &str, now: i64) -> Result<(i64, String), Problem> {
    let refused = |why: &str| Problem::forbidden(format!("{why}: start again at /ui/setup/github"));
    let value = viewer
        .web
        .signer
        .open(STATE_PURPOSE, sealed)
        .ok_or_else(|| refused("GitHub's answer carries no valid state"))?;
    let mut parts = value.splitn(3, '.');
    let (Some(until), Some(_nonce), Some(binding)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(refused("GitHub's answer carries no valid state"));
    };
    let until: i64 = until
        .parse()
        .map_err(|_| refused("GitHub's answer carries no valid state"))?;
    if until <= now {
        return Err(refused(
            "this set-up took longer than 10 minutes, so its state is no longer good",
        ));
    }
    let mine = session_binding(viewer)?;
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        binding.as_bytes(),
        mine.as_bytes(),
    )) {
        return Err(refused(
            "this set-up was started from another sign-in, and only that one may finish it",
        ));
    }
    let key = hex::encode(crate::gate::tokens::sha256(&format!(
        "{STATE_PURPOSE}:{sealed}"
    )));
    Ok((until, key))
}

/// A `state` that changed the credentials already (a replayed way back).
const STATE_USED: &str =
    "this set-up was finished already, and its state works once: start again at /ui/setup/github";

const SIGN_IN: &str =
    "sign in with the admin token (or your own operator token) at /ui/signin to create the GitHub App";

/// The code as GitHub gives it, or a page saying to start again.
fn checked_code(code: &str) -> Result<&str, Problem> {
    let code = code.trim();
    let well_formed = (1..=128).contains(&code.len())
        && code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !well_formed {
        return Err(Problem::bad_request(
            "GitHub's answer has no usable code: start again at /ui/setup/github",
        ));
    }
    Ok(code)
}

/// GitHub's way back: nothing is traded or written yet, the operator is asked.
/// A link can make a browser send this GET; only the POST below acts.
pub async fn callback(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<Back>,
) -> Result<Response, Problem> {
    operator(&viewer)?;
    let (_, used_key) = checked_state(&viewer, &q.state, state.clock.now_ms())?;
    let code = checked_code(&q.code)?;
    if state.records.oauth_state_used(&used_key).await? {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "Used already",
            STATE_USED,
        ));
    }
    let csrf = viewer
        .session
        .as_ref()
        .map(|s| s.csrf.clone())
        .ok_or_else(|| Problem::forbidden(SIGN_IN))?;
    let secret = viewer
        .web
        .app_secret
        .get()
        .map(|to| format!("{}/{}", to.cluster.namespace(), to.name));
    render(
        &state,
        "setup_github_confirm.html.j2",
        json!({
            "base": viewer.base("/ui/setup/github"), "code": code, "state": q.state,
            "csrf": csrf, "secret": secret,
        }),
    )
}

#[derive(Deserialize)]
pub struct Confirm {
    #[serde(default)]
    code: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    csrf: String,
}

/// The operator's confirmation: the code becomes the App's credentials,
/// written into the Secret (replacing what is there) or shown once.
pub async fn confirm(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    Form(form): Form<Confirm>,
) -> Result<Response, Problem> {
    super::same_origin(&viewer.web, &headers)?;
    operator(&viewer)?;
    if let Some(session) = &viewer.session {
        super::actions::check_csrf(session, &form.csrf)?;
    }
    let now = state.clock.now_ms();
    let (until, used_key) = checked_state(&viewer, &form.state, now)?;
    let code = checked_code(&form.code)?;
    // Spent before GitHub is asked: of two confirmations at once, on any
    // replicas, one goes on. GitHub's code works once anyway.
    let first = state
        .records
        .use_oauth_state(&used_key, until, now)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "cannot mark a set-up state used");
            Problem::unavailable("gatebot cannot write to its store right now: try again")
        })?;
    if !first {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "Used already",
            STATE_USED,
        ));
    }
    let app = convert(&state, code).await?;
    tracing::info!(app_id = app.id, slug = %app.slug, "GitHub App created from the manifest");
    let (written, unwritten) = match viewer.web.app_secret.get() {
        None => (None, None),
        Some(to) => match to.write(&app).await {
            Ok(written) => (Some(written), None),
            Err(why) => (None, Some(why)),
        },
    };
    render(
        &state,
        "setup_github_done.html.j2",
        json!({
            "base": viewer.base("/ui/setup/github"), "app": app,
            "install": format!("{}/installations/new", app.html_url.trim_end_matches('/')),
            "written": written, "unwritten": unwritten,
        }),
    )
}

/// The Secret of gatebot's namespace the App's credentials are written into
/// (`[kubernetes] app_secret`), when gatebot may patch it.
pub struct AppSecret {
    pub cluster: crate::kubernetes::Cluster,
    pub name: String,
}

/// Where the credentials went, for the page.
#[derive(Serialize)]
struct Written {
    secret: String,
    keys: Vec<&'static str>,
}

impl AppSecret {
    /// Writes the App's credentials under the chart's key names. A failure
    /// is said on the page, which then shows them as without a Secret.
    async fn write(&self, app: &CreatedApp) -> Result<Written, String> {
        let mut pairs = vec![
            ("github-app-id", app.id.to_string()),
            ("github-app-private-key", app.pem.clone()),
            ("ui-github-client-id", app.client_id.clone()),
            ("ui-github-client-secret", app.client_secret.clone()),
        ];
        if let Some(secret) = &app.webhook_secret {
            pairs.push(("github-webhook-secret", secret.clone()));
        }
        let keys = pairs.iter().map(|(k, _)| *k).collect();
        let data = pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let secret = format!("{}/{}", self.cluster.namespace(), self.name);
        match self.cluster.write_secret(&self.name, &data).await {
            Ok(()) => {
                tracing::info!(app_id = app.id, %secret, "GitHub App credentials written into the Secret");
                Ok(Written { secret, keys })
            }
            Err(e) => {
                tracing::warn!(app_id = app.id, %secret, error = %e, "cannot write the GitHub App's credentials into the Secret: shown on the page instead");
                Err(e.to_string())
            }
        }
    }
}

impl super::Web {
    /// Lets the set-up page write the App's credentials into a Secret (once, at start).
    pub fn write_app_to(&self, secret: AppSecret) {
        let _ = self.app_secret.set(secret);
    }
}

/// `POST /app-manifests/{code}/conversions`: no token, the code is the credential.
async fn convert(state: &AppState, code: &str) -> Result<CreatedApp, Problem> {
    let client = crate::outbound::client(&state.config.outbound, Duration::from_secs(10))
        .map_err(|e| Problem::unavailable(format!("{e:#}")))?;
    let api = state.config.github.api_url.trim_end_matches('/');
    let response = client
        .post(format!("{api}/app-manifests/{code}/conversions"))
        .header(header::ACCEPT, "application/vnd.github+json")
        .header(header::USER_AGENT, "gatebot")
        .send()
        .await
        .map_err(|e| {
            Problem::unavailable(format!(
                "cannot reach GitHub at {api}: {}",
                crate::outbound::why(&e)
            ))
        })?;
    let status = response.status();
    let body = bounded_body(response).await?;
    if !status.is_success() {
        return Err(Problem::new(
            StatusCode::BAD_GATEWAY,
            "GitHub refused",
            format!(
                "GitHub answered {status} to the code: a code works once and for an hour; \
                 start again at /ui/setup/github"
            ),
        ));
    }
    serde_json::from_slice(&body).map_err(|e| {
        Problem::new(
            StatusCode::BAD_GATEWAY,
            "GitHub refused",
            format!("GitHub's answer is not an App: {e}"),
        )
    })
}

/// The answer's body, read up to [`MAX_ANSWER`]: whatever answers there, it
/// cannot make gatebot hold more.
async fn bounded_body(mut response: reqwest::Response) -> Result<Vec<u8>, Problem> {
    let too_large = || {
        Problem::new(
            StatusCode::BAD_GATEWAY,
            "GitHub refused",
            "GitHub's answer is too large to be an App",
        )
    };
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Problem::unavailable(format!("GitHub's answer was cut off: {e}")))?
    {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Only an operator (signed in with a token) creates the App gatebot acts as.
fn operator(viewer: &Viewer) -> Result<(), Problem> {
    match &viewer.session {
        Some(s) if s.via == Via::Admin => Ok(()),
        _ => Err(Problem::forbidden(SIGN_IN)),
    }
}

/// An organization or App name as GitHub allows them; empty when not given.
fn checked<'a>(field: &str, value: &'a str, max: usize) -> Result<&'a str, Problem> {
    let ok = value.len() <= max
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(value)
    } else {
        Err(Problem::bad_request(format!(
            "{field}: at most {max} letters, digits, `-` and `_`"
        )))
    }
}

/// GitHub's web pages: github.com, or GitHub Enterprise's own host.
fn github_web(state: &AppState) -> String {
    state.config.github.web_url()
}

fn origin(url: &str) -> Result<String, Problem> {
    reqwest::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .map_err(|_| Problem::bad_request("GATEBOT_GITHUB_API_URL is not a URL"))
}

/// The shipped manifest with this server's webhook URL, the way back and the
/// sign-in callback (an App's client id and secret sign people in too).
fn manifest(public: &str, name: &str) -> Result<serde_json::Value, Problem> {
    let mut m: serde_json::Value = serde_json::from_str(&MANIFEST.replace(EXAMPLE_URL, public))
        .map_err(|e| Problem::unavailable(format!("the built-in manifest is broken: {e}")))?;
    m["name"] = json!(name);
    m["redirect_url"] = json!(format!("{public}/ui/setup/github/callback"));
    m["callback_urls"] = json!([format!("{public}/ui/signin/github/callback")]);
    Ok(m)
}

/// What a manifest asks GitHub for, as the page lists it.
struct Asks {
    /// `name: access`, in the manifest's order.
    permissions: Vec<String>,
    events: Vec<String>,
}

fn asks(manifest: &serde_json::Value) -> Asks {
    let permissions = manifest["default_permissions"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, access)| format!("{name}: {}", access.as_str().unwrap_or("?")))
        .collect();
    let events = manifest["default_events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str().map(str::to_owned))
        .collect();
    Asks {
        permissions,
        events,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_manifest_points_at_this_server() {
        let m = super::manifest("https://gb.acme.test", "gatebot-acme").unwrap();
        assert_eq!(
            m["hook_attributes"]["url"],
            "https://gb.acme.test/webhooks/github"
        );
        assert_eq!(
            m["redirect_url"],
            "https://gb.acme.test/ui/setup/github/callback"
        );
        assert_eq!(m["name"], "gatebot-acme");
        assert_eq!(
            m["default_events"],
            serde_json::json!([
                "issue_comment",
                "pull_request",
                "check_run",
                "pull_request_review",
                "deployment_protection_rule"
            ])
        );
        assert_eq!(m["default_permissions"]["deployments"], "write");
    }

    /// docs/github.md's table of permissions and its events are what the
    /// manifest asks for, no fewer and no more.
    #[test]
    fn the_docs_list_what_the_manifest_asks() {
        let doc = include_str!("../../docs/github.md");
        let snake = |s: &str| s.trim().to_lowercase().replace(' ', "_");
        let mut documented: Vec<String> = doc
            .lines()
            .filter_map(|l| {
                l.strip_prefix("| Repository → ")
                    .or_else(|| l.strip_prefix("| Organization → "))
            })
            .filter_map(|l| l.split('|').next().map(snake))
            .collect();
        documented.sort();
        let asks = super::asks(&super::manifest("https://gb.acme.test", "gatebot").unwrap());
        let mut asked: Vec<String> = asks
            .permissions
            .iter()
            .filter_map(|p| p.split(':').next().map(str::to_owned))
            .collect();
        asked.sort();
        assert_eq!(documented, asked);
        let events = doc
            .lines()
            .find(|l| l.starts_with("| Subscribe to events |"))
            .unwrap();
        let mut documented: Vec<String> =
            events.split("**").skip(1).step_by(2).map(snake).collect();
        documented.sort();
        let mut asked = asks.events;
        asked.sort();
        assert_eq!(documented, asked);
    }
}
