//! The domain: gate keys, state and decisions. Knows no HTTP and no database.

pub mod audit;
pub mod change;
pub mod cluster;
pub mod deadline;
pub mod environment;
pub mod event;
pub mod freeze;
pub mod interval;
pub mod key;
mod label;
pub mod named;
pub mod phase;
pub mod progress;
pub mod quorum;
pub mod reason;
pub mod reminder;
pub mod state;
pub mod ticket;
pub mod timers;
pub mod tokens;
pub mod window;

pub use audit::{AuditAction, DeliveryId};
pub use change::{millis, Actor, Approval, Change, Check, Millis, Source};
pub use cluster::{ClusterName, FlaggerTokens};
pub use key::{
    is_login, CanaryRef, GateKey, GateKind, GateName, KeyError, Namespace, PrNumber, RepoName,
    Scope,
};
pub use phase::Phase;
pub use quorum::{Group, GroupKind, Include, QuorumRule, Tally, Vote};
pub use state::{decide, wait_step, Answer, Channels, Gate, GateStatus, Seen, Verdict, WaitStep};
