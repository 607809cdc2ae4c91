//! Microsoft Teams: a Bot Framework bot.
//!
//! - `routes`: `POST /webhooks/teams`, the Bot Framework's token checked
//!   (`auth`, with the signing keys of `keys`), the activity stored.
//! - `inbox`: stored messages, applied as commands (`answers`: who may).
//!
//! Off unless `GATEBOT_TEAMS_APP_ID` is set.

pub mod activity;
pub mod answers;
pub mod auth;
pub mod inbox;
pub mod keys;
pub mod routes;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;

use crate::core::AppState;
use crate::notify::Handler;

/// Activities are a few KB; an Adaptive Card's action carries its card's data.
pub const BODY_LIMIT: usize = 256 * 1024;

pub fn routes(state: &AppState) -> Router<AppState> {
    routes::routes(state)
}

pub fn inbox_handlers(state: &AppState) -> HashMap<String, Arc<dyn Handler>> {
    if state.config.teams.app_id().is_none() {
        return HashMap::new();
    }
    let handler = inbox::TeamsInbox {
        state: state.clone(),
    };
    HashMap::from([("teams".to_string(), Arc::new(handler) as Arc<dyn Handler>)])
}
