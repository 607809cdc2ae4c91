//! Reminders: while a wait lasts, the people who may decide are reminded at
//! the policy's points (`[reminders] at = ["30m", "2h", "8h"]`): in the Slack
//! thread, and on the PR. Each point is reminded once, across restarts and
//! replicas (the wait row counts them); reminders stop when the wait ends or
//! its deadline passed.

use super::*;
use crate::command::Verb;
use crate::gate::reminder;
use crate::policy::Policy;
use crate::store::{WaitRow, WAIT_PAGE};

impl<'e> Reminders<'e> {
    /// Sends the reminders due now: only the waits whose next reminder is
    /// due are read, a page at a time. Returns how many.
    pub async fn send_reminders(self, policy: &Policy) -> Result<usize, CommandError> {
        if policy.reminders().at.is_empty() {
            return Ok(0);
        }
        let now = self.engine.now();
        let (mut sent, mut after) = (0, None);
        loop {
            let page = self
                .engine
                .store
                .waits()
                .waits_to_remind(now, after)
                .await?;
            for wait in &page {
                sent += usize::from(self.remind(policy, wait, now).await?);
            }
            match page.last() {
                Some(last) if page.len() == WAIT_PAGE => {
                    after = Some((last.remind_at.unwrap_or(now), last.id))
                }
                _ => return Ok(sent),
            }
        }
    }

    /// One wait's reminder, for the latest point passed; the next one is set.
    async fn remind(
        self,
        policy: &Policy,
        wait: &WaitRow,
        now: Millis,
    ) -> Result<bool, CommandError> {
        let Some(canary) = wait.canary.clone() else {
            return Ok(false);
        };
        let kind = wait.gate.kind;
        let command = match kind {
            GateKind::Start => Verb::Start,
            GateKind::Promote => Verb::Promote,
            GateKind::Traffic => Verb::Traffic,
            _ => return Ok(false),
        };
        let points = &policy.reminders().at;
        let before = usize::try_from(wait.reminders_sent.max(0)).unwrap_or(usize::MAX);
        let due = reminder::due(points, wait.started_at, now, before);
        let passed = due.map_or(before, |(passed, _)| passed);
        let next = self
            .engine
            .settings
            .timers
            .remind_at(kind, wait.started_at, passed);
        let mut unit = self.engine.commands().begin().await?;
        if !crate::store::Waits::mark_reminded(
            unit.tx(),
            wait.id,
            wait.reminders_sent,
            passed as i64,
            next,
        )
        .await?
        {
            unit.rollback().await;
            return Ok(false);
        }
        let Some((passed, point)) = due else {
            // Not due after all (set by another policy): only its next time moved.
            unit.commit().await?;
            return Ok(false);
        };
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
        Ok(true)
    }
}
