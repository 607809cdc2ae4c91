//! The accept loop, in place of `axum::serve` (which it follows): HTTP/1.1 over
//! hyper, plus what `axum::serve` lacks against slow or idle clients.
//!
//! - A connection limit: at [`ServerLimits::max_connections`] the loop stops
//!   accepting, so new connections wait in the kernel's listen backlog until a
//!   slot frees, and descriptors never run out.
//! - A header-read timeout: a request head (request line and headers) must
//!   arrive whole within [`ServerLimits::header_read_timeout`] of its first byte
//!   (of the accept, for a connection's first request), or the connection is closed.
//! - An idle timeout: a keep-alive connection with no request for
//!   [`ServerLimits::idle_timeout`] is closed; so is one whose client stops
//!   reading a response for that long.
//!
//! Both timers are kept here rather than by hyper: hyper 1.12's
//! `header_read_timeout` needs a timer (`axum::serve` sets none, so it is off),
//! and it restarts when a keep-alive connection goes idle, so it would also
//! close idle connections after the short header timeout. Proxies keep pooled
//! upstream connections for about a minute; closing them sooner races their
//! next request. A request being handled is bounded by the request timeout and
//! the body read timeout instead (see `http::harden` and `http::limits`).
//!
//! Shutdown is graceful: no new connections, idle ones close, in-flight
//! requests finish; [`serve`] returns when every connection has ended.

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::{Metrics, ReasonLabels};

/// Largest request head hyper buffers (it answers 431 past it). With the
/// connection limit this bounds what slow headers can make gatebot hold.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;

/// Descriptors kept free for the store, outbound calls and logs when the
/// connection limit is checked against the process's descriptor limit.
pub const RESERVED_DESCRIPTORS: u64 = 64;

#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl ServerLimits {
    pub fn from_config(config: &crate::Config) -> Self {
        Self {
            header_read_timeout: config.limits.header_read_timeout,
            idle_timeout: config.limits.idle_timeout,
            max_connections: below_descriptor_limit(config.limits.max_connections as usize),
        }
    }
}

/// The connection limit, lowered (with a warning) to leave
/// [`RESERVED_DESCRIPTORS`] under the soft `RLIMIT_NOFILE`, when it is known.
fn below_descriptor_limit(wanted: usize) -> usize {
    let wanted = wanted.max(1);
    let Some(soft) = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| open_files_limit(&text))
    else {
        return wanted;
    };
    let room =
        usize::try_from(soft.saturating_sub(RESERVED_DESCRIPTORS).max(1)).unwrap_or(usize::MAX);
    if wanted > room {
        tracing::warn!(
            wanted,
            allowed = room,
            descriptor_limit = soft,
            "[limits] max_connections is above what the descriptor limit allows: lowered (raise `ulimit -n` to allow more)"
        );
        return room;
    }
    wanted
}

/// The soft limit from `/proc/self/limits`' "Max open files" line.
fn open_files_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What answers each request: the router, or the router with something in
/// front of it.
pub trait Answers: Clone + Send + Sync + 'static {
    fn answer(self, req: Request<Incoming>) -> impl Future<Output = Response> + Send + 'static;
}

impl Answers for Router {
    async fn answer(self, req: Request<Incoming>) -> Response {
        match self.oneshot(req).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// Serves `router` on `listener` until `signal`, then shuts down gracefully.
pub async fn serve<A: Answers, F>(
    listener: TcpListener,
    router: A,
    limits: ServerLimits,
    metrics: Arc<Metrics>,
    signal: F,
) where
    F: Future<Output = ()> + Send + 'static,
{
    let stop = CancellationToken::new();
    let connections = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut signal = pin!(signal);
    loop {
        // A slot before the accept: at the limit, connections wait in the backlog.
        let slot = tokio::select! {
            () = &mut signal => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut signal => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        connections.spawn(connection(
            stream,
            router.clone(),
            limits,
            slot,
            stop.clone(),
            metrics.clone(),
        ));
    }
    drop(listener);
    stop.cancel();
    connections.close();
    connections.wait().await;
}

/// As `axum::serve`: a failed accept that concerns one connection is skipped;
/// anything else (such as running out of descriptors) is logged and retried
/// after a pause rather than spinning.
async fn accept_failed(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

enum End {
    Done(hyper::Result<()>),
    TimedOut(Waiting),
}

/// What a connection waits for when no request is being handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    /// The rest of a request head (bounded by the header-read timeout).
    Head,
    /// The first byte of the next request (bounded by the idle timeout).
    NextRequest,
}

impl Waiting {
    /// Why the connection is closed when the wait runs out (a metric label).
    fn timeout(self) -> &'static str {
        match self {
            Self::Head => "header_timeout",
            Self::NextRequest => "idle_timeout",
        }
    }
}

async fn connection<A: Answers>(
    stream: TcpStream,
    router: A,
    limits: ServerLimits,
    _slot: OwnedSemaphorePermit,
    stop: CancellationToken,
    metrics: Arc<Metrics>,
) {
    // One write per response already; no reason to let Nagle hold it back.
    let _ = stream.set_nodelay(true);
    // The peer's address, for the pages' trusted proxies (`web::session`).
    let peer = stream.peer_addr().ok();
    let _open = Open::new(&metrics.http_connections);
    let phase = Arc::new(Phase::new(Instant::now() + limits.header_read_timeout));
    let io = TokioIo::new(Watched {
        inner: stream,
        phase: phase.clone(),
        header_read_timeout: limits.header_read_timeout,
    });
    let service = {
        let phase = phase.clone();
        service_fn(move |mut req: Request<Incoming>| {
            if let Some(peer) = peer {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
            }
            let busy = Busy::start(&phase, limits.idle_timeout);
            let answer = router.clone().answer(req);
            async move {
                let response = answer.await;
                drop(busy);
                Ok::<_, Infallible>(response)
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .max_buf_size(MAX_HEAD_BYTES)
        // Kept here instead (see the module comment).
        .header_read_timeout(None);
    let mut conn = pin!(builder.serve_connection(io, service));
    let mut timer = pin!(tokio::time::sleep_until(
        Instant::now() + limits.header_read_timeout
    ));
    let mut stopping = pin!(stop.cancelled());
    let mut draining = false;
    let end = poll_fn(|cx| {
        if !draining && stopping.as_mut().poll(cx).is_ready() {
            draining = true;
            conn.as_mut().graceful_shutdown();
        }
        if let Poll::Ready(result) = conn.as_mut().poll(cx) {
            return Poll::Ready(End::Done(result));
        }
        // Phases change only while `conn` is polled, that is just above.
        if let Some((deadline, waiting)) = phase.deadline() {
            if timer.deadline() != deadline {
                timer.as_mut().reset(deadline);
            }
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(End::TimedOut(waiting));
            }
        }
        Poll::Pending
    })
    .await;
    match end {
        End::Done(Ok(())) => {}
        End::Done(Err(e)) => tracing::debug!(error = %e, "connection ended with an error"),
        End::TimedOut(waiting) => {
            let reason = waiting.timeout();
            tracing::debug!(reason, "closing a slow or idle connection");
            metrics
                .http_connections_cut
                .get_or_create(&ReasonLabels { reason })
                .inc();
        }
    }
}

/// Counts a connection in `gatebot_http_connections` while it lives.
struct Open(Gauge);

impl Open {
    fn new(gauge: &Gauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Where a connection is between requests, and until when it may stay there.
struct Phase(Mutex<PhaseState>);

struct PhaseState {
    /// Requests being handled (hyper handles one at a time per connection).
    busy: usize,
    waiting: Waiting,
    deadline: Instant,
}

impl Phase {
    fn new(deadline: Instant) -> Self {
        Self(Mutex::new(PhaseState {
            busy: 0,
            waiting: Waiting::Head,
            deadline,
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PhaseState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// None while a request is handled: its own timeouts bound it.
    fn deadline(&self) -> Option<(Instant, Waiting)> {
        let s = self.state();
        (s.busy == 0).then_some((s.deadline, s.waiting))
    }

    /// Bytes arrived: an idle connection starts reading a request head.
    fn read(&self, header_read_timeout: Duration) {
        let mut s = self.state();
        if s.busy == 0 && s.waiting == Waiting::NextRequest {
            s.waiting = Waiting::Head;
            s.deadline = Instant::now() + header_read_timeout;
        }
    }
}

/// A request being handled; dropped when its response is ready (or the
/// request is abandoned), which starts the idle timer.
struct Busy {
    phase: Arc<Phase>,
    idle_timeout: Duration,
}

impl Busy {
    fn start(phase: &Arc<Phase>, idle_timeout: Duration) -> Self {
        phase.state().busy += 1;
        Self {
            phase: phase.clone(),
            idle_timeout,
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut s = self.phase.state();
        s.busy = s.busy.saturating_sub(1);
        if s.busy == 0 {
            s.waiting = Waiting::NextRequest;
            s.deadline = Instant::now() + self.idle_timeout;
        }
    }
}

/// The socket, telling [`Phase`] when bytes arrive.
struct Watched {
    inner: TcpStream,
    phase: Arc<Phase>,
    header_read_timeout: Duration,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.phase.read(self.header_read_timeout);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::open_files_limit;

    #[test]
    fn reads_the_soft_descriptor_limit() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max cpu time              unlimited            unlimited            seconds   \n\
                    Max open files            1024                 524288               files     \n";
        assert_eq!(open_files_limit(text), Some(1024));
        assert_eq!(
            open_files_limit("Max open files unlimited unlimited files"),
            None
        );
    }
}
