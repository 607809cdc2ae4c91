//! gatebot: ChatOps gates for Flagger canaries.
//!
//! [`Gatebot::start`] builds everything from a [`Config`]; [`app`] is the router
//! that `main` serves and that tests drive over real HTTP.
//!
//! Modules are layered; each uses only those in the groups above it
//! (docs/architecture.md draws it, tests/layering.rs checks it):
//! the domain (`gate`, `command`, `clock`); support (`cache`, `config`, `metrics`,
//! `outbound`, `templates`, `policy`, `store`, `telemetry`, `notify`, `http`);
//! the core (`core`); the channels (`flagger`, `api`, `github`, `slack`, `web`), which
//! never use each other; and `bootstrap`, which builds and composes them.

// The domain.
pub mod clock;
pub mod command;
pub mod gate;

// Support below the core.
pub mod cache;
pub mod config;
pub mod http;
pub mod kubernetes;
pub mod metrics;
pub mod notify;
pub mod outbound;
pub mod policy;
pub mod store;
pub mod telemetry;
pub mod templates;

pub mod core;

// Channels.
pub mod api;
pub mod flagger;
pub mod github;
pub mod slack;
pub mod web;

pub mod bootstrap;

// Entry points for the fuzz targets in fuzz/ only.
#[doc(hidden)]
pub mod fuzzing;

pub use crate::bootstrap::{app, Gatebot, Options};
pub use crate::config::Config;
pub use crate::core::AppState;
