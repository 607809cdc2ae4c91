//! GitHub never delivers a webhook again on its own. When gatebot had to
//! refuse a GitHub App's delivery (503: the store did not take its receipt,
//! or too many bodies were being read), it asks GitHub to deliver it again
//! once the store takes receipts again (`GET /app/hook/deliveries`, then
//! `POST /app/hook/deliveries/{id}/attempts`).
//!
//! What to ask for comes from GitHub's own record, which outlives this
//! process: a delivery (by its `X-GitHub-Delivery` guid) whose every attempt
//! was answered 503 and none 2xx. The refusals this process made only say
//! when to look and how far back. One pass also runs at start, for what a
//! previous process refused. Each delivery is asked for at most
//! [`MAX_ASKS`] times, so a store that keeps failing causes no loop.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::client::{GithubClient, HookDelivery};
use crate::core::Records;

/// Refusals and asks remembered, each.
const REMEMBERED: usize = 1000;
/// Times one delivery is asked for at most.
pub const MAX_ASKS: u8 = 3;
/// How far back the pass at start looks.
const AT_START: Duration = Duration::from_secs(3600);
/// Pages of 100 deliveries read per pass at most.
const MAX_PAGES: usize = 10;
/// How long the store gets to show it takes receipts, per try.
const PROBE_WITHIN: Duration = Duration::from_millis(1500);
/// Refusals stop for this long before gatebot asks (the overload is over).
const QUIET: Duration = Duration::from_secs(1);
/// The least time between two passes, whatever refusals come.
const BETWEEN_PASSES: Duration = Duration::from_secs(10);

/// Shared by the GitHub route (which notes refusals) and the worker.
#[derive(Clone, Default)]
pub struct Redeliveries {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    refused: Mutex<Refused>,
    wake: Notify,
}

#[derive(Default)]
struct Refused {
    /// Guids refused since the last pass, oldest first (bounded).
    guids: VecDeque<String>,
    /// The first refusal since the last pass (Unix ms), and the latest.
    first: Option<u64>,
    last: Option<Instant>,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Redeliveries {
    /// Notes that the delivery `guid` was answered 503.
    pub fn refused(&self, guid: &str) {
        let mut r = self.inner.refused.lock().unwrap_or_else(|e| e.into_inner());
        if r.guids.len() == REMEMBERED {
            r.guids.pop_front();
        }
        r.guids.push_back(guid.to_string());
        r.first.get_or_insert(unix_ms(SystemTime::now()));
        r.last = Some(Instant::now());
        drop(r);
        self.inner.wake.notify_one();
    }

    /// The refusals since the last pass: when the first was (Unix ms), and
    /// whether they have stopped for [`QUIET`].
    fn pending(&self) -> Option<(u64, bool)> {
        let r = self.inner.refused.lock().unwrap_or_else(|e| e.into_inner());
        let first = r.first?;
        Some((first, r.last.is_none_or(|l| l.elapsed() >= QUIET)))
    }

    fn clear(&self) -> usize {
        let mut r = self.inner.refused.lock().unwrap_or_else(|e| e.into_inner());
        let n = r.guids.len();
        *r = Refused::default();
        n
    }

    /// Until shutdown: a pass at start, then one after each spell of refusals,
    /// once the store takes receipts again.
    pub async fn run(
        self,
        client: Arc<GithubClient>,
        records: Records,
        shutdown: CancellationToken,
    ) {
        let mut asked = Asked::default();
        let since = unix_ms(SystemTime::now()).saturating_sub(AT_START.as_millis() as u64);
        pass(&client, since, &mut asked).await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.inner.wake.notified() => {}
            }
            // Woken by a refusal the last pass already covered.
            if self.pending().is_none() {
                continue;
            }
            let Some(since) = self.recovered(&records, &shutdown).await else {
                return;
            };
            let refused = self.clear();
            tracing::info!(
                refused,
                "the store takes receipts again: asking GitHub for the deliveries it refused"
            );
            // A minute of margin: GitHub stamps a delivery when it sent it.
            pass(&client, since.saturating_sub(60_000), &mut asked).await;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(BETWEEN_PASSES) => {}
            }
        }
    }

    /// Waits until refusals have stopped and the store takes receipts; the
    /// time of the first refusal, or None at shutdown.
    async fn recovered(&self, records: &Records, shutdown: &CancellationToken) -> Option<u64> {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(QUIET) => {}
            }
            let Some((first, quiet)) = self.pending() else {
                continue;
            };
            if quiet
                && tokio::time::timeout(PROBE_WITHIN, records.inbox_writable())
                    .await
                    .is_ok_and(|r| r.is_ok())
            {
                return Some(first);
            }
        }
    }
}

/// Middleware on `POST /webhooks/github`: a 503 (whatever refused it) is
/// noted with the delivery's guid. The guid is not signed: a made-up one only
/// makes gatebot look at GitHub's record, which decides what is asked for.
pub async fn note_refusals(
    State(redeliveries): State<Redeliveries>,
    req: Request,
    next: Next,
) -> Response {
    let guid = req
        .headers()
        .get("x-github-delivery")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|g| !g.is_empty() && g.len() <= 128)
        .map(str::to_string);
    let response = next.run(req).await;
    if let Some(guid) = guid.filter(|_| response.status().as_u16() == 503) {
        redeliveries.refused(&guid);
    }
    response
}

/// How often each guid was asked for, bounded.
#[derive(Default)]
struct Asked {
    counts: HashMap<String, u8>,
    order: VecDeque<String>,
}

impl Asked {
    fn count(&self, guid: &str) -> u8 {
        self.counts.get(guid).copied().unwrap_or(0)
    }

    fn add(&mut self, guid: &str) {
        if !self.counts.contains_key(guid) {
            if self.order.len() == REMEMBERED {
                if let Some(old) = self.order.pop_front() {
                    self.counts.remove(&old);
                }
            }
            self.order.push_back(guid.to_string());
        }
        *self.counts.entry(guid.to_string()).or_default() += 1;
    }
}

/// Reads GitHub's record back to `since` (Unix ms) and asks again for each
/// delivery that only ever got 503.
async fn pass(client: &GithubClient, since: u64, asked: &mut Asked) {
    let deliveries = match recent(client, since).await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the GitHub App's webhook deliveries: refused deliveries are not asked for again");
            return;
        }
    };
    for d in refused_only(&deliveries, since) {
        if asked.count(&d.guid) >= MAX_ASKS {
            continue;
        }
        asked.add(&d.guid);
        match client.redeliver(d.id).await {
            Ok(()) => {
                tracing::info!(delivery = %d.guid, id = d.id, "asked GitHub to deliver a refused delivery again")
            }
            Err(e) => {
                tracing::warn!(delivery = %d.guid, id = d.id, error = %e, "GitHub did not take the redelivery request")
            }
        }
    }
}

/// The deliveries GitHub stamped at or after `since`, newest first.
async fn recent(
    client: &GithubClient,
    since: u64,
) -> Result<Vec<HookDelivery>, super::client::ApiError> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let (page, next) = client.hook_deliveries(cursor.as_deref()).await?;
        let older = page.iter().any(|d| delivered_ms(d) < Some(since));
        out.extend(page);
        match next {
            Some(next) if !older => cursor = Some(next),
            _ => break,
        }
    }
    Ok(out)
}

fn delivered_ms(d: &HookDelivery) -> Option<u64> {
    humantime::parse_rfc3339_weak(&d.delivered_at)
        .ok()
        .map(unix_ms)
}

/// Per guid stamped since `since`: its latest attempt, when every attempt
/// got 503 (what gatebot answers when it cannot take a delivery).
fn refused_only(deliveries: &[HookDelivery], since: u64) -> Vec<HookDelivery> {
    let mut by_guid: HashMap<&str, (bool, &HookDelivery)> = HashMap::new();
    for d in deliveries.iter().filter(|d| !d.guid.is_empty()) {
        let entry = by_guid.entry(d.guid.as_str()).or_insert((true, d));
        entry.0 &= d.status_code == 503;
        if d.id > entry.1.id {
            entry.1 = d;
        }
    }
    let mut out: Vec<HookDelivery> = by_guid
        .into_values()
        .filter(|(only_503, latest)| *only_503 && delivered_ms(latest) >= Some(since))
        .map(|(_, latest)| latest.clone())
        .collect();
    out.sort_by_key(|d| d.id);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(id: u64, guid: &str, status: u16) -> HookDelivery {
        HookDelivery {
            id,
            guid: guid.into(),
            delivered_at: "2026-01-01T00:00:00Z".into(),
            status_code: status,
        }
    }

    #[test]
    fn only_deliveries_that_never_got_through_are_asked_for() {
        let since = unix_ms(humantime::parse_rfc3339("2025-12-31T23:59:00Z").unwrap());
        let list = [
            d(5, "a", 503),
            d(4, "b", 202),
            d(3, "b", 503),
            d(2, "c", 401),
            d(1, "a", 503),
        ];
        let asked: Vec<u64> = refused_only(&list, since).iter().map(|d| d.id).collect();
        assert_eq!(
            asked,
            [5],
            "a: its latest attempt; b got through; c was refused for good"
        );
        let later = unix_ms(humantime::parse_rfc3339("2026-01-02T00:00:00Z").unwrap());
        assert!(
            refused_only(&list, later).is_empty(),
            "older than the window"
        );
    }

    #[test]
    fn each_delivery_is_asked_for_a_bounded_number_of_times() {
        let mut asked = Asked::default();
        for _ in 0..MAX_ASKS {
            asked.add("a");
        }
        assert_eq!(asked.count("a"), MAX_ASKS);
        for n in 0..REMEMBERED {
            asked.add(&n.to_string());
        }
        assert_eq!(asked.count("a"), 0, "forgotten past the bound");
        assert_eq!(asked.counts.len(), REMEMBERED);
    }
}
