//! Slack: waiting messages with buttons, clicks and the slash command.
//!
//! - `routes`: verify, store, answer within 3 s.
//! - `inbox`: apply stored clicks and commands.
//! - `sink`: every Slack write, through the outbox.

pub mod accept;
pub mod answers;
pub mod approvers;
pub mod blocks;
pub mod client;
mod digest;
pub mod inbox;
pub mod payload;
pub mod record;
pub mod routes;
pub mod sink;
pub mod socket;
pub mod verify;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use secrecy::ExposeSecret;

use crate::config::Config;
use crate::core::authors::{AuthorLookup, PrAuthors};
use crate::core::intake::Inbox;
use crate::core::AppState;
use crate::metrics::Metrics;
use crate::notify::burst::Burst;
use crate::notify::{Handler, Outbox, Sink};

pub fn routes() -> Router<AppState> {
    routes::routes()
}

/// The bot token when Slack is configured: the bot token, and a signing
/// secret or an app token for what Slack sends.
fn bot_token(config: &Config) -> Option<&str> {
    let slack = &config.slack;
    if !slack.inbound() {
        return None;
    }
    slack
        .bot_token
        .as_ref()
        .map(|t| t.expose_secret())
        .filter(|t| !t.is_empty())
}

fn api(config: &Config, metrics: &Metrics) -> anyhow::Result<Option<Arc<client::SlackApi>>> {
    match bot_token(config) {
        Some(token) => Ok(Some(Arc::new(client::SlackApi::new(
            &config.slack.api_url,
            token,
            metrics.outbound("slack"),
        )?))),
        None => Ok(None),
    }
}

/// Who is in Slack's user groups, for quorum rules that name one; None
/// without a bot token.
pub fn group_members(
    config: &Config,
    metrics: &Metrics,
) -> anyhow::Result<Option<Arc<approvers::Approvers>>> {
    Ok(api(config, metrics)?.map(|api| Arc::new(approvers::Approvers::new(api))))
}

pub fn sinks(
    base: &crate::core::SinkBase<'_>,
    policy: &crate::policy::Policy,
    evidence: &Arc<crate::evidence::Evidence>,
) -> anyhow::Result<Vec<Arc<dyn Sink>>> {
    let crate::core::SinkBase {
        config,
        records,
        templates,
        clock,
        metrics,
    } = *base;
    let Some(api) = api(config, metrics)? else {
        return Ok(Vec::new());
    };
    Ok(vec![Outbox::sink(sink::SlackSink {
        api,
        records: records.clone(),
        templates: templates.clone(),
        clock: clock.clone(),
        channel: config
            .slack
            .channel
            .clone()
            .filter(|c| !c.trim().is_empty()),
        bound: policy.slack_channels().clone(),
        default_repo: config.github.repository.clone(),
        burst: Burst::new(config.limits.notify_burst),
        metrics: metrics.clone(),
        evidence: evidence.clone(),
    })])
}

/// `authors` answers four eyes for PRs gatebot has seen no delivery of.
pub fn inbox_handlers(
    state: &AppState,
    authors: Option<Arc<dyn AuthorLookup>>,
) -> anyhow::Result<HashMap<String, Arc<dyn Handler>>> {
    let Some(api) = api(&state.config, &state.metrics)? else {
        return Ok(HashMap::new());
    };
    let handler = inbox::SlackInbox {
        state: state.clone(),
        api: api.clone(),
        approvers: Arc::new(approvers::Approvers::new(api)),
        authors: PrAuthors::new(state.records.clone(), authors),
    };
    Ok(HashMap::from([(
        "slack".to_string(),
        Inbox::handler(handler),
    )]))
}

/// The Socket Mode channel, when `GATEBOT_SLACK_APP_TOKEN` (and the bot token) are set.
pub fn socket_mode(
    state: &AppState,
    receipts: crate::http::receipts::Receipts,
    readers: Arc<tokio::sync::Semaphore>,
) -> anyhow::Result<Option<Arc<socket::SocketMode>>> {
    let Some(token) = state.config.slack.socket_mode_token() else {
        return Ok(None);
    };
    let Some(api) = api(&state.config, &state.metrics)? else {
        return Ok(None);
    };
    Ok(Some(Arc::new(socket::SocketMode::new(
        state.clone(),
        receipts,
        readers,
        api,
        token.to_string().into(),
    ))))
}
