//! Runs a durable queue: claims due items with a lease, hands each to its
//! route's handler, and settles it (done, retry with backoff, or given up).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::finish::Finisher;
use super::{Handler, Lease, SendError, Settled};
use crate::clock::SharedClock;
use crate::gate::{millis, Millis};
use crate::metrics::{JobLabels, Metrics};
use crate::store::{QueueItem, QueueName, Store};

#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    pub max_attempts: i64,
    /// How long a claimed item is ours; after that another worker may take it.
    pub lease: Duration,
    /// The longest sleep between looks at the queue (other replicas add work too).
    pub idle_poll: Duration,
    /// How many lanes run at once.
    pub concurrency: usize,
}

/// How many items per running lane may be claimed ahead, waiting behind a busy lane.
const CLAIM_AHEAD: usize = 4;

/// The longest wait between tries of a delivery the store failed to apply
/// for a passing reason (a held row lock, a lost connection): once the store
/// recovers, an acknowledged `/hold` applies within this.
const TRANSIENT_MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The longest an item waits for its next try, whatever the other side's
/// `Retry-After` says: GitHub's rate limits reset within the hour.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// `delay` after `now`, in the store's milliseconds, never past its end.
fn later(now: Millis, delay: Duration) -> Millis {
    now.saturating_add(millis(delay))
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            base_backoff: Duration::from_secs(2),
            max_backoff: Duration::from_secs(600),
            max_attempts: 12,
            lease: Duration::from_secs(60),
            idle_poll: Duration::from_secs(2),
            concurrency: 8,
        }
    }
}

pub struct Worker {
    pub queue: QueueName,
    pub store: Store,
    pub clock: SharedClock,
    pub metrics: Arc<Metrics>,
    pub handlers: HashMap<String, Arc<dyn Handler>>,
    pub settings: WorkerSettings,
    pub wake: Arc<Notify>,
    pub owner: String,
    /// Tells a [`Drain`] when a pass found nothing due.
    pub idle: Idle,
    /// Settles finished items in group commits.
    pub finisher: Finisher,
}

impl Worker {
    fn label(&self) -> &'static str {
        match self.queue {
            QueueName::Outbox => "outbox",
            QueueName::Inbox => "inbox",
        }
    }

    /// Exponential backoff for the attempt that just failed (1-based).
    pub fn backoff(&self, attempts: i64) -> Duration {
        let exp = attempts.clamp(1, 30) as u32 - 1;
        self.settings
            .base_backoff
            .saturating_mul(2u32.saturating_pow(exp))
            .min(self.settings.max_backoff)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let this = Arc::new(self);
        this.run_shared(shutdown).await
    }

    async fn run_shared(self: &Arc<Self>, shutdown: CancellationToken) {
        loop {
            let asked = self.idle.asked();
            match self.drain(&shutdown).await {
                Ok(()) if !shutdown.is_cancelled() => self.idle.answer(asked),
                Ok(()) => {}
                Err(e) => tracing::warn!(queue = self.label(), error = %e, "queue unavailable"),
            }
            // Someone asked during this pass: only a pass that starts now answers them.
            if self.idle.asked() > asked {
                continue;
            }
            let sleep = self.idle_sleep().await;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.wake.notified() => {}
                () = tokio::time::sleep(sleep) => {}
            }
        }
    }

    async fn idle_sleep(&self) -> Duration {
        let now = self.clock.now_ms();
        match self.store.queues().next_due(self.queue).await {
            Ok(Some(due)) if due > now => {
                Duration::from_millis((due - now) as u64).min(self.settings.idle_poll)
            }
            Ok(Some(_)) => Duration::from_millis(10),
            _ => self.settings.idle_poll,
        }
    }

    /// Runs every due item, until a claim finds nothing due and nothing runs
    /// (or the store fails, or shutdown starts). Items of one lane (one pull
    /// request, one Slack message) run one at a time in the order claimed;
    /// different lanes run concurrently, so a slow call holds up only its own lane.
    ///
    /// Each lane is its own task: a lane suspended inside a store transaction
    /// must keep running while this loop waits on the store to claim more.
    pub async fn drain(self: &Arc<Self>, shutdown: &CancellationToken) -> crate::store::Result<()> {
        let lease = self.settings.lease.as_millis() as i64;
        let concurrency = self.settings.concurrency.max(1);
        // Claimed items behind a busy lane wait here; a lane is busy while its key is present.
        let mut lanes: HashMap<String, VecDeque<QueueItem>> = HashMap::new();
        let mut running = JoinSet::new();
        // Which lane each task runs, to free the lane if its task panics.
        let mut tasks = HashMap::new();
        let mut claimed = 0usize;
        let mut failure = None;
        loop {
            while failure.is_none()
                && !shutdown.is_cancelled()
                && running.len() < concurrency
                && claimed < concurrency * CLAIM_AHEAD
            {
                let now = self.clock.now_ms();
                // One transaction claims what there is room for.
                let room = (concurrency * CLAIM_AHEAD - claimed).min(concurrency);
                match self
                    .store
                    .queues()
                    .claim_many(self.queue, &self.owner, now, lease, room)
                    .await
                {
                    Ok(items) => {
                        let full = items.len() == room;
                        for item in items {
                            claimed += 1;
                            let lane = self.lane_of(&item);
                            match lanes.get_mut(&lane) {
                                Some(behind) => behind.push_back(item),
                                None => {
                                    lanes.insert(lane.clone(), VecDeque::new());
                                    self.start(&mut running, &mut tasks, lane, item, false);
                                }
                            }
                        }
                        if !full {
                            break;
                        }
                    }
                    Err(e) => failure = Some(e),
                }
            }
            if running.is_empty() {
                break;
            }
            // While lanes run, new work (a wake, or items coming due) may start beside them.
            let (id, result) = tokio::select! {
                Some(done) = running.join_next_with_id() => match done {
                    Ok((id, result)) => (id, result),
                    Err(e) => {
                        // Its item stays leased and is taken again when the lease runs out.
                        tracing::error!(queue = self.label(), error = %e, "a queue task failed");
                        (e.id(), Ok(()))
                    }
                },
                () = self.wake.notified() => continue,
                () = tokio::time::sleep(self.settings.idle_poll) => continue,
            };
            self.idle.0.finished.fetch_add(1, Ordering::SeqCst);
            let Some(lane) = tasks.remove(&id) else {
                continue;
            };
            claimed -= 1;
            if let Err(e) = result {
                failure.get_or_insert(e);
            }
            match lanes.get_mut(&lane).and_then(VecDeque::pop_front) {
                Some(next) => self.start(&mut running, &mut tasks, lane, next, true),
                None => {
                    lanes.remove(&lane);
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    fn lane_of(&self, item: &QueueItem) -> String {
        self.handlers
            .get(&item.route)
            .and_then(|h| h.lane(item))
            .map_or_else(|| item.id.clone(), |lane| format!("{}/{lane}", item.route))
    }

    fn start(
        self: &Arc<Self>,
        running: &mut JoinSet<crate::store::Result<()>>,
        tasks: &mut HashMap<tokio::task::Id, String>,
        lane: String,
        item: QueueItem,
        waited: bool,
    ) {
        let worker = Arc::clone(self);
        // One span per delivery or job, named by its id, so that one approval
        // can be followed from its delivery to the calls its jobs make.
        let span = tracing::info_span!(
            "item",
            queue = self.label(),
            id = %item.id,
            route = %item.route,
            topic = %item.topic,
            attempt = item.attempts,
        );
        let task =
            running.spawn(async move { worker.run_one(&item, waited).await }.instrument(span));
        tasks.insert(task.id(), lane);
    }

    /// Backoff for a delivery the store failed to apply for a passing reason:
    /// a tenth of how long it has waited, from the base backoff up to
    /// [`TRANSIENT_MAX_BACKOFF`] (its attempts do not grow, so they cannot
    /// measure it).
    fn transient_backoff(&self, waited_ms: i64) -> Duration {
        let tenth = Duration::from_millis(u64::try_from(waited_ms / 10).unwrap_or(0));
        tenth
            .max(self.settings.base_backoff)
            .min(TRANSIENT_MAX_BACKOFF)
    }

    /// Runs one claimed item; `waited`: it was claimed ahead and waited in
    /// its lane behind others.
    async fn run_one(&self, item: &QueueItem, waited: bool) -> crate::store::Result<()> {
        let lease = Lease {
            queue: self.queue,
            owner: self.owner.clone(),
            attempts: item.attempts,
            id: item.id.clone(),
            length: self.settings.lease,
            store: self.store.clone(),
            clock: self.clock.clone(),
            lost: Default::default(),
        };
        let result = match self.handlers.get(&item.route) {
            None => Err(SendError::Permanent(format!(
                "nothing handles `{}` here: is it configured?",
                item.route
            ))),
            // Claimed ahead, the item may have waited in its lane past its
            // lease, and another worker may have it now: renewed first, or
            // left. One started as it was claimed holds a fresh lease.
            Some(handler) => match if waited { lease.hold().await } else { Ok(()) } {
                Err(e) => Err(e),
                Ok(()) => {
                    let limit = self.settings.lease.mul_f32(0.8);
                    match tokio::time::timeout(limit, handler.handle(item, &lease)).await {
                        Ok(result) => result,
                        Err(_) => Err(SendError::retry(format!("timed out after {limit:?}"))),
                    }
                }
            },
        };
        if lease.lost() {
            tracing::warn!(queue = self.label(), id = %item.id, "the lease was lost before the item was sent: left to its new owner");
            self.count(item, "lost");
            return Ok(());
        }
        let claim = lease.claim();
        let now = self.clock.now_ms();
        let (outcome, settled) = match result {
            Ok(Settled::Done) => ("done", true),
            Ok(Settled::NotYet) => (
                "done",
                self.finisher
                    .finish(&self.store, self.queue, &claim, now)
                    .await?,
            ),
            // An acknowledged delivery is never given up for the store's
            // passing failures: tried again until it applies, not counted.
            Err(SendError::Transient(message)) if self.queue == QueueName::Inbox => {
                let delay = self.transient_backoff(now - item.created_at);
                tracing::warn!(queue = self.label(), route = %item.route, topic = %item.topic,
                    waited_ms = now - item.created_at, retry_in = ?delay, error = %message,
                    "the store failed for now; will retry");
                let next = later(now, delay);
                let settled = self
                    .store
                    .queues()
                    .retry(self.queue, &claim, next, &message, false)
                    .await?;
                ("retry", settled)
            }
            Err(e @ (SendError::Retry { .. } | SendError::Transient(_)))
                if item.attempts < self.settings.max_attempts =>
            {
                let after = match &e {
                    SendError::Retry { after, .. } => *after,
                    _ => None,
                };
                // The other side's word on when, but never parked for longer
                // than a rate limit's hour.
                let delay = after
                    .unwrap_or_else(|| self.backoff(item.attempts))
                    .min(MAX_RETRY_AFTER);
                tracing::info!(queue = self.label(), route = %item.route, topic = %item.topic,
                    attempts = item.attempts, retry_in = ?delay, error = %e, "will retry");
                let next = later(now, delay);
                let settled = self
                    .store
                    .queues()
                    .retry(self.queue, &claim, next, e.message(), true)
                    .await?;
                ("retry", settled)
            }
            Err(e) => {
                tracing::warn!(queue = self.label(), route = %item.route, topic = %item.topic,
                    attempts = item.attempts, error = %e, "giving up");
                (
                    "failed",
                    self.store
                        .queues()
                        .give_up(self.queue, &claim, now, e.message())
                        .await?,
                )
            }
        };
        if !settled {
            tracing::warn!(queue = self.label(), id = %item.id, "lease expired before the item was settled");
        }
        self.count(item, outcome);
        Ok(())
    }

    fn count(&self, item: &QueueItem, outcome: &'static str) {
        self.metrics
            .jobs
            .get_or_create(&JobLabels {
                queue: self.label(),
                route: item.route.clone(),
                result: outcome,
            })
            .inc();
    }
}

/// A worker's side of a [`Drain`]: which requests a pass that found nothing
/// due has answered, and how many items it ran.
#[derive(Clone, Default)]
pub struct Idle(Arc<IdleState>);

#[derive(Default)]
struct IdleState {
    /// Raised by each request; a pass that starts after it answers it.
    asked: AtomicU64,
    /// The latest request answered by a pass that claimed nothing more.
    answered: watch::Sender<u64>,
    /// Items whose task ended (settled, or its task failed), ever.
    finished: AtomicU64,
}

impl Idle {
    fn asked(&self) -> u64 {
        self.0.asked.load(Ordering::SeqCst)
    }

    fn answer(&self, asked: u64) {
        self.0.answered.send_if_modified(|a| {
            let newer = asked > *a;
            *a = (*a).max(asked);
            newer
        });
    }

    fn ask(&self) -> u64 {
        self.0.asked.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn finished(&self) -> u64 {
        self.0.finished.load(Ordering::SeqCst)
    }

    async fn answered(&self, ask: u64) {
        let mut answered = self.0.answered.subscribe();
        // The sender lives in `self`, so the channel cannot close while we
        // wait; the value is dropped at once (it holds the channel's lock).
        let _ = answered.wait_for(|&a| a >= ask).await;
    }
}

/// Waits until workers have nothing due: see [`Drain::settled`].
#[derive(Clone, Default)]
pub struct Drain {
    workers: Vec<(Idle, Arc<Notify>)>,
}

impl Drain {
    /// Also waits for `worker` (call before it runs).
    pub fn add(&mut self, worker: &Worker) {
        self.workers
            .push((worker.idle.clone(), Arc::clone(&worker.wake)));
    }

    fn finished(&self) -> u64 {
        self.workers.iter().map(|(idle, _)| idle.finished()).sum()
    }

    /// Resolves once no item is due now on any worker's queue and none is in
    /// flight: wakes every worker, waits for a pass of each that started after
    /// the request and found nothing to claim, and asks again while any of them
    /// ran an item meanwhile (its handler may have queued more work, as an
    /// applied webhook delivery queues notifications).
    ///
    /// Due means due by the workers' clock: an item scheduled for later (a
    /// backoff, a Retry-After, a digest's minute) or leased by another replica
    /// is not waited for. It does not resolve while a queue's store fails or a
    /// worker is not running (not yet started, or shut down): give it a deadline.
    pub async fn settled(&self) {
        loop {
            let before = self.finished();
            let asks: Vec<u64> = self
                .workers
                .iter()
                .map(|(idle, wake)| {
                    let ask = idle.ask();
                    wake.notify_one();
                    ask
                })
                .collect();
            for ((idle, _), ask) in self.workers.iter().zip(asks) {
                idle.answered(ask).await;
            }
            if self.finished() == before {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::clock::ManualClock;
    use crate::notify::BoxFuture;
    use crate::store::NewJob;

    const NOW: i64 = 1_000_000;
    const LEASE: Duration = Duration::from_secs(10);

    /// A next try is never past the store's last millisecond, however long
    /// the wait asked for.
    #[test]
    fn a_next_try_does_not_wrap() {
        assert_eq!(later(NOW, Duration::from_millis(5)), NOW + 5);
        assert_eq!(later(NOW, Duration::MAX), i64::MAX);
        assert_eq!(later(i64::MAX - 1, Duration::from_secs(1)), i64::MAX);
    }

    /// Runs every job in one lane; holds "first" until released.
    #[derive(Default)]
    struct Gated {
        started: Mutex<Vec<String>>,
        entered: Notify,
        release: Notify,
    }

    impl Handler for Gated {
        fn handle<'a>(
            &'a self,
            item: &'a QueueItem,
            _lease: &'a Lease,
        ) -> BoxFuture<'a, Result<Settled, SendError>> {
            Box::pin(async move {
                self.started.lock().unwrap().push(item.topic.clone());
                self.entered.notify_one();
                if item.topic == "first" {
                    self.release.notified().await;
                }
                Ok(Settled::NotYet)
            })
        }

        fn lane(&self, _item: &QueueItem) -> Option<String> {
            Some("one pull request".into())
        }
    }

    fn job(topic: &str) -> NewJob {
        NewJob {
            sink: "test".into(),
            topic: topic.into(),
            payload: "{}".into(),
            dedupe_key: None,
            once_key: None,
            not_before: 0,
        }
    }

    /// A job claimed ahead waits in its lane behind a slow one; meanwhile its
    /// lease runs out and another replica takes it. When the lane frees up,
    /// this worker must not send it: the other replica will.
    #[tokio::test]
    async fn a_job_claimed_ahead_is_not_sent_once_its_lease_is_lost() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}/gatebot.db", dir.path().display());
        let store = Store::connect(&url).await.expect("store");
        let mut tx = store.begin().await.unwrap();
        for topic in ["first", "second"] {
            assert!(crate::store::Queues::enqueue(&mut tx, &job(topic), NOW)
                .await
                .unwrap());
        }
        tx.commit().await.unwrap();

        let clock = ManualClock::new(NOW);
        let gated = Arc::new(Gated::default());
        let worker = Arc::new(Worker {
            queue: QueueName::Outbox,
            store: store.clone(),
            clock: clock.clone(),
            metrics: Arc::new(Metrics::new()),
            handlers: HashMap::from([("test".to_string(), gated.clone() as Arc<dyn Handler>)]),
            settings: WorkerSettings {
                lease: LEASE,
                concurrency: 2,
                idle_poll: Duration::from_millis(20),
                ..WorkerSettings::default()
            },
            wake: Arc::new(Notify::new()),
            owner: store.replica().to_string(),
            idle: Idle::default(),
            finisher: Finisher::default(),
        });
        let shutdown = CancellationToken::new();
        let drain = {
            let (worker, shutdown) = (worker.clone(), shutdown.clone());
            tokio::spawn(async move { worker.drain(&shutdown).await })
        };
        // "first" is being sent; "second" was claimed with it and waits.
        gated.entered.notified().await;
        assert_eq!(*gated.started.lock().unwrap(), ["first"]);

        let later = LEASE.as_millis() as i64 + 1_000;
        clock.set(NOW + later);
        // Another replica, alive (its leases are not free for the taking).
        let other = Store::connect(&url).await.expect("another replica's store");
        other.replicas().heartbeat(NOW + later).await.unwrap();
        let taken = other
            .queues()
            .claim_many(QueueName::Outbox, other.replica(), NOW + later, 60_000, 10)
            .await
            .unwrap();
        assert!(
            taken.iter().any(|i| i.topic == "second"),
            "the other replica has it: {taken:?}"
        );

        gated.release.notify_one();
        tokio::time::timeout(Duration::from_secs(10), drain)
            .await
            .expect("the worker drains")
            .unwrap()
            .unwrap();
        assert_eq!(
            *gated.started.lock().unwrap(),
            ["first"],
            "the job whose lease was lost is left to its new owner"
        );
    }

    /// Answers every job "come back in three hundred years".
    struct Later;

    impl Handler for Later {
        fn handle<'a>(
            &'a self,
            _item: &'a QueueItem,
            _lease: &'a Lease,
        ) -> BoxFuture<'a, Result<Settled, SendError>> {
            Box::pin(async {
                Err(SendError::Retry {
                    after: Some(Duration::from_secs(10_000_000_000)),
                    message: "503".into(),
                })
            })
        }
    }

    /// A job the other side asks to come back to in centuries is tried again
    /// within the hour: parked for good, it would be neither sent nor given up.
    #[tokio::test]
    async fn a_retry_after_of_centuries_is_tried_again_within_the_hour() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}/gatebot.db", dir.path().display());
        let store = Store::connect(&url).await.expect("store");
        let mut tx = store.begin().await.unwrap();
        assert!(crate::store::Queues::enqueue(&mut tx, &job("reply"), NOW)
            .await
            .unwrap());
        tx.commit().await.unwrap();
        let worker = Arc::new(Worker {
            queue: QueueName::Outbox,
            store: store.clone(),
            clock: ManualClock::new(NOW),
            metrics: Arc::new(Metrics::new()),
            handlers: HashMap::from([("test".to_string(), Arc::new(Later) as Arc<dyn Handler>)]),
            settings: WorkerSettings::default(),
            wake: Arc::new(Notify::new()),
            owner: store.replica().to_string(),
            idle: Idle::default(),
            finisher: Finisher::default(),
        });
        worker.drain(&CancellationToken::new()).await.unwrap();
        let jobs = store.queues().jobs(None, 10).await.unwrap();
        assert_eq!(jobs[0].state, "pending", "{jobs:?}");
        assert_eq!(jobs[0].next_attempt_at, NOW + 3_600_000, "{jobs:?}");
    }
}
