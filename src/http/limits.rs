//! Bounded request bodies: every route reads its body here, before any handler,
//! with a size limit, a read timeout and (for the webhook routes, which anyone may
//! call before a signature is checked) a cap on how many bodies are read at once.
//! Together they bound what unauthenticated senders can make gatebot hold in
//! memory: at most [`WEBHOOK_BODY_READERS`] webhook bodies of at most their
//! route's limit, plus one small Flagger or API body per connection.
//!
//! The cap is shared out by channel ([`WebhookReaders`]): slow bodies sent to
//! one channel's route wait for that channel's share only, so a flood of
//! them on `/webhooks/teams` leaves GitHub's deliveries their readers, and the
//! reverse. A channel whose credential is in a header (Teams' token, the
//! API's bearer) has it checked before the body is read at all; GitHub's and
//! Slack's signatures are over the body, so only their form (and Slack's
//! timestamp) is checked first (`github::routes::headers_first`,
//! `slack::routes::headers_first`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{timeout_at, Instant};

use super::error::{Reject, Rejected};

/// Webhook bodies read at the same time, all channels together: the sum of
/// the shares below. GitHub, Slack and Teams send a few deliveries a second
/// at most; a flood of slow or large bodies gets 503 instead of memory.
pub const WEBHOOK_BODY_READERS: usize =
    GITHUB_BODY_READERS + SLACK_BODY_READERS + TEAMS_BODY_READERS;

/// GitHub's share of [`WEBHOOK_BODY_READERS`]: its deliveries carry the
/// commands, and its signature can only be checked once the body is read.
pub const GITHUB_BODY_READERS: usize = 8;

/// Slack's share (its HTTP routes and Socket Mode together).
pub const SLACK_BODY_READERS: usize = 4;

/// Teams' share; its token is checked before a body is read, so only the
/// Bot Framework (or a holder of its token) can take these.
pub const TEAMS_BODY_READERS: usize = 4;

/// Each webhook channel's share of the body readers.
#[derive(Clone)]
pub struct WebhookReaders {
    pub github: Arc<Semaphore>,
    /// HTTP and Socket Mode.
    pub slack: Arc<Semaphore>,
    pub teams: Arc<Semaphore>,
}

impl Default for WebhookReaders {
    fn default() -> Self {
        Self {
            github: Arc::new(Semaphore::new(GITHUB_BODY_READERS)),
            slack: Arc::new(Semaphore::new(SLACK_BODY_READERS)),
            teams: Arc::new(Semaphore::new(TEAMS_BODY_READERS)),
        }
    }
}

/// How long a webhook request waits for one of the [`WEBHOOK_BODY_READERS`]
/// before it is answered 503: long enough to ride out a short burst, short
/// enough that GitHub (10 s) and Slack (3 s) get an answer.
pub const WEBHOOK_READER_WAIT: Duration = Duration::from_secs(1);

/// Past its limit a body is still read and dropped, up to this much more, so
/// that a client sending it whole reads its 413 instead of a reset connection
/// (closing a socket with unread data resets it). Nothing of it is kept;
/// beyond it, or after the read timeout, the connection is simply closed.
pub const DISCARD_LIMIT: usize = 1024 * 1024;

/// The body rules of a group of routes.
#[derive(Clone)]
pub struct BodyLimit {
    /// Largest body accepted, in bytes.
    pub max: usize,
    /// Longest time the whole body may take to arrive.
    pub read_timeout: Duration,
    /// Shared cap on bodies read at once; `None` for routes where every
    /// connection may read its (small) body, such as Flagger's gate checks.
    pub readers: Option<Arc<Semaphore>>,
}

impl BodyLimit {
    pub fn new(max: usize, read_timeout: Duration) -> Self {
        Self {
            max,
            read_timeout,
            readers: None,
        }
    }

    pub fn shared(mut self, readers: &Arc<Semaphore>) -> Self {
        self.readers = Some(readers.clone());
        self
    }
}

/// Middleware: reads the body within the limits, then hands the request on with
/// the body in memory. The permit (if any) is held until the response, so the
/// cap also bounds bodies that handlers still hold.
pub async fn bounded(State(limit): State<BodyLimit>, req: Request, next: Next) -> Response {
    let (parts, mut body) = req.into_parts();
    match limit.read(&parts.headers, &mut body).await {
        Ok((bytes, _permit)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(refused) => refused,
    }
}

impl BodyLimit {
    /// The whole body, read within the limits, and the reader's permit (if
    /// any), to hold until the response; or the answer that refuses it.
    pub async fn read<B>(
        &self,
        headers: &HeaderMap,
        body: &mut B,
    ) -> Result<(Bytes, Option<OwnedSemaphorePermit>), Response>
    where
        B: HttpBody<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let deadline = Instant::now() + self.read_timeout;
        let announced = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(len) = announced.filter(|len| *len > self.max as u64) {
            // Refused without keeping a byte. A client waiting for 100 Continue
            // sends nothing; one announcing far more is not worth reading.
            let waits = headers
                .get(header::EXPECT)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
            if !waits && len <= (self.max + DISCARD_LIMIT) as u64 {
                let _ = timeout_at(deadline, discard(body, DISCARD_LIMIT + self.max)).await;
            }
            return Err(too_large(self.max, Some(len)));
        }
        let permit = match &self.readers {
            None => None,
            Some(readers) => {
                match tokio::time::timeout(WEBHOOK_READER_WAIT, readers.clone().acquire_owned())
                    .await
                {
                    Ok(Ok(permit)) => Some(permit),
                    // Elapsed, or the semaphore closed (it never is).
                    _ => return Err(busy()),
                }
            }
        };
        let capacity = announced.map_or(0, |len| len as usize);
        match timeout_at(deadline, read(body, self.max, capacity)).await {
            Err(_) => Err(Reject::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body did not arrive within {}",
                    humantime::format_duration(self.read_timeout)
                ),
            )
            .into_response()),
            Ok(Err(ReadError::TooLarge)) => {
                let _ = timeout_at(deadline, discard(body, DISCARD_LIMIT)).await;
                Err(too_large(self.max, None))
            }
            Ok(Err(ReadError::Broken(e))) => Err(Reject::bad_request(
                "bad_body",
                format!("cannot read the request body: {e}"),
            )
            .into_response()),
            Ok(Ok(bytes)) => Ok((bytes, permit)),
        }
    }
}

enum ReadError {
    TooLarge,
    Broken(String),
}

/// Collects the body, stopping as soon as it passes `max` (nothing past the
/// limit is kept). `capacity` is the announced length, already checked.
async fn read<B>(body: &mut B, max: usize, capacity: usize) -> Result<Bytes, ReadError>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut buf = Vec::with_capacity(capacity);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ReadError::Broken(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(ReadError::TooLarge);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buf))
}

/// Reads and drops up to `most` bytes of what is left of the body.
async fn discard<B: HttpBody<Data = Bytes> + Unpin>(body: &mut B, most: usize) {
    let mut dropped = 0;
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            dropped += data.len();
            if dropped > most {
                return;
            }
        }
    }
}

fn too_large(max: usize, announced: Option<u64>) -> Response {
    let what = announced.map_or_else(
        || "the request body is".to_string(),
        |len| format!("a request body of {len} bytes is"),
    );
    Reject::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("{what} over this route's limit of {max} bytes"),
    )
    .into_response()
}

/// 503, not 429: the sender did nothing wrong, gatebot is busy reading others.
fn busy() -> Response {
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (header::RETRY_AFTER, HeaderValue::from_static("1")),
        ],
        "too many webhook bodies are being read at once: retry in a second\n",
    )
        .into_response();
    // Counted as a refusal: nothing was read or done.
    response.extensions_mut().insert(Rejected("busy"));
    response
}
