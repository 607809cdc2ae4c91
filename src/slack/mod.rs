//! Slack: waiting messages with buttons, clicks and the slash command.
//!
//! - `routes`: verify, store, answer within 3 s.
//! - `inbox`: apply stored clicks and commands.
//! - `sink`: every Slack write, through the outbox.

pub mod approvers;
pub mod blocks;
pub mod client;
mod digest;
pub mod inbox;
pub mod payload;
pub mod record;
pub mod routes;
pub mod sink;
pub mod verify;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use secrecy::ExposeSecret;

use crate::clock::SharedClock;
use crate::metrics::Metrics;
use crate::notify::burst::Burst;
use crate::notify::{Handler, Sink};
use crate::store::Store;
use crate::templates::Templates;
use crate::{AppState, Config};

/// Built-in message templates: (name under templates/, source).
pub const TEMPLATES: &[(&str, &str)] = &[
    (
        "slack/wait.j2",
        include_str!("../../templates/slack/wait.j2"),
    ),
    (
        "slack/status.j2",
        include_str!("../../templates/slack/status.j2"),
    ),
    (
        "slack/event.j2",
        include_str!("../../templates/slack/event.j2"),
    ),
    (
        "slack/reply.j2",
        include_str!("../../templates/slack/reply.j2"),
    ),
    (
        "slack/help.j2",
        include_str!("../../templates/slack/help.j2"),
    ),
    (
        "slack/status_reply.j2",
        include_str!("../../templates/slack/status_reply.j2"),
    ),
    (
        "slack/digest.j2",
        include_str!("../../templates/slack/digest.j2"),
    ),
];

pub fn routes() -> Router<AppState> {
    routes::routes()
}

/// The bot token when Slack is configured (both secrets set).
fn bot_token(config: &Config) -> Option<&str> {
    let slack = &config.slack;
    slack.signing_secret.as_ref()?;
    slack
        .bot_token
        .as_ref()
        .map(|t| t.expose_secret())
        .filter(|t| !t.is_empty())
}

fn api(config: &Config) -> anyhow::Result<Option<Arc<client::SlackApi>>> {
    match bot_token(config) {
        Some(token) => Ok(Some(Arc::new(client::SlackApi::new(
            &config.slack.api_url,
            token,
        )?))),
        None => Ok(None),
    }
}

pub fn sinks(
    config: &Config,
    store: &Store,
    templates: &Templates,
    clock: &SharedClock,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Vec<Arc<dyn Sink>>> {
    let Some(api) = api(config)? else {
        return Ok(Vec::new());
    };
    Ok(vec![Arc::new(sink::SlackSink {
        api,
        store: store.clone(),
        templates: templates.clone(),
        clock: clock.clone(),
        channel: config
            .slack
            .channel
            .clone()
            .filter(|c| !c.trim().is_empty()),
        default_repo: config.github.repository.clone(),
        burst: Burst::new(config.notify_burst),
        metrics: metrics.clone(),
    })])
}

pub fn inbox_handlers(state: &AppState) -> anyhow::Result<HashMap<String, Arc<dyn Handler>>> {
    let Some(api) = api(&state.config)? else {
        return Ok(HashMap::new());
    };
    let handler = inbox::SlackInbox {
        state: state.clone(),
        approvers: Arc::new(approvers::Approvers::new(api)),
        authors: crate::github::authors::PrAuthors {
            store: state.store.clone(),
            client: crate::github::client::GithubClient::from_config(&state.config.github)?
                .map(Arc::new),
        },
    };
    Ok(HashMap::from([(
        "slack".to_string(),
        Arc::new(handler) as Arc<dyn Handler>,
    )]))
}
