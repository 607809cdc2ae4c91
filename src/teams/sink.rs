//! Every write to Teams, through the outbox (retries, Retry-After, leases):
//! for now the answer to a command typed to the bot, posted in its thread.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::client::Connector;
use crate::notify::{encode_job, BoxFuture, Handler, Notice, PayloadError, SendError, Sink};
use crate::store::{NewJob, QueueItem};

pub const NAME: &str = "teams";
const REPLY: &str = "reply";

/// A job of the `teams` sink.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    pub service_url: String,
    pub conversation_id: String,
    /// The activity answered: Teams shows the reply in its thread.
    pub reply_to_id: String,
    pub text: String,
}

impl Reply {
    /// Once per activity answered: a command applied again sends no second reply.
    pub fn job(&self) -> Result<NewJob, PayloadError> {
        Ok(NewJob {
            once_key: Some(format!(
                "teams-reply:{}:{}",
                self.conversation_id, self.reply_to_id
            )),
            ..encode_job(NAME, REPLY, self)?
        })
    }
}

pub struct TeamsSink {
    pub connector: Arc<Connector>,
}

impl Sink for TeamsSink {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Gate changes are not shown in Teams yet (no cards): nothing to plan.
    fn plan(&self, _notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
        Ok(Vec::new())
    }
}

impl Handler for TeamsSink {
    fn handle<'a>(&'a self, item: &'a QueueItem) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let reply: Reply = serde_json::from_str(&item.payload)
                .map_err(|e| SendError::Permanent(format!("unreadable Teams job: {e}")))?;
            // Plain text: what people and Flagger wrote is never markup here.
            let activity = json!({
                "type": "message",
                "text": reply.text,
                "textFormat": "plain",
                "replyToId": reply.reply_to_id,
            });
            self.connector
                .send(&reply.service_url, &reply.conversation_id, &activity)
                .await
        })
    }
}
