//! HTTP plumbing shared by every channel: rejections, receipts, body limits,
//! the server's own accept loop, panic and timeout guards, bearer tokens.
//! Knows no channel.

pub mod access;
pub mod auth;
pub mod error;
pub mod guard;
pub mod limits;
pub mod receipts;
pub mod server;
pub mod signature;

// Body limits per route, enforced by `limits::bounded` before any handler runs.
// A body over its limit gets 413, one that is not whole within
// [limits] body_read_timeout gets 408.

/// Flagger's bodies are a few hundred bytes.
pub const FLAGGER_BODY_LIMIT: usize = 64 * 1024;
/// GitHub allows up to 25 MB, but the events gatebot subscribes to (comments,
/// pull request pushes and closes) are a few KB; 1 MB leaves room for very
/// long comments.
pub const GITHUB_BODY_LIMIT: usize = 1024 * 1024;
/// Slack's interaction payloads carry whole messages, still well under this.
pub const SLACK_BODY_LIMIT: usize = 1024 * 1024;
/// The operator API takes small JSON objects.
pub const API_BODY_LIMIT: usize = 64 * 1024;
