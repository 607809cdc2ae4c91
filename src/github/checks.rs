//! Check runs ([github] check_runs, GitHub App only): one per waiting
//! gate of a pull request, on its head commit, with Promote (or Start,
//! Traffic), Roll back and Hold buttons.
//!
//! Sending: one outbox job per (PR, gate kind), deduplicated, that renders the
//! gate at send time and creates or edits the run, so an edit can never
//! overtake the creation it edits: there is one job, and it edits only a run
//! it finds stored. A push moves the head: the old run completes `neutral`
//! and a new one starts while the gate still waits. The run completes
//! `success` when Flagger reports the promotion and `failure` on a rollback.
//!
//! Clicks on the buttons are `clicks.rs`'s.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use super::client::GithubClient;
use super::retry;
use crate::clock::SharedClock;
use crate::command::Command;
use crate::core::commands::rollback_of;
use crate::core::Records;
use crate::gate::{GateKey, GateKind, GateStatus, Millis, Phase, PrNumber, RepoName, Scope};
use crate::notify::SendError;
use crate::store::{CheckRunRow, StoreError};
use crate::templates::escape::{self, code};
use crate::templates::Templates;

/// The gates that get a check run: those a person opens for Flagger to go on.
pub const KINDS: [GateKind; 3] = [GateKind::Start, GateKind::Promote, GateKind::Traffic];

/// How long a claim to create a run stands against another job.
const CREATION_CLAIM: Millis = 60_000;

/// What one of a run's buttons does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Button {
    Open,
    Reject,
    Hold,
}

impl Button {
    fn identifier(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Reject => "reject",
            Self::Hold => "hold",
        }
    }

    pub fn parse(identifier: &str) -> Option<Self> {
        [Self::Open, Self::Reject, Self::Hold]
            .into_iter()
            .find(|b| b.identifier() == identifier)
    }

    /// GitHub's requested action: label up to 20 characters, description up to 40.
    fn action(self, kind: GateKind) -> Value {
        let (label, description) = match (self, kind) {
            (Self::Open, GateKind::Start) => ("Start", "Let the canary start"),
            (Self::Open, GateKind::Traffic) => {
                ("Increase traffic", "Let the canary take more traffic")
            }
            (Self::Open, _) => ("Promote", "Promote this revision"),
            (Self::Reject, GateKind::Start) => ("Reject", "Keep the canary from starting"),
            (Self::Reject, _) => ("Roll back", "Roll the canary back"),
            (Self::Hold, _) => ("Hold", "Keep the gate closed until unheld"),
        };
        json!({"label": label, "description": description, "identifier": self.identifier()})
    }

    pub fn command(self, kind: GateKind) -> Command {
        match self {
            Self::Open => Command::Open {
                kind,
                reason: None,
                force: false,
            },
            Self::Reject => Command::Reject {
                phase: None,
                reason: None,
            },
            Self::Hold => Command::Hold { reason: None },
        }
    }
}

/// What a gate's run shows.
#[derive(Debug, Clone, Serialize)]
struct Shown {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    conclusion: Option<&'static str>,
    output: Output,
    actions: Vec<Value>,
}

#[derive(Debug, Clone, Serialize)]
struct Output {
    title: String,
    summary: String,
}

/// A gate as its run shows it, and whether Flagger waits there now.
struct Gate {
    shown: Shown,
    waiting: bool,
}

/// A revision as a title shows it: the first 7 letters and digits.
fn short(checksum: &str) -> String {
    checksum
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(7)
        .collect()
}

/// Sends the check-run jobs of the `github` sink.
pub struct CheckRuns {
    pub client: Arc<GithubClient>,
    pub records: Records,
    pub templates: Templates,
    pub clock: SharedClock,
}

impl CheckRuns {
    /// Creates, edits or supersedes the run of the PR's gate of `kind`.
    pub async fn send(
        &self,
        repo: &RepoName,
        number: PrNumber,
        kind: GateKind,
        job: &str,
    ) -> Result<(), SendError> {
        let key = GateKey::new(
            kind,
            Scope::Pr {
                repo: repo.clone(),
                number,
            },
        );
        let gate = self.gate(&key).await.map_err(retry)?;
        let mut known = self
            .records
            .check_run(repo, number, kind)
            .await
            .map_err(retry)?;
        if let Some(k) = known.as_ref().filter(|k| k.run_id == 0) {
            if k.digest.as_deref() != Some(format!("creating:{job}").as_str()) {
                return Err(SendError::retry(format!(
                    "the {kind} check run of {repo}#{number} is being created elsewhere"
                )));
            }
            known = None;
        }
        if let Some(k) = known.clone() {
            let head = super::pushes::head(&self.records, &self.client, repo, number).await?;
            if k.head_sha != head {
                self.supersede(repo, &k, &head).await?;
                self.records
                    .forget_check_run(repo, number, kind, k.run_id)
                    .await
                    .map_err(retry)?;
                known = None;
            }
        }
        match known {
            Some(k) => self.edit(repo, number, kind, k, &gate.shown).await,
            None if gate.waiting => self.create(&key, job, &gate.shown).await,
            None => Ok(()),
        }
    }

    async fn edit(
        &self,
        repo: &RepoName,
        number: PrNumber,
        kind: GateKind,
        known: CheckRunRow,
        shown: &Shown,
    ) -> Result<(), SendError> {
        let digest = digest(shown);
        if known.digest.as_deref() == Some(digest.as_str()) {
            return Ok(());
        }
        let body = serde_json::to_value(shown).map_err(|e| SendError::retry(e.to_string()))?;
        self.client
            .update_check_run(repo, known.run_id, body)
            .await
            .map_err(|e| e.to_send_error())?;
        let sent = CheckRunRow {
            digest: Some(digest),
            ..known
        };
        let now = self.clock.now_ms();
        self.records
            .put_check_run(repo, number, kind, &sent, now)
            .await
            .map_err(retry)
    }

    async fn create(&self, key: &GateKey, job: &str, shown: &Shown) -> Result<(), SendError> {
        let Some((repo, number)) = key.pr() else {
            return Ok(());
        };
        let head = super::pushes::head(&self.records, &self.client, repo, number).await?;
        let now = self.clock.now_ms();
        let claimed = self
            .records
            .claim_check_run(key, &head, job, now, CREATION_CLAIM)
            .await
            .map_err(retry)?;
        if !claimed {
            return Err(SendError::retry(format!(
                "the {} check run of {repo}#{number} is being created elsewhere",
                key.kind
            )));
        }
        let mut body = serde_json::to_value(shown).map_err(|e| SendError::retry(e.to_string()))?;
        body["name"] = json!(format!("gatebot / {}", key.kind));
        body["head_sha"] = json!(head);
        body["external_id"] = json!(key.to_string());
        let created = self.client.create_check_run(repo, body).await;
        let run_id = match created {
            Ok(id) => id,
            Err(e) => {
                // The next attempt (here or elsewhere) may claim it again.
                self.records
                    .forget_check_run(repo, number, key.kind, 0)
                    .await
                    .map_err(retry)?;
                return Err(e.to_send_error());
            }
        };
        let sent = CheckRunRow {
            head_sha: head,
            run_id,
            digest: Some(digest(shown)),
            updated_at: self.clock.now_ms(),
        };
        self.records
            .put_check_run(repo, number, key.kind, &sent, self.clock.now_ms())
            .await
            .map_err(retry)
    }

    /// Completes a run of an earlier head `neutral`, unless it had ended.
    async fn supersede(
        &self,
        repo: &RepoName,
        known: &CheckRunRow,
        head: &str,
    ) -> Result<(), SendError> {
        if known
            .digest
            .as_deref()
            .is_some_and(|d| d.starts_with(ENDED))
        {
            return Ok(());
        }
        let body = json!({
            "status": "completed",
            "conclusion": "neutral",
            "output": {
                "title": format!("Superseded by a push ({})", short(head)),
                "summary": format!(
                    "New commits were pushed (`{}`), so this run was about an earlier revision. The gate's run on the new head commit takes over.",
                    short(head)
                ),
            },
            "actions": [],
        });
        match self.client.update_check_run(repo, known.run_id, body).await {
            Ok(()) => Ok(()),
            // Deleted with its commit, say: nothing left to supersede.
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.to_send_error()),
        }
    }

    /// The gate as its run shows it now.
    async fn gate(&self, key: &GateKey) -> Result<Gate, StoreError> {
        let now = self.clock.now_ms();
        let gate = self.records.load_gate(key).await?;
        let waiting = !self.records.waits(Some(key), true, 1).await?.is_empty();
        let observations = self.records.observations_for(key).await?;
        let mut ended = None;
        for o in &observations {
            for e in self.records.events(Some(&o.canary.to_string()), 20).await? {
                let end = match e.kind.as_str() {
                    "promotion_completed" => "success",
                    "canary_failed" | "rolling_back" => "failure",
                    _ => continue,
                };
                if e.checksum == o.checksum && ended.is_none_or(|(at, _)| e.received_at > at) {
                    ended = Some((e.received_at, end));
                }
            }
        }
        let ended = ended.map(|(_, end)| end);
        let (state, _) = state_of(gate.as_ref().map(|g| &g.status), now);
        let first = observations.first();
        let about = match first {
            Some(o) => format!(" {} at {}", o.canary, short(&o.checksum)),
            None => String::new(),
        };
        let title = match (ended, state) {
            (Some("success"), _) => format!("Promoted:{about}"),
            (Some(_), _) => format!("Rolled back:{about}"),
            (None, "open") => format!("Approved:{about}"),
            (None, "held") => format!("Held:{about}"),
            (None, _) if waiting => format!("Waiting for approval:{about}"),
            (None, _) => format!("Closed:{about}"),
        };
        let status = gate.as_ref().map(|g| &g.status);
        let summary = self
            .summary(key, status, now, &observations, ended.is_some())
            .await?;
        let actions = match ended {
            Some(_) => Vec::new(),
            None => [Button::Open, Button::Reject, Button::Hold]
                .into_iter()
                .map(|b| b.action(key.kind))
                .collect(),
        };
        Ok(Gate {
            shown: Shown {
                status: if ended.is_some() {
                    "completed"
                } else {
                    "in_progress"
                },
                conclusion: ended,
                output: Output {
                    title: title.trim_end_matches(':').to_string(),
                    summary,
                },
                actions,
            },
            waiting,
        })
    }

    async fn summary(
        &self,
        key: &GateKey,
        status: Option<&GateStatus>,
        now: Millis,
        observations: &[crate::store::ObservationRow],
        ended: bool,
    ) -> Result<String, StoreError> {
        let (state, change) = state_of(status, now);
        let canaries: Vec<Value> = observations
            .iter()
            .map(|o| {
                json!({
                    "canary": code(&o.canary.to_string(), escape::NAME),
                    "phase": code(o.phase.as_str(), escape::WORD),
                    "checksum": code(&o.checksum, escape::CHECKSUM),
                    "answer": code(o.answer.as_str(), escape::MESSAGE),
                })
            })
            .collect();
        let last = self.last(key).await?.map(|e| {
            json!({
                "by": code(&e.actor.name, escape::NAME),
                "via": e.actor.source.to_string(),
                "action": e.action.as_str(),
                "reason": e.reason.map(|r| code(&r, escape::MESSAGE)),
            })
        });
        // Who approved and who is still needed, as the status comment says it.
        let approvals = match status {
            Some(GateStatus::Approving(t)) => Some(code(&t.summary(), escape::MESSAGE)),
            _ => None,
        };
        let ctx = json!({
            "key": key.to_string(),
            "kind": key.kind.as_str(),
            "state": state,
            "approvals": approvals,
            "by": change.map(|c| code(&c.by.name, escape::NAME)),
            "via": change.map(|c| c.by.source.to_string()),
            "canaries": canaries,
            "last": last,
            "command": key.kind.command(),
            "ended": ended,
        });
        self.templates
            .render("github/check_run.md.j2", ctx)
            .map(|s| s.trim().to_string())
            .map_err(|e| StoreError::Corrupt(format!("cannot render the check run: {e:#}")))
    }

    /// Who did what last at the gate, or at the rollback gate its Reject opens.
    async fn last(&self, key: &GateKey) -> Result<Option<crate::store::AuditEntry>, StoreError> {
        let mut entries = self.records.audit_log(Some(key), 1).await?;
        if let Some(rollback) = rollback_of(key, &Phase::None) {
            entries.extend(self.records.audit_log(Some(&rollback), 1).await?);
        }
        Ok(entries.into_iter().max_by_key(|e| e.at))
    }
}

/// Stored digests of ended runs start so: a push leaves them as they ended.
const ENDED: &str = "ended:";
/// Between the digest of the whole run and that of its output, which a
/// click's payload carries (`written_at`).
const OUTPUT: char = '~';

fn digest(shown: &Shown) -> String {
    use sha2::{Digest, Sha256};
    let text = serde_json::to_string(shown).unwrap_or_default();
    let hash = hex::encode(Sha256::digest(text.as_bytes()));
    let output = output_digest(&shown.output.title, &shown.output.summary);
    match shown.conclusion {
        Some(_) => format!("{ENDED}{hash}{OUTPUT}{output}"),
        None => format!("{hash}{OUTPUT}{output}"),
    }
}

/// A run's output (title and summary), as a digest.
fn output_digest(title: &str, summary: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(title.as_bytes());
    hash.update([0]);
    hash.update(summary.as_bytes());
    hex::encode(&hash.finalize()[..16])
}

/// When what a click on the run `known` saw was written, for the rule that
/// a command written before a gate's last close does not reopen it: the time
/// gatebot last edited the run, when the click carries that edit's output;
/// else the output is an earlier one, written no later than the run's
/// creation (`started_at`, GitHub's time) can tell, and with no creation
/// time, before every close.
pub fn written_at(
    known: &CheckRunRow,
    title: &str,
    summary: &str,
    started_at: Option<Millis>,
) -> Millis {
    let last = known
        .digest
        .as_deref()
        .and_then(|d| d.rsplit_once(OUTPUT))
        .map(|(_, output)| output);
    if last == Some(output_digest(title, summary).as_str()) {
        return known.updated_at;
    }
    started_at.unwrap_or(Millis::MIN)
}

/// The gate's state in a word, and the change that made it so.
fn state_of(
    status: Option<&GateStatus>,
    now: Millis,
) -> (&'static str, Option<&crate::gate::Change>) {
    match status {
        Some(GateStatus::Open(a)) if !a.expired(now) => ("open", Some(&a.change)),
        Some(GateStatus::Held { change }) => ("held", Some(change)),
        Some(GateStatus::Closed { change }) => ("closed", change.as_ref()),
        Some(GateStatus::Approving(t)) => ("closed", t.votes.last().map(|v| &v.change)),
        Some(GateStatus::Open(_)) | None => ("closed", None),
    }
}
