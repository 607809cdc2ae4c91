//! What the tests, benches and fuzz targets reach inside the server for: they
//! sign payloads as GitHub and Slack do, read rows where a channel wrote them
//! and drive the outbox with a clock of their own. None of it is the server's
//! interface, which is [`crate::Gatebot`], [`crate::app`] and [`crate::Config`].

pub mod api {
    pub use crate::api::health;
}

pub mod bootstrap {
    pub use crate::bootstrap::harden;
}

pub mod clock {
    pub use crate::clock::{Clock, ManualClock, SharedClock};
}

pub mod config {
    pub use crate::config::{ApiTokens, Permission, UiMode};
}

pub mod core {
    pub use crate::core::{authors, Records, STORE_BUSY};
}

pub mod gate {
    pub use crate::gate::{
        window, Actor, Answer, AuditAction, CanaryRef, DeliveryId, FlaggerTokens, GateKey,
        GateKind, Phase, PrNumber, RepoName, Source,
    };
}

pub mod github {
    pub use crate::github::{pushes, verify};
}

pub mod http {
    pub use crate::http::{limits, server};
}

pub mod notify {
    pub use crate::notify::{
        encode_job, BoxFuture, Drain, Handler, Lease, Notice, PayloadError, SendError, Settled,
        Sink, WorkerSettings,
    };
}

pub mod policy {
    pub use crate::policy::Policy;
}

pub mod slack {
    pub use crate::slack::{record, verify};
}

pub mod store {
    pub use crate::store::{
        AuditEntry, Claim, History, NewJob, Prs, QueueItem, QueueName, Queues, SlackRows,
        StatusComment, Store, StoreError, TeamsConversation, DEAD_AFTER, LISTENER_APPLICATION_NAME,
    };
}

pub mod telemetry {
    pub use crate::telemetry::init;
}
