//! gatebot: ChatOps gates for Flagger canaries.
//!
//! [`Gatebot::start`] builds everything from a [`Config`]; [`app`] is the router
//! it serves and that tests drive over real HTTP; [`main`] is the `gatebot`
//! command. Everything else is the crate's own.
//!
//! Modules are layered; each uses only those in the groups above it
//! (docs/architecture.md draws it, tests/layering.rs checks it):
//! the domain (`gate`, `command`, `clock`); support (`cache`, `config`, `metrics`,
//! `outbound`, `templates`, `policy`, `store`, `telemetry`, `notify`, `http`);
//! the core (`core`); the channels (`flagger`, `api`, `github`, `slack`, `web`), which
//! never use each other; and `bootstrap`, which builds and composes them.

// The domain.
pub(crate) mod clock;
pub(crate) mod command;
pub(crate) mod gate;

// Support below the core.
pub(crate) mod cache;
pub(crate) mod change;
pub(crate) mod config;
pub(crate) mod evidence;
pub(crate) mod http;
pub(crate) mod kubernetes;
pub(crate) mod metrics;
pub(crate) mod notify;
pub(crate) mod outbound;
pub(crate) mod policy;
pub(crate) mod store;
pub(crate) mod telemetry;
pub(crate) mod templates;

pub(crate) mod core;

// Channels.
pub(crate) mod api;
pub(crate) mod flagger;
pub(crate) mod github;
pub(crate) mod slack;
pub(crate) mod teams;
pub(crate) mod web;

pub(crate) mod bootstrap;

// Entry points for the fuzz targets in fuzz/ only.
#[doc(hidden)]
pub mod fuzzing;
// What the tests and benches reach inside for.
#[doc(hidden)]
pub mod testing;

pub use crate::bootstrap::{app, main, Gatebot, Options};
pub use crate::config::Config;
pub use crate::core::AppState;
