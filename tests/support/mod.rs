//! Shared test support: the Flagger simulator, fake GitHub and Slack APIs, and a
//! harness that runs gatebot over real HTTP on a real SQLite file or PostgreSQL database.

pub mod fake_github;
pub mod fake_slack;
pub mod flagger;
pub mod github_payloads;
pub mod harness;
pub mod raw;
pub mod served;
