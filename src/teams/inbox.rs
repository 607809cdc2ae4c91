//! Work on stored Teams activities (the inbox's `teams` source).

use crate::notify::{BoxFuture, Handler, SendError};
use crate::store::QueueItem;

use super::activity::Activity;

/// A message typed to the bot.
pub const MESSAGE: &str = "message";

pub struct TeamsInbox;

impl Handler for TeamsInbox {
    fn handle<'a>(&'a self, item: &'a QueueItem) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let activity: Activity = serde_json::from_str(&item.payload)
                .map_err(|e| SendError::Permanent(format!("stored activity: {e}")))?;
            // Commands typed to the bot are not applied yet (docs/teams.md):
            // the message is kept as a receipt, and said so in the log.
            tracing::info!(kind = %activity.kind, from = %activity.from.name,
                "Teams message received; commands from Teams are not applied yet");
            Ok(())
        })
    }
}
