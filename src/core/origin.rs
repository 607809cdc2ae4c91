//! A canary's own gate (`/gates/{kind}`) answered as the gate of the pull
//! request that brought the canary's revision, when gatebot may read the
//! cluster (`GATEBOT_KUBERNETES_LOOKUP`).
//!
//! The check stays memory-only: an unknown (canary, checksum) is answered
//! closed at once and one lookup is queued (bounded, one per canary); the
//! worker finds the tie through a [`CanaryOrigin`] (bootstrap composes the
//! cluster and GitHub), keeps it in the store and in memory, and the next
//! check is answered as the PR's gate. A failed lookup never opens anything:
//! the canary waits, closed, until a retry (with backoff) finds the tie.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::gate::PrNumber;
use crate::metrics::ResultLabels;
use crate::notify::BoxFuture;
use crate::store::CanaryTie;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// Lookups waiting for the worker; past it a canary is asked again at its next check.
pub const QUEUED: usize = 64;

/// Canaries whose tie is kept in memory; past it a new canary takes the place
/// of one not being looked up (a failed one first: Flagger's side is
/// unauthenticated, and made-up canaries only ever fail). A tie dropped is
/// read back from the store at its canary's next check.
pub const REMEMBERED: usize = 10_000;

/// What the cluster and GitHub say about a canary's revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The commit the canary's target runs.
    pub commit: String,
    /// The pull request that brought it; None: no PR did (a push to the branch).
    pub pr: Option<(RepoName, PrNumber)>,
}

/// Why a lookup failed, for the log and the reason Flagger reads.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct OriginError(pub String);

/// Finds the commit a canary runs and the PR that brought it.
pub trait CanaryOrigin: Send + Sync {
    fn find<'a>(&'a self, canary: &'a CanaryRef) -> BoxFuture<'a, Result<Found, OriginError>>;
}

/// What a check learns about its canary.
enum Lookup {
    /// Answer it as this gate's scope (the PR's), or as its own gate (None);
    /// the revision was built from this commit.
    Known(Option<Scope>, String),
    /// Not yet: closed, with this reason.
    Waiting(String),
}

#[derive(Debug, Clone)]
enum State {
    Queued,
    Failed {
        attempts: u32,
        retry_at: Millis,
        why: String,
    },
    Known(Option<Scope>, String),
}

struct Entry {
    checksum: String,
    state: State,
}

/// One lookup for the worker.
struct Job {
    canary: CanaryRef,
    checksum: String,
    attempts: u32,
}

/// The ties in memory and the queue of lookups.
pub struct Origins {
    finder: Arc<dyn CanaryOrigin>,
    ties: Mutex<HashMap<CanaryRef, Entry>>,
    queue: mpsc::Sender<Job>,
    jobs: Mutex<Option<mpsc::Receiver<Job>>>,
    backoff: Duration,
    /// [`REMEMBERED`], smaller in unit tests.
    remembered: usize,
    /// `gatebot_canary_lookups_total{result}`.
    lookups: Lookups,
}

/// Lookups by result: `found`, `no_pr`, `failed`.
pub type Lookups = Family<ResultLabels, Counter>;

impl Origins {
    pub fn new(finder: Arc<dyn CanaryOrigin>, backoff: Duration, lookups: Lookups) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUED);
        Self {
            finder,
            ties: Mutex::new(HashMap::new()),
            queue,
            jobs: Mutex::new(Some(jobs)),
            backoff,
            remembered: REMEMBERED,
            lookups,
        }
    }

    fn ties(&self) -> MutexGuard<'_, HashMap<CanaryRef, Entry>> {
        self.ties.lock().expect("canary ties poisoned")
    }

    /// What is known of `canary` at `checksum`; queues a lookup when nothing
    /// is (or a retry is due). No I/O.
    fn lookup(&self, canary: &CanaryRef, checksum: &str, now: Millis) -> Lookup {
        let mut ties = self.ties();
        let retry = match ties.get(canary) {
            Some(e) if e.checksum == checksum => match &e.state {
                State::Known(scope, commit) => return Lookup::Known(scope.clone(), commit.clone()),
                State::Queued => return Lookup::Waiting(looking(canary)),
                State::Failed { retry_at, why, .. } if *retry_at > now => {
                    return Lookup::Waiting(failed(canary, why));
                }
                State::Failed { attempts, .. } => *attempts,
            },
            Some(_) => 0,
            None => 0,
        };
        let job = Job {
            canary: canary.clone(),
            checksum: checksum.to_string(),
            attempts: retry,
        };
        if self.queue.try_send(job).is_err() {
            return Lookup::Waiting(format!(
                "closed: {QUEUED} canaries are being looked up already; {canary} is asked again at the next poll"
            ));
        }
        if !ties.contains_key(canary) && ties.len() >= self.remembered {
            make_room(&mut ties);
        }
        ties.insert(
            canary.clone(),
            Entry {
                checksum: checksum.to_string(),
                state: State::Queued,
            },
        );
        Lookup::Waiting(looking(canary))
    }

    /// Whether the cluster showed `canary`'s Canary object (at any revision).
    pub(super) fn confirmed(&self, canary: &CanaryRef) -> bool {
        let ties = self.ties();
        ties.get(canary)
            .is_some_and(|e| matches!(e.state, State::Known(_, _)))
    }

    fn settle(&self, canary: &CanaryRef, checksum: &str, state: State) {
        let mut ties = self.ties();
        // A newer revision queued meanwhile keeps its own lookup.
        if ties.get(canary).is_some_and(|e| e.checksum != checksum) {
            return;
        }
        ties.insert(
            canary.clone(),
            Entry {
                checksum: checksum.to_string(),
                state,
            },
        );
    }

    /// The ties the store keeps, the latest per canary (at start).
    fn load(&self, rows: Vec<CanaryTie>) {
        let mut ties = self.ties();
        for row in rows {
            if ties.len() >= self.remembered {
                break;
            }
            ties.insert(
                row.canary.clone(),
                Entry {
                    checksum: row.checksum.clone(),
                    state: State::Known(scope_of(&row), row.commit.clone()),
                },
            );
        }
    }

    fn retry_in(&self, attempts: u32) -> Duration {
        self.backoff * 2u32.pow(attempts.min(5))
    }
}

/// Drops one canary not being looked up, a failed one if any. At most
/// [`QUEUED`] + 1 are being looked up, so one is found.
fn make_room(ties: &mut HashMap<CanaryRef, Entry>) {
    let failed = ties
        .iter()
        .find(|(_, e)| matches!(e.state, State::Failed { .. }))
        .or_else(|| ties.iter().find(|(_, e)| !matches!(e.state, State::Queued)))
        .map(|(c, _)| c.clone());
    if let Some(canary) = failed {
        ties.remove(&canary);
    }
}

fn looking(canary: &CanaryRef) -> String {
    format!("closed: finding the pull request that brought canary {canary}'s revision (in the cluster, then on GitHub): asked again at the next poll")
}

fn failed(canary: &CanaryRef, why: &str) -> String {
    format!("closed: cannot find the pull request of canary {canary}'s revision yet ({why}): tried again soon")
}

fn scope_of(tie: &CanaryTie) -> Option<Scope> {
    let (repo, number) = tie.pr.clone()?;
    Some(Scope::Pr { repo, number })
}

impl Engine {
    /// Ties this engine's canary-scoped checks to their PRs (at start, once).
    pub async fn find_origins_with(&self, origins: Arc<Origins>) -> Result<(), StoreError> {
        origins.load(self.store.canary_ties().await?);
        let _ = self.origins.set(origins);
        Ok(())
    }

    /// A gate check, with a canary's own gate answered as its PR's when the
    /// tie is known (see the module). Every other check is [`Engine::check`].
    pub async fn check_canary(
        &self,
        key: &GateKey,
        input: &CheckInput,
    ) -> Result<Checked, CommandError> {
        let (Some(origins), Some(canary), Scope::Canary(_)) =
            (self.origins.get(), input.canary.as_ref(), &key.scope)
        else {
            return self.check(key, input).await;
        };
        match origins.lookup(canary, &input.checksum, self.now()) {
            Lookup::Known(scope, commit) => {
                // The commit the cluster says this revision runs: what a
                // passage is recorded for when the metadata names none.
                let input = CheckInput {
                    found_commit: Some(commit),
                    ..input.clone()
                };
                match scope {
                    Some(scope) => self.check(&GateKey::new(key.kind, scope), &input).await,
                    None => self.check(key, &input).await,
                }
            }
            Lookup::Waiting(reason) => {
                self.count_check(key.kind, Answer::Closed);
                Ok(Checked {
                    verdict: Verdict::closed(reason),
                    change: None,
                })
            }
        }
    }

    /// The lookup worker: one lookup at a time, until shutdown.
    pub async fn find_origins(&self, shutdown: CancellationToken) {
        let Some(origins) = self.origins.get() else {
            return;
        };
        let Some(mut jobs) = origins.jobs.lock().expect("origin jobs poisoned").take() else {
            return;
        };
        loop {
            let job = tokio::select! {
                () = shutdown.cancelled() => return,
                job = jobs.recv() => match job {
                    Some(job) => job,
                    None => return,
                },
            };
            let state = self.find_origin(origins, &job).await;
            origins.settle(&job.canary, &job.checksum, state);
        }
    }

    async fn find_origin(&self, origins: &Origins, job: &Job) -> State {
        let result = match self.store.canary_tie(&job.canary, &job.checksum).await {
            Ok(Some(tie)) => Ok(tie),
            Ok(None) => self.look_up(origins, job).await,
            Err(e) => Err(OriginError(format!("the store: {e}"))),
        };
        let outcome = match &result {
            Ok(tie) if tie.pr.is_some() => "found",
            Ok(_) => "no_pr",
            Err(_) => "failed",
        };
        origins
            .lookups
            .get_or_create(&ResultLabels { result: outcome })
            .inc();
        match result {
            Ok(tie) => {
                tracing::info!(canary = %job.canary, commit = ?tie.commit, pr = ?tie.pr, "canary tied to its pull request");
                State::Known(scope_of(&tie), tie.commit.clone())
            }
            Err(OriginError(why)) => {
                let retry_in = origins.retry_in(job.attempts);
                tracing::warn!(canary = %job.canary, error = %why, ?retry_in, "cannot find the pull request of a canary's revision: its gate stays closed");
                let retry_ms = Millis::try_from(retry_in.as_millis()).unwrap_or(Millis::MAX);
                State::Failed {
                    attempts: job.attempts + 1,
                    retry_at: self.now().saturating_add(retry_ms),
                    why,
                }
            }
        }
    }

    async fn look_up(&self, origins: &Origins, job: &Job) -> Result<CanaryTie, OriginError> {
        let found = origins.finder.find(&job.canary).await?;
        let tie = CanaryTie {
            canary: job.canary.clone(),
            checksum: job.checksum.clone(),
            commit: found.commit,
            pr: found.pr,
            found_at: self.now(),
        };
        self.store
            .keep_canary_tie(&tie)
            .await
            .map_err(|e| OriginError(format!("the store: {e}")))?;
        Ok(tie)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nowhere;

    impl CanaryOrigin for Nowhere {
        fn find<'a>(&'a self, _: &'a CanaryRef) -> BoxFuture<'a, Result<Found, OriginError>> {
            Box::pin(async { Err(OriginError("nowhere".into())) })
        }
    }

    fn canary(name: &str) -> CanaryRef {
        CanaryRef::new("test", name).unwrap()
    }

    /// Made-up canaries that fail cannot keep a real one from being looked up.
    #[test]
    fn a_full_memory_makes_room_for_a_new_canary() {
        let mut origins = Origins::new(
            Arc::new(Nowhere),
            Duration::from_secs(60),
            Lookups::default(),
        );
        origins.remembered = 3;
        let mut jobs = origins.jobs.lock().unwrap().take().unwrap();
        for name in ["a", "b", "c"] {
            assert!(matches!(
                origins.lookup(&canary(name), "x", 0),
                Lookup::Waiting(_)
            ));
            let job = jobs.try_recv().unwrap();
            let failed = State::Failed {
                attempts: 1,
                retry_at: Millis::MAX,
                why: "nowhere".into(),
            };
            origins.settle(&job.canary, &job.checksum, failed);
        }
        assert_eq!(origins.ties().len(), 3);
        let real = canary("podinfo");
        assert!(matches!(origins.lookup(&real, "x", 0), Lookup::Waiting(_)));
        assert_eq!(jobs.try_recv().unwrap().canary, real, "queued");
        let ties = origins.ties();
        assert_eq!(ties.len(), 3, "bounded");
        assert!(matches!(ties[&real].state, State::Queued));
    }
}
