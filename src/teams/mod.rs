//! Microsoft Teams: a Bot Framework bot.
//!
//! - `routes`: `POST /webhooks/teams`, the Bot Framework's token checked
//!   (`auth`, with the signing keys of `keys`), the activity stored.
//! - `inbox`: stored messages, applied as commands (`answers`: who may).
//! - `sink`: the answers, posted through the outbox (`client`: the Bot
//!   Connector and the bot's token).
//!
//! Off unless `GATEBOT_TEAMS_APP_ID` is set.

pub mod activity;
pub mod answers;
pub mod auth;
pub mod client;
pub mod inbox;
pub mod keys;
pub mod routes;
pub mod sink;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::core::AppState;
use crate::metrics::Metrics;
use crate::notify::{Handler, Sink};

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
        replies: state.config.teams.app_password().is_some(),
    };
    HashMap::from([("teams".to_string(), Arc::new(handler) as Arc<dyn Handler>)])
}

/// The `teams` sink, when the bot may post: an app id and its password.
pub fn sinks(config: &Config, clock: &SharedClock, metrics: &Metrics) -> Vec<Arc<dyn Sink>> {
    let teams = &config.teams;
    let (Some(app_id), Some(password)) = (teams.app_id(), teams.app_password()) else {
        return Vec::new();
    };
    let connector = client::Connector::new(
        &teams.login_url,
        app_id,
        password.clone(),
        teams.tenant().map(str::to_string),
        clock.clone(),
        metrics.outbound("teams"),
    );
    vec![Arc::new(sink::TeamsSink {
        connector: Arc::new(connector),
    })]
}
