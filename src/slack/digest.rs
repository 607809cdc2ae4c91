//! The digest: one Slack message for the waits of a minute that were over
//! [limits] notify_burst in a channel, read from the store when the minute is over.

use std::collections::BTreeMap;

use super::sink::{store_err, SlackSink, CHANNEL_METADATA, NAME, POST_ONCE};
use crate::gate::{CanaryRef, GateKey, Millis};
use crate::notify::SendError;
use crate::templates::escape::{self, mrkdwn};

/// Waits named in a digest; the rest are counted.
const NAMED: usize = 10;

impl SlackSink {
    /// The channel a wait is announced in: `slack_channel` when it is the
    /// default, when `[[slack.channels]]` binds it to `gates` or `canary`, or
    /// when no canary sent it (a named gate's, set through the signed-in
    /// API); else the default. A canary's metadata is anyone's word and must
    /// not post Approve buttons into a channel of its choosing: an unbound
    /// one is dropped, and with `report` logged and counted.
    pub(super) fn channel_of<'a>(
        &'a self,
        metadata: &'a BTreeMap<String, String>,
        gates: &[GateKey],
        canary: Option<&CanaryRef>,
        report: bool,
    ) -> Option<&'a str> {
        let configured = self.channel.as_deref().map(str::trim);
        let claimed = metadata
            .get(CHANNEL_METADATA)
            .map(|c| c.trim())
            .filter(|c| !c.is_empty());
        if let Some(claimed) = claimed {
            if canary.is_none()
                || Some(claimed) == configured
                || self.bound.allows(claimed, gates, canary)
            {
                return Some(claimed);
            }
            if report {
                tracing::warn!(channel = ?claimed, gate = ?gates.first().map(ToString::to_string),
                    "slack_channel names a channel [[slack.channels]] does not bind to this canary: not followed");
                self.metrics.dropped(NAME, "slack_channel_not_bound");
            }
        }
        configured
    }

    /// Tells the channel about the waits of a minute that were not announced
    /// one by one, read from the store now (the job was queued with the first).
    pub(super) async fn digest(
        &self,
        channel: &str,
        since: Millis,
        until: Millis,
    ) -> Result<(), SendError> {
        let mut after = 0;
        let mut count = 0usize;
        let mut named = Vec::new();
        loop {
            let page = self
                .records
                .unannounced_waits(POST_ONCE, since, until, after, 500)
                .await
                .map_err(store_err)?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for w in page {
                // Written by gatebot itself; unreadable, it names no channel.
                let metadata = serde_json::from_str(&w.metadata).unwrap_or_else(|e| {
                    tracing::warn!(wait = w.id, error = %e, "unreadable wait metadata");
                    BTreeMap::new()
                });
                let gate = GateKey::parse(&w.gate, self.default_repo.as_ref()).ok();
                let canary = w.canary.parse::<CanaryRef>().ok();
                let gates = gate.as_slice();
                if self.channel_of(&metadata, gates, canary.as_ref(), false) != Some(channel) {
                    continue;
                }
                count += 1;
                if named.len() < NAMED {
                    named.push(serde_json::json!({
                        "gate": mrkdwn(&w.gate, escape::METADATA),
                        "canary": mrkdwn(&w.canary, escape::NAME),
                    }));
                }
            }
        }
        if count == 0 {
            return Ok(());
        }
        let text = self
            .templates
            .render(
                "slack/digest.j2",
                serde_json::json!({
                    "count": count, "waits": named, "more": count - named.len(),
                    "limit": self.burst.limit(), "since": since,
                }),
            )
            .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
        self.api
            .post_message(channel, text.trim(), None, None)
            .await?;
        Ok(())
    }
}
