//! `POST /flagger/events`, answered at once whatever the store is doing:
//! events go into a bounded queue that one writer stores in the order they
//! came. An event stored within [`ANSWER_WITHIN`] is answered 200 with its
//! kind; one the store is slow to take is answered 202 and stored as soon as
//! the store answers (Flagger never sends an event again, so keeping it is
//! the better answer); past [`QUEUED`] waiting events the answer is 503.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::core::{AppState, CheckInput};
use crate::gate::event::EventKind;
use crate::gate::{CanaryRef, Millis};

/// How long a request waits for its event to be stored before it is told
/// the event is queued.
pub const ANSWER_WITHIN: Duration = Duration::from_millis(500);

/// Most events waiting for the store.
pub const QUEUED: usize = 1024;

/// How long the writer keeps trying to store one event.
const KEEP_TRYING: Duration = Duration::from_secs(60);

/// One event as Flagger sent it.
pub struct Event {
    pub canary: CanaryRef,
    pub input: CheckInput,
    pub message: String,
    pub event_type: String,
    pub flagger_at: Option<Millis>,
}

/// What became of an event by the time its request is answered.
pub enum Taken {
    Recorded(EventKind),
    /// Waiting for the store; stored in order when it answers.
    Queued,
    /// The queue is full: not kept.
    Full,
}

struct Pending {
    event: Event,
    reply: oneshot::Sender<EventKind>,
}

/// Built once per router; its writer starts on first use and ends when the
/// last clone is dropped.
#[derive(Clone)]
pub struct EventIntake {
    tx: Arc<OnceLock<mpsc::Sender<Pending>>>,
    state: AppState,
}

impl EventIntake {
    pub fn new(state: AppState) -> Self {
        Self {
            tx: Arc::default(),
            state,
        }
    }

    pub async fn take(&self, event: Event) -> Taken {
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUED);
            tokio::spawn(writer(self.state.clone(), rx));
            tx
        });
        let (reply, recorded) = oneshot::channel();
        if tx.try_send(Pending { event, reply }).is_err() {
            return Taken::Full;
        }
        match tokio::time::timeout(ANSWER_WITHIN, recorded).await {
            Ok(Ok(kind)) => Taken::Recorded(kind),
            // Still waiting, or given up later by the writer (it says so).
            _ => Taken::Queued,
        }
    }
}

async fn writer(state: AppState, mut rx: mpsc::Receiver<Pending>) {
    while let Some(Pending { event, reply }) = rx.recv().await {
        if let Some(kind) = store(&state, &event).await {
            let _ = reply.send(kind);
        }
    }
}

/// Stores one event, trying again while the store is unavailable, for up to
/// [`KEEP_TRYING`]; None when it gave up.
async fn store(state: &AppState, e: &Event) -> Option<EventKind> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        let recorded = state
            .engine
            .events()
            .record_event(&e.canary, &e.input, &e.message, &e.event_type, e.flagger_at)
            .await;
        match recorded {
            Ok(kind) => return Some(kind),
            Err(err) if started.elapsed() >= KEEP_TRYING => {
                tracing::error!(canary = %e.canary, error = %err, "a Flagger event was not recorded: the store did not take it within a minute");
                return None;
            }
            Err(err) => {
                tracing::debug!(canary = %e.canary, error = %err, "the store did not take a Flagger event; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}
