//! Taking back one person's approval at a gate that needs several (a
//! dismissed GitHub review): while the votes have not opened the gate, that
//! person's vote stops counting; once they opened it, it was used and stands.

use super::unit::Unit;
use super::{CommandError, Provenance};
use crate::gate::{AuditAction, Change, GateKey, GateStatus};

/// What came of taking a vote back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Withdrawn {
    /// The vote no longer counts; the gate's tally as it is now ("0 of 2 approvals").
    Counted(String),
    /// The vote helped open the gate: it was used, and stands.
    Used,
    /// The person had no vote there.
    Nothing,
}

impl Unit<'_> {
    /// Takes `person`'s vote at `key` back, by `who` (the one who dismissed
    /// it): only the vote `cast` gave (its reason), when named. A delivery
    /// already applied changes nothing.
    pub async fn withdraw(
        &mut self,
        key: &GateKey,
        person: &str,
        cast: Option<&str>,
        who: &Provenance,
    ) -> Result<Withdrawn, CommandError> {
        let person = person.to_ascii_lowercase();
        let gate = self.gate(key).await?;
        let now = self.now();
        let tally = match gate.status {
            GateStatus::Approving(t) => t,
            GateStatus::Open(a)
                if !a.expired(now)
                    && (a.approvers.is_empty()
                        && a.change.by.name.eq_ignore_ascii_case(&person)
                        || a.approvers
                            .iter()
                            .any(|b| b.name.eq_ignore_ascii_case(&person))) =>
            {
                return Ok(Withdrawn::Used);
            }
            _ => return Ok(Withdrawn::Nothing),
        };
        let Some(left) = tally.without(&person, cast) else {
            return Ok(Withdrawn::Nothing);
        };
        let summary = left.summary();
        let status = if left.votes.is_empty() {
            GateStatus::Closed {
                change: Some(Change {
                    by: who.actor.clone(),
                    reason: who.reason.clone(),
                    at: now,
                }),
            }
        } else {
            GateStatus::Approving(left)
        };
        self.change(key, AuditAction::Withdraw, who, |_, _, _| Ok(Some(status)))
            .await?;
        Ok(Withdrawn::Counted(summary))
    }
}
