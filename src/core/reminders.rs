//! Reminders: while a wait lasts, the people who may decide are reminded at
//! the policy's points (`[reminders] at = ["30m", "2h", "8h"]`): in the Slack
//! thread, and on the PR. Each point is reminded once, across restarts and
//! replicas (the wait row counts them); reminders stop when the wait ends or
//! its deadline passed.

use super::*;
use crate::command::Command;
use crate::gate::reminder;
use crate::policy::Policy;

/// The most waits looked at in one pass.
const PASS: i64 = 1000;

impl Engine {
    /// Sends the reminders due now. Returns how many.
    pub async fn send_reminders(&self, policy: &Policy) -> Result<usize, EngineError> {
        let points = &policy.reminders().at;
        if points.is_empty() {
            return Ok(0);
        }
        let now = self.now();
        let mut sent = 0;
        for wait in self.store.open_canary_waits(PASS).await? {
            let Some(canary) = wait.canary.clone() else {
                continue;
            };
            let kind = wait.gate.kind;
            let command = match kind {
                GateKind::Start => Command::Start,
                GateKind::Promote => Command::Promote,
                GateKind::Traffic => Command::Traffic,
                _ => continue,
            };
            if !policy.reminders().kinds.contains(&kind) {
                continue;
            }
            let before = usize::try_from(wait.reminders_sent.max(0)).unwrap_or(usize::MAX);
            let Some((passed, point)) = reminder::due(points, wait.started_at, now, before) else {
                continue;
            };
            let mut unit = self.begin().await?;
            if !Store::mark_reminded(unit.tx(), wait.id, wait.reminders_sent, passed as i64).await?
            {
                unit.rollback().await;
                continue;
            }
            let notice = Notice::Reminder {
                wait_id: wait.id,
                gate: wait.gate.clone(),
                canary,
                checksum: wait.checksum.clone(),
                waited: humantime::format_duration(point).to_string(),
                point: passed as i64,
                slack_mentions: policy.slack(command).approvers,
                github_mentions: policy.github(command).teams,
                at: now,
            };
            unit.notify(&[notice]).await?;
            unit.commit().await?;
            sent += 1;
        }
        Ok(sent)
    }
}
