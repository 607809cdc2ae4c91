//! Shared test support for gatebot's tests and benches: the Flagger simulator,
//! fake GitHub and Slack APIs, and a harness that runs gatebot over real HTTP on
//! a real SQLite file or PostgreSQL database.
//!
//! A workspace member (`testkit/`) and a dev-dependency of gatebot, so that
//! `tests/*.rs` and `benches/*.rs` use it as `gatebot_testkit::…`.

use std::path::Path;

pub mod chatops;
pub mod cluster;
pub mod fake_github;
pub mod fake_jira;
pub mod fake_kube;
pub mod fake_prometheus;
pub mod fake_servicenow;
pub mod fake_slack;
pub mod fake_socket_mode;
pub mod fake_teams;
pub mod flagger;
pub mod github_payloads;
pub mod harness;
pub mod proxy;
pub mod raw;
pub mod row_lock;
pub mod served;
pub mod tls;

/// The repository's root, where `tests/fixtures/` lives: this crate is the
/// workspace member `testkit/` directly inside it.
pub fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ is a directory of the repository")
}
