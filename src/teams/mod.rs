//! Microsoft Teams: a Bot Framework bot.
//!
//! - `routes`: `POST /webhooks/teams`, the Bot Framework's token checked
//!   (`auth`, with the signing keys of `keys`), the activity stored.
//! - `inbox`: stored messages, applied as commands (`answers`: who may).
//! - `conversations`: where the bot was added, kept to post there later.
//! - `invoke`: a click on a card's button, stored, applied, answered with
//!   the card.
//! - `sink`: the answers and the cards (`card`), posted and updated
//!   through the outbox (`client`: the Bot Connector and the bot's token,
//!   and the Workflows webhook).
//!
//! Off unless `GATEBOT_TEAMS_APP_ID` (or `GATEBOT_TEAMS_WORKFLOW_URL`) is set.

pub mod activity;
pub mod answers;
pub mod auth;
pub mod card;
pub mod client;
pub mod conversations;
pub mod inbox;
pub mod invoke;
pub mod keys;
pub mod receipt;
pub mod routes;
pub mod sink;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;

use crate::config::Config;
use crate::core::authors::{AuthorLookup, PrAuthors};
use crate::core::intake::Inbox;
use crate::core::AppState;
use crate::notify::{Handler, Outbox, Sink};

/// Activities are a few KB; an Adaptive Card's action carries its card's data.
pub const BODY_LIMIT: usize = 256 * 1024;

pub fn routes(state: &AppState, body: crate::http::limits::BodyLimit) -> Router<AppState> {
    routes::routes(state, body)
}

/// `authors` answers four eyes for PRs gatebot has seen no delivery of.
pub fn inbox_handlers(
    state: &AppState,
    authors: Option<Arc<dyn AuthorLookup>>,
) -> HashMap<String, Arc<dyn Handler>> {
    if state.config.teams.app_id().is_none() {
        return HashMap::new();
    }
    let handler = inbox::TeamsInbox {
        state: state.clone(),
        authors: PrAuthors::new(state.records.clone(), authors),
        replies: state.config.teams.app_password().is_some(),
    };
    HashMap::from([("teams".to_string(), Inbox::handler(handler))])
}

/// The `teams` sink, when the bot may post (an app id and its password) or
/// a Workflows webhook is set.
pub fn sinks(
    base: &crate::core::SinkBase<'_>,
    policy: &crate::policy::Policy,
    evidence: &Arc<crate::evidence::Evidence>,
) -> Vec<Arc<dyn Sink>> {
    let crate::core::SinkBase {
        config,
        records,
        clock,
        metrics,
        ..
    } = *base;
    let teams = &config.teams;
    let connector = match (teams.app_id(), teams.app_password()) {
        (Some(app_id), Some(password)) => Some(Arc::new(client::Connector::new(
            &teams.login_url,
            app_id,
            password.clone(),
            teams.tenant().map(str::to_string),
            clock.clone(),
            metrics.outbound("teams"),
        ))),
        _ => None,
    };
    let workflow = teams
        .workflow_url()
        .map(|url| client::Workflow::new(url.clone(), metrics.outbound("teams")));
    if connector.is_none() && workflow.is_none() {
        return Vec::new();
    }
    let links = links(config);
    vec![Outbox::sink(sink::TeamsSink {
        connector,
        workflow,
        records: records.clone(),
        clock: clock.clone(),
        channel: teams.channel().map(str::to_string),
        bound: policy.teams_channels().clone(),
        metrics: metrics.clone(),
        links,
        evidence: evidence.clone(),
    })]
}

/// Where cards link: the gate's page under GATEBOT_PUBLIC_URL, the PR on GitHub.
pub fn links(config: &Config) -> card::Links {
    card::Links {
        public_url: config
            .public_url
            .as_deref()
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty()),
        default_repo: config.github.repository.clone(),
    }
}
