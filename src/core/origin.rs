//! A canary's own gate (`/gates/{kind}`) answered as the gate of the pull
//! request that brought the canary's revision, when gatebot may read the
//! cluster (`[kubernetes] lookup`).
//!
//! The check stays memory-only: an unknown (canary, checksum) is answered
//! closed at once and one lookup is queued; the worker finds the tie through a
//! [`CanaryOrigin`] (bootstrap composes the cluster and GitHub), keeps it in
//! the store and in memory, and the next check is answered as the PR's gate.
//! A failed lookup never opens anything: the canary waits, closed, until a
//! retry (with backoff) finds the tie.
//!
//! The name and the checksum come with an unauthenticated check, so lookups
//! are bounded by what the cluster holds, not by what is sent:
//! - a canary's target is read again at most once per [`REREAD_AFTER`],
//!   however many checksums arrive, and GitHub is asked only when the commit
//!   read differs from the one known (one call per target revision);
//! - a name the cluster does not hold is not read again for 32 times the
//!   backoff (a negative entry), and is warned about once, at most
//!   [`WARNINGS_PER_MINUTE`] in all (then DEBUG);
//! - a revision already tied is answered from memory, never queued; a canary
//!   known to be real (tied before, vouched by a token, or one Flagger sent an
//!   event for) is read in its own lane, so unknown names never delay it;
//! - unknown canaries share one lane of [`QUEUED`]; past it a check is refused
//!   a lookup (`gatebot_budget_refused_total{what="lookup"}`) and asked again
//!   at its next poll.

use std::collections::{HashMap, VecDeque};
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

/// Lookups of canaries not known to be real waiting for the worker; past it a
/// check is refused a lookup and asked again at its next poll. Canaries known
/// to be real have a lane of the same size of their own.
pub const QUEUED: usize = 64;

/// Canaries whose tie is kept in memory; past it a new canary takes the place
/// of one not being looked up (a failed one first: Flagger's side is
/// unauthenticated, and made-up canaries only ever fail). A tie dropped is
/// read back from the store at its canary's next check.
pub const REMEMBERED: usize = 10_000;

/// A canary's target is read again, for a checksum not tied yet, at most this
/// often (milliseconds).
pub const REREAD_AFTER: Millis = 30_000;

/// Checksums tied to a canary's current commit, the least recently asked
/// dropped first (Flagger asks its own every analysis interval).
pub const CHECKSUMS: usize = 16;

/// Checksums that asked while a canary's next read was not due yet, tied by
/// that read (the most recently asked kept).
const PENDING: usize = 8;

/// The longest checksum kept (Flagger's are about ten characters): memory
/// holds a few per canary, so a longer one is answered closed, not looked up.
pub const CHECKSUM_MAX: usize = 128;

/// Failed lookups logged at WARN in all per minute (each canary once); the
/// rest at DEBUG.
pub const WARNINGS_PER_MINUTE: u32 = 10;

/// A failure that names a missing object is kept this many backoffs.
const MISSING_ATTEMPTS: u32 = 5;

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
#[error("{why}")]
pub struct OriginError {
    pub why: String,
    /// The Canary (or its target) is not in the cluster: what a made-up name
    /// gets, kept longer than another failure.
    pub missing: bool,
}

impl OriginError {
    pub fn new(why: impl Into<String>) -> Self {
        Self {
            why: why.into(),
            missing: false,
        }
    }
}

/// Finds the commit a canary runs and the PR that brought it. `known`: what
/// an earlier lookup found; when the commit read is still its commit, GitHub
/// is not asked again.
pub trait CanaryOrigin: Send + Sync {
    fn find<'a>(
        &'a self,
        canary: &'a CanaryRef,
        known: Option<&'a Found>,
    ) -> BoxFuture<'a, Result<Found, OriginError>>;
}

/// What a check learns about its canary.
enum Lookup {
    /// Answer it as this gate's scope (the PR's), or as its own gate (None);
    /// the revision was built from this commit.
    Known(Option<Scope>, String),
    /// Not yet: closed, with this reason.
    Waiting(String),
    /// A read is due; `tied`: the canary was tied before (known to be real).
    Due { attempts: u32, tied: bool },
}

/// What the cluster said last about a canary.
#[derive(Debug, Clone)]
struct Tie {
    found: Found,
    /// The checksums tied to `found`, the most recently asked last.
    checksums: VecDeque<String>,
}

#[derive(Debug, Clone)]
struct Failed {
    attempts: u32,
    retry_at: Millis,
    why: String,
}

#[derive(Default)]
struct Entry {
    tie: Option<Tie>,
    /// A read queued or running.
    reading: bool,
    /// When the last read was queued.
    read_at: Option<Millis>,
    /// Checksums not tied yet that asked while no read was under way, tied by
    /// the next read.
    pending: VecDeque<String>,
    failed: Option<Failed>,
    /// Its failure was logged at WARN once.
    warned: bool,
}

/// One lookup for the worker.
struct Job {
    canary: CanaryRef,
    checksum: String,
    attempts: u32,
}

struct Lanes {
    /// Canaries known to be real.
    real: mpsc::Receiver<Job>,
    /// Everything else.
    unknown: mpsc::Receiver<Job>,
}

/// The ties in memory and the queues of lookups.
pub struct Origins {
    finder: Arc<dyn CanaryOrigin>,
    ties: Mutex<HashMap<CanaryRef, Entry>>,
    real: mpsc::Sender<Job>,
    unknown: mpsc::Sender<Job>,
    jobs: Mutex<Option<Lanes>>,
    backoff: Duration,
    /// [`REMEMBERED`], smaller in unit tests.
    remembered: usize,
    /// The minute (since the epoch) and the warnings logged in it.
    warnings: Mutex<(Millis, u32)>,
    /// `gatebot_canary_lookups_total{result}`.
    lookups: Lookups,
}

/// Lookups by result: `found`, `no_pr`, `failed`.
pub type Lookups = Family<ResultLabels, Counter>;

impl Origins {
    pub fn new(finder: Arc<dyn CanaryOrigin>, backoff: Duration, lookups: Lookups) -> Self {
        let (real, real_jobs) = mpsc::channel(QUEUED);
        let (unknown, unknown_jobs) = mpsc::channel(QUEUED);
        Self {
            finder,
            ties: Mutex::new(HashMap::new()),
            real,
            unknown,
            jobs: Mutex::new(Some(Lanes {
                real: real_jobs,
                unknown: unknown_jobs,
            })),
            backoff,
            remembered: REMEMBERED,
            warnings: Mutex::new((0, 0)),
            lookups,
        }
    }

    fn ties(&self) -> MutexGuard<'_, HashMap<CanaryRef, Entry>> {
        self.ties.lock().expect("canary ties poisoned")
    }

    /// What is known of `canary` at `checksum`, and whether a read is due. No I/O.
    fn lookup(&self, canary: &CanaryRef, checksum: &str, now: Millis) -> Lookup {
        if checksum.len() > CHECKSUM_MAX {
            return Lookup::Waiting(format!(
                "closed: the checksum is longer than {CHECKSUM_MAX} characters: not a revision of canary {canary}"
            ));
        }
        let mut ties = self.ties();
        let Some(entry) = ties.get_mut(canary) else {
            return Lookup::Due {
                attempts: 0,
                tied: false,
            };
        };
        if let Some(tie) = &mut entry.tie {
            if let Some(at) = tie.checksums.iter().position(|c| c == checksum) {
                // Asked again: the last to be dropped.
                let asked = tie.checksums.remove(at).expect("found at");
                tie.checksums.push_back(asked);
                let scope = scope_of_pr(tie.found.pr.as_ref());
                return Lookup::Known(scope, tie.found.commit.clone());
            }
        }
        if entry.reading {
            // Not tied by the read under way: it may have read the target
            // before this revision reached it.
            return Lookup::Waiting(looking(canary));
        }
        if let Some(why) = entry
            .failed
            .as_ref()
            .filter(|f| f.retry_at > now)
            .map(|f| failed(canary, &f.why))
        {
            remember_pending(entry, checksum);
            return Lookup::Waiting(why);
        }
        if entry.tie.is_some() && entry.read_at.is_some_and(|at| now < at + REREAD_AFTER) {
            remember_pending(entry, checksum);
            return Lookup::Waiting(looking(canary));
        }
        Lookup::Due {
            attempts: entry.failed.as_ref().map_or(0, |f| f.attempts),
            tied: entry.tie.is_some(),
        }
    }

    /// Queues a read of `canary` in its lane, unless one is queued already.
    /// False: the lane is full (refused).
    fn queue(
        &self,
        canary: &CanaryRef,
        checksum: &str,
        attempts: u32,
        real: bool,
        now: Millis,
    ) -> bool {
        let mut ties = self.ties();
        if ties.get(canary).is_some_and(|e| e.reading) {
            return true;
        }
        let job = Job {
            canary: canary.clone(),
            checksum: checksum.to_string(),
            attempts,
        };
        let lane = if real { &self.real } else { &self.unknown };
        if lane.try_send(job).is_err() {
            return false;
        }
        if !ties.contains_key(canary) && ties.len() >= self.remembered {
            make_room(&mut ties);
        }
        let entry = ties.entry(canary.clone()).or_default();
        entry.reading = true;
        entry.read_at = Some(now);
        true
    }

    /// Whether the cluster showed `canary`'s Canary object (at any revision).
    pub(super) fn confirmed(&self, canary: &CanaryRef) -> bool {
        self.ties().get(canary).is_some_and(|e| e.tie.is_some())
    }

    /// What is known of `canary`, for the finder.
    fn known(&self, canary: &CanaryRef) -> Option<Found> {
        let ties = self.ties();
        Some(ties.get(canary)?.tie.as_ref()?.found.clone())
    }

    fn settle(&self, canary: &CanaryRef, checksum: &str, result: Result<Found, Failed>) {
        let mut ties = self.ties();
        let Some(entry) = ties.get_mut(canary) else {
            return;
        };
        entry.reading = false;
        match result {
            Ok(found) => {
                entry.failed = None;
                entry.warned = false;
                // The checksums that asked before this read was queued are
                // the revision it read (Flagger's checksum changes after the
                // target does).
                let mut asked: Vec<String> = entry.pending.drain(..).collect();
                asked.retain(|c| c != checksum);
                asked.push(checksum.to_string());
                let tie = match &mut entry.tie {
                    Some(tie) if tie.found == found => tie,
                    _ => entry.tie.insert(Tie {
                        found,
                        checksums: VecDeque::new(),
                    }),
                };
                for c in asked {
                    tie.checksums.retain(|t| *t != c);
                    tie.checksums.push_back(c);
                    if tie.checksums.len() > CHECKSUMS {
                        tie.checksums.pop_front();
                    }
                }
            }
            Err(failed) => entry.failed = Some(failed),
        }
    }

    /// The ties the store keeps, the latest per canary (at start).
    fn load(&self, rows: Vec<CanaryTie>) {
        let mut ties = self.ties();
        for row in rows {
            if ties.len() >= self.remembered {
                break;
            }
            let entry = ties.entry(row.canary.clone()).or_default();
            entry.tie = Some(Tie {
                found: Found {
                    commit: row.commit.clone(),
                    pr: row.pr.clone(),
                },
                checksums: VecDeque::from([row.checksum.clone()]),
            });
        }
    }

    fn retry_in(&self, attempts: u32) -> Duration {
        self.backoff * 2u32.pow(attempts.min(MISSING_ATTEMPTS))
    }

    /// Whether a failed lookup of `canary` is logged at WARN: once per
    /// canary, and [`WARNINGS_PER_MINUTE`] in all.
    fn warn(&self, canary: &CanaryRef, now: Millis) -> bool {
        let mut ties = self.ties();
        let Some(entry) = ties.get_mut(canary) else {
            return false;
        };
        if entry.warned {
            return false;
        }
        let mut warnings = self.warnings.lock().expect("warnings poisoned");
        let minute = now / 60_000;
        if warnings.0 != minute {
            *warnings = (minute, 0);
        }
        if warnings.1 >= WARNINGS_PER_MINUTE {
            return false;
        }
        warnings.1 += 1;
        entry.warned = true;
        true
    }
}

fn remember_pending(entry: &mut Entry, checksum: &str) {
    entry.pending.retain(|c| c != checksum);
    entry.pending.push_back(checksum.to_string());
    if entry.pending.len() > PENDING {
        entry.pending.pop_front();
    }
}

/// Drops one canary not being looked up, a failed one if any. At most
/// 2 × [`QUEUED`] + 2 are being looked up, so one is found.
fn make_room(ties: &mut HashMap<CanaryRef, Entry>) {
    let failed = ties
        .iter()
        .find(|(_, e)| e.tie.is_none() && !e.reading)
        .or_else(|| ties.iter().find(|(_, e)| !e.reading))
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

fn scope_of_pr(pr: Option<&(RepoName, PrNumber)>) -> Option<Scope> {
    let (repo, number) = pr.cloned()?;
    Some(Scope::Pr { repo, number })
}

impl<'e> OriginLookup<'e> {
    /// Ties this engine's canary-scoped checks to their PRs (at start, once).
    pub async fn find_origins_with(self, origins: Arc<Origins>) -> Result<(), StoreError> {
        origins.load(self.engine.store.origins().canary_ties().await?);
        let _ = self.engine.origins.set(origins);
        Ok(())
    }

    /// A gate check, with a canary's own gate answered as its PR's when the
    /// tie is known (see the module). Every other check is [`Checks::check`].
    pub async fn check_canary(
        self,
        key: &GateKey,
        input: &CheckInput,
    ) -> Result<Checked, CommandError> {
        let (Some(origins), Some(canary), Scope::Canary(_)) =
            (self.engine.origins.get(), input.canary.as_ref(), &key.scope)
        else {
            return self.engine.checks().check(key, input).await;
        };
        let now = self.engine.now();
        let checksum = super::admit::Admit::to_verify(&input.checksum);
        let reason = match origins.lookup(canary, checksum.get(), now) {
            Lookup::Known(scope, commit) => {
                // The commit the cluster says this revision runs: what a
                // passage is recorded for when the metadata names none.
                let input = CheckInput {
                    found_commit: Some(super::admit::Admit::found_commit(commit)),
                    ..input.clone()
                };
                return match scope {
                    Some(scope) => {
                        self.engine
                            .checks()
                            .check(&GateKey::new(key.kind, scope), &input)
                            .await
                    }
                    None => self.engine.checks().check(key, &input).await,
                };
            }
            Lookup::Waiting(reason) => reason,
            Lookup::Due { attempts, tied } => {
                // Real: tied before, vouched by a token (which names the
                // cluster), or one a person's approval was used by. Not an
                // event: without tokens /flagger/events is as open as the
                // checks (the evidence's rule too).
                let real = tied
                    || input.cluster.is_some()
                    || self
                        .engine
                        .store
                        .deployments()
                        .canary_pinned(&canary.to_string())
                        .await?;
                // An unknown canary's lookup draws from its cluster's budget
                // (the draw counts a refusal itself).
                if !real && !self.engine.budget().draw_lookup(input.cluster.as_ref()) {
                    format!(
                        "closed: this cluster's budget of lookups for unknown canaries is spent this minute; {canary} is asked again at the next poll"
                    )
                } else if origins.queue(canary, checksum.get(), attempts, real, now) {
                    looking(canary)
                } else {
                    self.engine
                        .budget()
                        .count_refused("lookup", input.cluster.as_ref(), 1);
                    format!(
                        "closed: {QUEUED} canaries are being looked up already; {canary} is asked again at the next poll"
                    )
                }
            }
        };
        self.engine.checks().count_check(key.kind, Answer::Closed);
        Ok(Checked {
            verdict: Verdict::closed(reason),
            change: None,
        })
    }

    /// The lookup workers, one per lane, one lookup at a time each, until shutdown.
    pub async fn find_origins(self, shutdown: CancellationToken) {
        let Some(origins) = self.engine.origins.get() else {
            return;
        };
        let Some(lanes) = origins.jobs.lock().expect("origin jobs poisoned").take() else {
            return;
        };
        tokio::join!(
            self.work(origins, lanes.real, &shutdown),
            self.work(origins, lanes.unknown, &shutdown),
        );
    }

    async fn work(
        self,
        origins: &Origins,
        mut jobs: mpsc::Receiver<Job>,
        shutdown: &CancellationToken,
    ) {
        loop {
            let job = tokio::select! {
                () = shutdown.cancelled() => return,
                job = jobs.recv() => match job {
                    Some(job) => job,
                    None => return,
                },
            };
            let result = self.find_origin(origins, &job).await;
            origins.settle(&job.canary, &job.checksum, result);
        }
    }

    async fn find_origin(self, origins: &Origins, job: &Job) -> Result<Found, Failed> {
        let result = match self
            .engine
            .store
            .origins()
            .canary_tie(&job.canary, &job.checksum)
            .await
        {
            Ok(Some(tie)) => Ok(Found {
                commit: tie.commit,
                pr: tie.pr,
            }),
            Ok(None) => self.look_up(origins, job).await,
            Err(e) => Err(OriginError::new(format!("the store: {e}"))),
        };
        let outcome = match &result {
            Ok(found) if found.pr.is_some() => "found",
            Ok(_) => "no_pr",
            Err(_) => "failed",
        };
        origins
            .lookups
            .get_or_create(&ResultLabels { result: outcome })
            .inc();
        match result {
            Ok(found) => {
                tracing::info!(canary = %job.canary, commit = ?found.commit, pr = ?found.pr, "canary tied to its pull request");
                Ok(found)
            }
            Err(e) => {
                // A name the cluster does not hold is what a made-up check
                // sends: not read again for the longest backoff.
                let attempts = if e.missing {
                    job.attempts.max(MISSING_ATTEMPTS)
                } else {
                    job.attempts
                };
                let retry_in = origins.retry_in(attempts);
                let now = self.engine.now();
                if origins.warn(&job.canary, now) {
                    tracing::warn!(canary = %job.canary, error = %e.why, ?retry_in, "cannot find the pull request of a canary's revision: its gate stays closed");
                } else {
                    tracing::debug!(canary = %job.canary, error = %e.why, ?retry_in, "cannot find the pull request of a canary's revision: its gate stays closed");
                }
                let retry_ms = Millis::try_from(retry_in.as_millis()).unwrap_or(Millis::MAX);
                Err(Failed {
                    attempts: attempts + 1,
                    retry_at: now.saturating_add(retry_ms),
                    why: e.why,
                })
            }
        }
    }

    async fn look_up(self, origins: &Origins, job: &Job) -> Result<Found, OriginError> {
        let known = origins.known(&job.canary);
        let found = origins.finder.find(&job.canary, known.as_ref()).await?;
        // One row per canary and commit: a checksum made up for a real
        // canary's current commit does not replace the row of its own.
        if known.as_ref() != Some(&found) {
            let tie = CanaryTie {
                canary: job.canary.clone(),
                checksum: job.checksum.clone(),
                commit: found.commit.clone(),
                pr: found.pr.clone(),
                found_at: self.engine.now(),
            };
            self.engine
                .store
                .origins()
                .keep_canary_tie(&tie)
                .await
                .map_err(|e| OriginError::new(format!("the store: {e}")))?;
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nowhere;

    impl CanaryOrigin for Nowhere {
        fn find<'a>(
            &'a self,
            _: &'a CanaryRef,
            _: Option<&'a Found>,
        ) -> BoxFuture<'a, Result<Found, OriginError>> {
            Box::pin(async { Err(OriginError::new("nowhere")) })
        }
    }

    fn canary(name: &str) -> CanaryRef {
        CanaryRef::new("test", name).unwrap()
    }

    fn origins(remembered: usize) -> Origins {
        let mut origins = Origins::new(
            Arc::new(Nowhere),
            Duration::from_secs(60),
            Lookups::default(),
        );
        origins.remembered = remembered;
        origins
    }

    /// Made-up canaries that fail cannot keep a real one from being looked up.
    #[test]
    fn a_full_memory_makes_room_for_a_new_canary() {
        let origins = origins(3);
        let mut lanes = origins.jobs.lock().unwrap().take().unwrap();
        for name in ["a", "b", "c"] {
            assert!(matches!(
                origins.lookup(&canary(name), "x", 0),
                Lookup::Due { .. }
            ));
            assert!(origins.queue(&canary(name), "x", 0, false, 0));
            let job = lanes.unknown.try_recv().unwrap();
            let failed = Failed {
                attempts: 1,
                retry_at: Millis::MAX,
                why: "nowhere".into(),
            };
            origins.settle(&job.canary, &job.checksum, Err(failed));
        }
        assert_eq!(origins.ties().len(), 3);
        let real = canary("podinfo");
        assert!(origins.queue(&real, "x", 0, false, 0));
        assert_eq!(lanes.unknown.try_recv().unwrap().canary, real, "queued");
        let ties = origins.ties();
        assert_eq!(ties.len(), 3, "bounded");
        assert!(ties[&real].reading);
    }

    /// Checksums made up for a tied canary cost one read per interval and
    /// never push out the revision Flagger asks about.
    #[test]
    fn made_up_checksums_of_a_tied_canary_are_read_once_an_interval() {
        let origins = origins(10);
        let mut lanes = origins.jobs.lock().unwrap().take().unwrap();
        let real = canary("podinfo");
        let found = Found {
            commit: "abc1234".into(),
            pr: None,
        };
        assert!(origins.queue(&real, "real", 0, false, 0));
        lanes.unknown.try_recv().unwrap();
        origins.settle(&real, "real", Ok(found.clone()));
        let mut due = 0;
        for n in 0..=300 {
            let now = n * 200;
            if let Lookup::Due { tied, .. } = origins.lookup(&real, &format!("made-up-{n}"), now) {
                assert!(tied);
                due += 1;
                assert!(origins.queue(&real, &format!("made-up-{n}"), 0, tied, now));
                let job = lanes.real.try_recv().unwrap();
                origins.settle(&real, &job.checksum, Ok(found.clone()));
            }
            if n % 50 == 0 {
                assert!(matches!(
                    origins.lookup(&real, "real", now),
                    Lookup::Known(None, _)
                ));
            }
        }
        assert_eq!(due, 2, "one read per {REREAD_AFTER} ms over 60 s");
    }

    /// Memory keeps a few checksums per canary: a long one is never kept.
    #[test]
    fn a_long_checksum_is_not_looked_up() {
        let origins = origins(3);
        let long = "x".repeat(CHECKSUM_MAX + 1);
        assert!(matches!(
            origins.lookup(&canary("a"), &long, 0),
            Lookup::Waiting(_)
        ));
        assert!(origins.ties().is_empty());
    }
}
