//! Slack: waiting messages with buttons, clicks and the slash command.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;

use crate::clock::SharedClock;
use crate::notify::{Handler, Sink};
use crate::store::Store;
use crate::templates::Templates;
use crate::{AppState, Config};

/// Built-in message templates: (name under templates/, source).
pub const TEMPLATES: &[(&str, &str)] = &[];

pub fn routes() -> Router<AppState> {
    Router::new()
}

pub fn sinks(
    _config: &Config,
    _store: &Store,
    _templates: &Templates,
    _clock: &SharedClock,
) -> anyhow::Result<Vec<Arc<dyn Sink>>> {
    Ok(Vec::new())
}

pub fn inbox_handlers(_state: &AppState) -> anyhow::Result<HashMap<String, Arc<dyn Handler>>> {
    Ok(HashMap::new())
}
