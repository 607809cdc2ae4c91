//! The access log. Every request runs in a `request` span (method, path,
//! request id), so whatever it logs can be told apart. Routes that machines
//! poll (Flagger's checks, probes, the scrape) log their access line at debug:
//! the same line every few seconds per canary says nothing. A check that
//! changed something (a wait, a pin, a new revision, a flipped answer) logs
//! its access line at info, once, naming the change.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use tower_http::request_id::RequestId;
use tracing::{Instrument, Span};

use crate::gate::FlaggerTokens;

/// Put on a gate check's response when the check was written down: what changed.
#[derive(Debug, Clone, Copy)]
pub struct Changed(pub &'static str);

/// Routes polled by machines, whose steady state is not worth a line at info.
pub fn polled(path: &str) -> bool {
    path.starts_with("/gates/")
        || matches!(
            path,
            "/gate/check" | "/rollback/check" | "/healthz" | "/readyz" | "/metrics"
        )
}

/// The access log of every route; `tokens` are what no logged path may show.
pub async fn log(State(tokens): State<Arc<FlaggerTokens>>, req: Request, next: Next) -> Response {
    // Cheap copies (shared bytes), kept for a line logged after the handler ran.
    let method = req.method().clone();
    let uri = req.uri().clone();
    let matched = req.extensions().get::<MatchedPath>().cloned();
    let id = req
        .extensions()
        .get::<RequestId>()
        .map(|id| id.header_value().clone());
    let id = id.as_ref().and_then(|v| v.to_str().ok()).unwrap_or("-");
    let shown = match &matched {
        // A gate route the router answers holds an escape `CheckRoute` left
        // to it: its pattern says enough.
        // A route with parameters may hold anything in them (`/ui/gates/{*key}`).
        Some(route) if polled(route.as_str()) || route.as_str().contains('{') => {
            Shown::Pattern(route.as_str())
        }
        Some(_) => Shown::Path(uri.path()),
        None => Shown::Unmatched(uri.path().len()),
    };
    logged(
        &method,
        polled(uri.path()),
        shown,
        id,
        &tokens,
        next.run(req),
    )
    .await
}

/// What an access line shows as a request's path. A token typed into a path
/// a little wrong (`/gates/t:<token>/…`, `/gates/t%2F<token>/…`) can't be
/// masked by a rule, so only what a route matched is shown as written.
#[derive(Debug, Clone, Copy)]
pub enum Shown<'a> {
    /// A path a route matched, with its secrets masked (`Redacted`).
    Path(&'a str),
    /// A route's pattern, as `/gates/t/{token}/{kind}`.
    Pattern(&'a str),
    /// A gate check: its kind when gatebot knows it, and of its scope only
    /// a PR's number (`scope_shown`).
    Check {
        token: bool,
        kind: Option<&'a str>,
        scope: Option<&'a str>,
    },
    /// No route matched: only the path's length.
    Unmatched(usize),
}

/// Runs `answer` in the request's span and logs its access line; `polled`
/// (see `polled`) logs the steady state at debug.
pub async fn logged(
    method: &Method,
    polled: bool,
    shown: Shown<'_>,
    id: &str,
    tokens: &FlaggerTokens,
    answer: impl Future<Output = Response>,
) -> Response {
    let path = Logged { shown, tokens };
    let inner = span(!polled, method, &path, id);
    let started = Instant::now();
    let response = answer.instrument(inner.clone()).await;
    let latency = format_args!("{} ms", started.elapsed().as_millis());
    let status = response.status().as_u16();
    let changed = response.extensions().get::<Changed>().map(|c| c.0);
    let failed = response.status().is_server_error();
    if polled && changed.is_none() && !failed {
        let _in = inner.enter();
        tracing::debug!(%latency, status, "finished processing request");
        return response;
    }
    // A polled route's line at info gets the info span its steady state goes without.
    let outer = if polled {
        span(true, method, &path, id)
    } else {
        inner
    };
    let _in = outer.enter();
    match changed {
        Some(change) => {
            tracing::info!(%latency, status, change, "finished processing request: {change}")
        }
        None if failed => tracing::error!(%latency, status, "response failed"),
        None => tracing::info!(%latency, status, "finished processing request"),
    }
    response
}

/// The `request` span, at info or (for a polled route) at debug: a span at
/// info costs every request its formatted fields even when nothing is logged.
fn span(info: bool, method: &Method, path: &Logged<'_>, id: &str) -> Span {
    if info {
        tracing::info_span!("request", %method, path = %path, request_id = %id)
    } else {
        tracing::debug_span!("request", %method, path = %path, request_id = %id)
    }
}

/// A request's path as its access line shows it.
pub struct Logged<'a> {
    shown: Shown<'a>,
    tokens: &'a FlaggerTokens,
}

impl std::fmt::Display for Logged<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tokens = self.tokens;
        match self.shown {
            Shown::Path(path) => Redacted { path, tokens }.fmt(f),
            Shown::Pattern(pattern) => f.write_str(pattern),
            Shown::Unmatched(len) => write!(f, "<unmatched: {len} bytes>"),
            Shown::Check { token, kind, scope } => {
                f.write_str(if token { "/gates/t/***/" } else { "/gates/" })?;
                f.write_str(kind.unwrap_or("{kind}"))?;
                match scope {
                    None => Ok(()),
                    Some(scope) if kind.is_some() => f.write_str(&scope_shown(scope)),
                    Some(_) => f.write_str("/{*scope}"),
                }
            }
        }
    }
}

/// A check's scope as logged: a PR's number, never a segment someone typed
/// (a token typed a little wrong would be one): `/pr/42`,
/// `/{owner}/{repo}/pr/42`, else `/{*scope}`.
fn scope_shown(scope: &str) -> String {
    let number = |n: &str| !n.is_empty() && n.len() <= 10 && n.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = scope.split('/').collect();
    match parts.as_slice() {
        ["pr", n] if number(n) => format!("/pr/{n}"),
        [_, _, "pr", n] if number(n) => format!("/{{owner}}/{{repo}}/pr/{n}"),
        _ => "/{*scope}".to_string(),
    }
}

/// A path as logged, with no secret in it whatever was typed: the segment
/// after any `t` segment (as in `/gates/t/<token>/…`, but anywhere, in any
/// case, past empty segments: `//Gates/t//<token>`, `/gate/T/<token>`), and
/// any segment that is one of the Flagger tokens, show as `***`. A segment
/// is compared percent-decoded too. (Query strings, where `?token=` goes,
/// are never logged.) Formatted only when a line is written: the hashing
/// costs a polled route nothing at info.
pub struct Redacted<'a> {
    pub path: &'a str,
    pub tokens: &'a FlaggerTokens,
}

impl Redacted<'_> {
    fn secret(&self, segment: &str, after_t: bool) -> bool {
        after_t
            || (!self.tokens.is_empty()
                && (self.tokens.cluster_of(segment).is_some()
                    || (segment.contains('%')
                        && self.tokens.cluster_of(&decoded(segment)).is_some())))
    }
}

fn is_t(segment: &str) -> bool {
    segment.eq_ignore_ascii_case("t") || decoded(segment).eq_ignore_ascii_case("t")
}

/// A segment's percent-escapes decoded (a malformed one kept as it is).
fn decoded(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escape {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl std::fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut after_t = false;
        for (n, segment) in self.path.split('/').enumerate() {
            if n > 0 {
                f.write_str("/")?;
            }
            if segment.is_empty() {
                continue;
            }
            if self.secret(segment, after_t) {
                f.write_str("***")?;
            } else {
                f.write_str(segment)?;
            }
            after_t = is_t(segment);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Logged, Redacted, Shown};
    use crate::gate::FlaggerTokens;

    fn tokens(token: &str) -> FlaggerTokens {
        format!("prod={}", hex::encode(crate::gate::tokens::sha256(token)))
            .parse()
            .unwrap()
    }

    fn shown(path: &str, tokens: &FlaggerTokens) -> String {
        Redacted { path, tokens }.to_string()
    }

    #[test]
    fn a_flagger_token_in_the_path_is_never_shown() {
        let none = FlaggerTokens::default();
        let table = [
            (
                "/gates/t/s3cret/promote/pr/42",
                "/gates/t/***/promote/pr/42",
            ),
            ("/gates/t/s3cret", "/gates/t/***"),
            ("/gates/promote/pr/42", "/gates/promote/pr/42"),
            ("/healthz", "/healthz"),
            ("/", "/"),
            ("", ""),
            // Mistyped: the segment after any `t`, in any case, anywhere.
            ("//gates/t/s3cret/promote", "//gates/t/***/promote"),
            ("/Gates/t/s3cret/promote", "/Gates/t/***/promote"),
            ("/gate/t/s3cret/promote", "/gate/t/***/promote"),
            ("/gates/T/s3cret/promote", "/gates/T/***/promote"),
            ("/gates/t//s3cret/promote", "/gates/t//***/promote"),
            ("/gates/%74/s3cret/promote", "/gates/%74/***/promote"),
            ("/x/y/t/s3cret", "/x/y/t/***"),
            ("/gates/t/", "/gates/t/"),
            ("/gates/t/t/s3cret", "/gates/t/***/***"),
        ];
        for (path, want) in table {
            assert_eq!(shown(path, &none), want, "{path}");
        }
    }

    #[test]
    fn a_configured_token_is_never_shown_wherever_it_is() {
        let tokens = tokens("s3cret");
        let table = [
            ("/gates/s3cret/promote", "/gates/***/promote"),
            ("/s3cret", "/***"),
            ("/gates/tt/s3cret", "/gates/tt/***"),
            ("/gates/promote/%73%33cret", "/gates/promote/***"),
            ("/gates/promote/s3cret2", "/gates/promote/s3cret2"),
            ("/gates/%zz/s3cret%", "/gates/%zz/s3cret%"),
        ];
        for (path, want) in table {
            assert_eq!(shown(path, &tokens), want, "{path}");
        }
    }

    #[test]
    fn only_what_a_route_matched_is_shown_as_written() {
        let tokens = FlaggerTokens::default();
        let shown = |shown| {
            Logged {
                shown,
                tokens: &tokens,
            }
            .to_string()
        };
        let check = |token, kind, scope| Shown::Check { token, kind, scope };
        let table = [
            (Shown::Unmatched(31), "<unmatched: 31 bytes>"),
            (
                Shown::Pattern("/gates/{kind}/{*scope}"),
                "/gates/{kind}/{*scope}",
            ),
            (Shown::Path("/ui/t/s3cret"), "/ui/t/***"),
            (check(true, Some("promote"), None), "/gates/t/***/promote"),
            (
                check(false, Some("promote"), Some("pr/42")),
                "/gates/promote/pr/42",
            ),
            (check(false, None, Some("pr/42")), "/gates/{kind}/{*scope}"),
            (
                check(false, Some("promote"), Some("pr/42;s3cret")),
                "/gates/promote/{*scope}",
            ),
            (
                check(false, Some("promote"), Some("t/s3cret")),
                "/gates/promote/{*scope}",
            ),
            (
                check(false, Some("promote"), Some("pr/42-s3cret")),
                "/gates/promote/{*scope}",
            ),
            (
                check(false, Some("promote"), Some("acme/shop/pr/42")),
                "/gates/promote/{owner}/{repo}/pr/42",
            ),
        ];
        for (given, want) in table {
            assert_eq!(shown(given), want, "{given:?}");
        }
    }
}
