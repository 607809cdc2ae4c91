//! The parts of a Bot Framework activity gatebot reads, leniently: Teams adds
//! fields over time, and a missing one is empty rather than a refusal.

use serde::{Deserialize, Serialize};

use crate::gate::Millis;

/// Longest activity id or conversation id kept; Teams' are under 200 characters.
const MAX_ID: usize = 512;

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Activity {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    pub service_url: String,
    pub text: String,
    pub from: Account,
    pub conversation: Conversation,
    pub channel_data: ChannelData,
    /// When gatebot stored it (Unix ms): not sent by Teams, set on receipt.
    pub received_at: Option<Millis>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Account {
    pub id: String,
    pub name: String,
    pub aad_object_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Conversation {
    pub id: String,
    pub conversation_type: Option<String>,
    pub tenant_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct ChannelData {
    pub tenant: Option<Tenant>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Tenant {
    pub id: String,
}

impl Activity {
    pub fn from_json(body: &[u8]) -> Result<Self, String> {
        let activity: Self = serde_json::from_slice(body)
            .map_err(|e| format!("not a Bot Framework activity: {e}"))?;
        if activity.id.len() > MAX_ID || activity.conversation.id.len() > MAX_ID {
            return Err(format!("an id longer than {MAX_ID} characters"));
        }
        Ok(activity)
    }

    /// The tenant Teams names in `channelData`, or the conversation's.
    pub fn tenant(&self) -> Option<&str> {
        self.channel_data
            .tenant
            .as_ref()
            .map(|t| t.id.as_str())
            .or(self.conversation.tenant_id.as_deref())
            .filter(|t| !t.is_empty())
    }

    /// The receipt's id: an activity id is unique within its conversation,
    /// so a replayed or redelivered activity is stored once.
    pub fn receipt_id(&self) -> String {
        format!("{}:{}:{}", self.kind, self.conversation.id, self.id)
    }
}
