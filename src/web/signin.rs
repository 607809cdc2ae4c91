//! Signing in and out: an operator's token (a form: the admin token or a
//! named one), GitHub's OAuth web flow (`state` in a signed, short-lived
//! cookie, checked on the way back and used once), and signing out, which ends
//! the session on every replica. A trusted proxy's header needs no step here
//! (`session`).

use std::time::Duration;

use axum::extract::{Form, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::session::{self, Session, Via, OAUTH_COOKIE, SESSION_COOKIE};
use super::view::Viewer;
use super::{render, Problem};
use crate::config::Config;
use crate::core::AppState;
use crate::http::auth::operator_of;

/// How long the trip to GitHub and back may take.
const OAUTH_TRIP: Duration = Duration::from_secs(600);

/// GitHub's OAuth web flow, when configured.
pub struct OAuth {
    client_id: String,
    client_secret: SecretString,
    /// `https://github.com`: /login/oauth/authorize and /login/oauth/access_token.
    web_url: String,
    /// GitHub's API, where `GET /user` names the person.
    api_url: String,
    http: reqwest::Client,
}

static HTTP: crate::outbound::Shared = crate::outbound::Shared::new();

impl OAuth {
    pub fn from_config(config: &Config) -> anyhow::Result<Option<Self>> {
        let ui = &config.ui;
        let (Some(id), Some(secret)) = (&ui.github_client_id, &ui.github_client_secret) else {
            return Ok(None);
        };
        Ok(Some(Self {
            client_id: id.trim().to_string(),
            client_secret: secret.clone(),
            web_url: config.github.web_url(),
            api_url: config.github.api_url.trim_end_matches('/').to_string(),
            http: HTTP.get(Duration::from_secs(10))?,
        }))
    }

    /// The login of whoever GitHub handed `code` to.
    async fn login(&self, code: &str, redirect_uri: &str) -> Result<String, String> {
        #[derive(Deserialize)]
        struct Token {
            access_token: Option<String>,
            error_description: Option<String>,
        }
        #[derive(Deserialize)]
        struct User {
            login: String,
        }
        let token: Token = self
            .http
            .post(format!("{}/login/oauth/access_token", self.web_url))
            .header(header::ACCEPT, "application/json")
            .form(&[
                ("client_id", self.client_id.as_str()),
                ("client_secret", self.client_secret.expose_secret()),
                ("code", code),
                ("redirect_uri", redirect_uri),
            ])
            .send()
            .await
            .map_err(|e| format!("GitHub did not answer: {e}"))?
            .json()
            .await
            .map_err(|e| format!("GitHub's token answer does not read: {e}"))?;
        let Some(access) = token.access_token else {
            return Err(format!(
                "GitHub gave no token: {}",
                token.error_description.unwrap_or_default()
            ));
        };
        let user: User = self
            .http
            .get(format!("{}/user", self.api_url))
            .bearer_auth(access)
            .header(header::ACCEPT, "application/vnd.github+json")
            .send()
            .await
            .map_err(|e| format!("GitHub did not answer: {e}"))?
            .error_for_status()
            .map_err(|e| format!("GitHub would not name you: {e}"))?
            .json()
            .await
            .map_err(|e| format!("GitHub's user answer does not read: {e}"))?;
        Ok(user.login)
    }
}

/// Where GitHub sends people back: under GATEBOT_PUBLIC_URL, else this host.
fn callback_url(viewer: &Viewer, headers: &HeaderMap) -> String {
    let base = viewer.web.public_url.clone().unwrap_or_else(|| {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        format!("http://{host}")
    });
    format!("{base}/ui/signin/github/callback")
}

#[derive(Serialize)]
struct SigninPage<'a> {
    base: super::view::Base<'a>,
    me: Option<&'a Session>,
    github: bool,
    token: bool,
    proxy: bool,
    csrf: String,
    message: Option<&'a str>,
}

fn trip_ms() -> i64 {
    i64::try_from(OAUTH_TRIP.as_millis()).unwrap_or(i64::MAX)
}

fn signin_csrf(state: &AppState, viewer: &Viewer) -> String {
    // The sign-in form has no session yet: a signed, expiring token stands in.
    let until = state.clock.now_ms().saturating_add(trip_ms());
    viewer.web.signer.seal("signin", &until.to_string())
}

/// Compares secrets in constant time (hashing first hides the length too).
fn same_secret(given: &str, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    sha256(given.trim()).ct_eq(&sha256(expected)).into()
}

fn sha256(text: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes()).into()
}

fn signin_page(
    state: &AppState,
    viewer: &Viewer,
    message: Option<&str>,
) -> Result<Response, Problem> {
    render(
        state,
        "signin.html.j2",
        SigninPage {
            base: viewer.base("/ui/signin"),
            me: viewer.session.as_ref(),
            github: viewer.web.oauth.is_some(),
            token: state.config.has_operators(),
            proxy: !viewer.web.proxies.is_empty(),
            csrf: signin_csrf(state, viewer),
            message,
        },
    )
}

pub async fn page(State(state): State<AppState>, viewer: Viewer) -> Result<Response, Problem> {
    signin_page(&state, &viewer, None)
}

#[derive(Deserialize)]
pub struct TokenForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
}

/// An operator's token, typed into a form, becomes that operator's session,
/// bound to the token: it ends when the token is no longer configured.
pub async fn token(
    State(state): State<AppState>,
    viewer: Viewer,
    Form(form): Form<TokenForm>,
) -> Result<Response, Problem> {
    let fresh = viewer
        .web
        .signer
        .open("signin", &form.csrf)
        .and_then(|until| until.parse::<i64>().ok())
        .is_some_and(|until| until > state.clock.now_ms());
    if !fresh {
        return Err(Problem::forbidden(
            "this form carries no valid CSRF token: reload the sign-in page and try again",
        ));
    }
    if !state.config.has_operators() {
        return Err(Problem::forbidden(
            "this server has no GATEBOT_ADMIN_TOKEN or GATEBOT_API_TOKENS, so nobody signs in with one",
        ));
    }
    let Some(name) = operator_of(&state.config, &form.token) else {
        let mut r = signin_page(
            &state,
            &viewer,
            Some("That is not this server's admin token or one of its named tokens."),
        )?;
        *r.status_mut() = StatusCode::UNAUTHORIZED;
        return Ok(r);
    };
    let fingerprint = viewer.web.signer.fingerprint(&sha256(form.token.trim()));
    Ok(signed_in(
        &state,
        &viewer,
        &name,
        Via::Admin,
        Some(fingerprint),
    ))
}

fn signed_in(
    state: &AppState,
    viewer: &Viewer,
    login: &str,
    via: Via,
    token: Option<String>,
) -> Response {
    let ttl = viewer.web.session_ttl;
    let session = Session::new(
        login,
        via,
        state.clock.now_ms(),
        i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
        token,
    );
    let cookie = session::set_cookie(
        SESSION_COOKIE,
        &session.cookie_value(&viewer.web.signer),
        ttl.as_secs(),
    );
    tracing::info!(login, via = ?via, "signed in to the web pages");
    (
        AppendHeaders([
            (header::SET_COOKIE, cookie),
            (header::SET_COOKIE, session::set_cookie(OAUTH_COOKIE, "", 0)),
        ]),
        Redirect::to("/ui"),
    )
        .into_response()
}

/// Off to GitHub, with a fresh `state` remembered in a signed cookie.
pub async fn github(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let Some(oauth) = &viewer.web.oauth else {
        return Err(Problem::bad_request(
            "Sign in with GitHub is not configured: set GATEBOT_UI_GITHUB_CLIENT_ID and GATEBOT_UI_GITHUB_CLIENT_SECRET",
        ));
    };
    let nonce = session::random_token();
    let until = state.clock.now_ms().saturating_add(trip_ms());
    let cookie = viewer.web.signer.seal("oauth", &format!("{nonce}-{until}"));
    let redirect = callback_url(&viewer, &headers);
    let url = format!(
        "{}/login/oauth/authorize?{}",
        oauth.web_url,
        form_urlencoded::Serializer::new(String::new())
            .append_pair("client_id", &oauth.client_id)
            .append_pair("redirect_uri", &redirect)
            .append_pair("state", &nonce)
            .append_pair("allow_signup", "false")
            .finish()
    );
    Ok((
        [(
            header::SET_COOKIE,
            session::set_cookie(OAUTH_COOKIE, &cookie, OAUTH_TRIP.as_secs()),
        )],
        Redirect::to(&url),
    )
        .into_response())
}

#[derive(Deserialize)]
pub struct Callback {
    code: Option<String>,
    state: Option<String>,
    error_description: Option<String>,
}

/// Back from GitHub: the `state` must be the one this browser was given.
pub async fn callback(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    Query(back): Query<Callback>,
) -> Result<Response, Problem> {
    let Some(oauth) = &viewer.web.oauth else {
        return Err(Problem::bad_request(
            "Sign in with GitHub is not configured",
        ));
    };
    if let Some(why) = back.error_description {
        return Err(Problem::forbidden(format!("GitHub said no: {why}")));
    }
    let now = state.clock.now_ms();
    let expected = session::cookie(&headers, OAUTH_COOKIE)
        .and_then(|sealed| viewer.web.signer.open("oauth", sealed))
        .and_then(|v| v.split_once('-'))
        .and_then(|(nonce, until)| Some((nonce.to_string(), until.parse::<i64>().ok()?)))
        .filter(|(_, until)| *until > now);
    let (Some((expected, until)), Some(given)) = (expected, back.state) else {
        return Err(Problem::forbidden(
            "the sign-in has no state to check (it took too long, or cookies are off): sign in again",
        ));
    };
    if !same_secret(&given, &expected) {
        return Err(Problem::forbidden(
            "the OAuth state does not match the one this browser was given: sign in again",
        ));
    }
    let Some(code) = back.code.filter(|c| !c.is_empty()) else {
        return Err(Problem::bad_request("GitHub sent no code"));
    };
    let state_hash = hex::encode(sha256(&expected));
    if state.records.oauth_state_used(&state_hash).await? {
        return Err(Problem::forbidden(STATE_USED));
    }
    let login = oauth
        .login(&code, &callback_url(&viewer, &headers))
        .await
        .map_err(Problem::unavailable)?;
    if !session::is_login(&login) {
        return Err(Problem::forbidden(format!(
            "`{login}` is not a GitHub login"
        )));
    }
    // Marked used only once GitHub named someone, so that the table grows
    // with real sign-ins, not with whoever calls this route; two replays at
    // once still get one session between them.
    if !state
        .records
        .use_oauth_state(&state_hash, until, now)
        .await?
    {
        return Err(Problem::forbidden(STATE_USED));
    }
    Ok(signed_in(&state, &viewer, &login, Via::Github, None))
}

/// A callback whose `state` signed someone in already (a replayed URL).
const STATE_USED: &str = "this sign-in was used already: sign in again";

#[derive(Deserialize)]
pub struct SignoutForm {
    #[serde(default)]
    csrf: String,
}

/// Ends the session for every replica (a copy of the cookie is refused until
/// it would have expired), then removes the cookie.
pub async fn signout(
    State(state): State<AppState>,
    viewer: Viewer,
    Form(form): Form<SignoutForm>,
) -> Result<Response, Problem> {
    if let Some(s) = &viewer.session {
        super::actions::check_csrf(s, &form.csrf)?;
        if let Some(id) = &s.id {
            state
                .records
                .revoke_session(id, s.expires, state.clock.now_ms())
                .await
                .map_err(|e| {
                    tracing::warn!(error = %e, "cannot record a sign-out");
                    Problem::unavailable(
                        "not signed out: gatebot cannot write to its store right now; try again",
                    )
                })?;
            tracing::info!(login = %s.login, "signed out of the web pages");
        }
    }
    Ok((
        [(
            header::SET_COOKIE,
            session::set_cookie(SESSION_COOKIE, "", 0),
        )],
        Redirect::to("/ui"),
    )
        .into_response())
}
