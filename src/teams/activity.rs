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
    /// The channel the activity came through: `msteams` for Teams.
    pub channel_id: String,
    pub text: String,
    pub from: Account,
    pub conversation: Conversation,
    pub channel_data: ChannelData,
    /// The bot itself, in what Teams sends it.
    pub recipient: Account,
    /// An invoke's name (`adaptiveCard/action`).
    pub name: String,
    /// An invoke's value: the card action clicked.
    pub value: InvokeValue,
    /// `installationUpdate`: `add`, `remove` (or their `-upgrade` forms).
    pub action: String,
    /// `conversationUpdate`: who joined or left (the bot, when it is added or removed).
    pub members_added: Vec<Account>,
    pub members_removed: Vec<Account>,
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
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct ChannelData {
    pub tenant: Option<Tenant>,
    pub team: Option<Team>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Team {
    pub name: String,
}

/// `value` of an `adaptiveCard/action` invoke.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct InvokeValue {
    pub action: CardAction,
}

/// The `Action.Execute` clicked: its verb and the data gatebot put in it.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct CardAction {
    #[serde(rename = "type")]
    pub kind: String,
    pub verb: String,
    pub data: CardData,
}

/// What each of gatebot's buttons carries: the wait its card shows.
/// Another bot's data reads as empty (no wait, no gate).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default)]
pub struct CardData {
    pub wait_id: i64,
    pub gate: String,
    /// What the person typed in the card's reason field (Teams adds the
    /// card's inputs to the pressed button's data).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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
        let data = &activity.value.action.data;
        if activity.id.len() > MAX_ID
            || activity.conversation.id.len() > MAX_ID
            || data.gate.len() > MAX_ID
        {
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
