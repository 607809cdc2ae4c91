//! Where the bot was added: `conversationUpdate` (the bot among the members
//! added or removed) and `installationUpdate` (`add`, `remove`) keep or drop
//! the conversation's reference, so that gatebot can post cards there
//! unprompted. Written before Teams is answered; idempotent, so a replay
//! changes nothing.

use super::activity::Activity;
use crate::core::AppState;
use crate::http::error::Reject;
use crate::store::TeamsConversation;

pub const CONVERSATION_UPDATE: &str = "conversationUpdate";
pub const INSTALLATION_UPDATE: &str = "installationUpdate";

/// Most conversations kept: far more than one organisation installs the
/// bot in; past it a new one is logged and not kept.
pub const MAX_CONVERSATIONS: i64 = 1000;

/// What an update means for the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Added,
    Removed,
    Other,
}

fn change(activity: &Activity) -> Change {
    let bot = activity.recipient.id.as_str();
    let is_bot = |members: &[super::activity::Account]| {
        !bot.is_empty() && members.iter().any(|m| m.id == bot)
    };
    match activity.kind.as_str() {
        INSTALLATION_UPDATE => match activity.action.as_str() {
            "add" | "add-upgrade" => Change::Added,
            "remove" | "remove-upgrade" => Change::Removed,
            _ => Change::Other,
        },
        CONVERSATION_UPDATE if is_bot(&activity.members_added) => Change::Added,
        CONVERSATION_UPDATE if is_bot(&activity.members_removed) => Change::Removed,
        _ => Change::Other,
    }
}

/// Keeps or drops the activity's conversation, as the update says.
pub async fn update(state: &AppState, activity: &Activity) -> Result<(), Reject> {
    let id = activity.conversation.id.as_str();
    if id.is_empty() {
        return Err(Reject::bad_request(
            "malformed_activity",
            "the activity names no conversation",
        ));
    }
    let records = &state.records;
    match change(activity) {
        Change::Other => Ok(()),
        Change::Removed => {
            tracing::info!(conversation = %id, "the bot was removed from a Teams conversation");
            records
                .forget_teams_conversation(id)
                .await
                .map_err(|e| Reject::unavailable(e.to_string()))
        }
        Change::Added => {
            let reference = reference(activity);
            let kept = records
                .remember_teams_conversation(&reference, state.clock.now_ms(), MAX_CONVERSATIONS)
                .await
                .map_err(|e| Reject::unavailable(e.to_string()))?;
            if kept {
                tracing::info!(conversation = %id, name = %reference.name, kind = %reference.kind,
                    "the bot was added to a Teams conversation: GATEBOT_TEAMS_CHANNEL may name it");
            } else {
                tracing::warn!(conversation = %id, "not kept: gatebot knows {MAX_CONVERSATIONS} Teams conversations already");
            }
            Ok(())
        }
    }
}

fn reference(activity: &Activity) -> TeamsConversation {
    let team = activity.channel_data.team.as_ref().map(|t| t.name.clone());
    let name = activity
        .conversation
        .name
        .clone()
        .or(team)
        .unwrap_or_default();
    TeamsConversation {
        conversation_id: activity.conversation.id.clone(),
        service_url: activity.service_url.clone(),
        tenant_id: activity.tenant().unwrap_or_default().to_string(),
        kind: activity
            .conversation
            .conversation_type
            .clone()
            .unwrap_or_else(|| "channel".into()),
        name: name.chars().take(200).collect(),
    }
}
