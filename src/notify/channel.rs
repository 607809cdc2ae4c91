//! One channel's outbox ([`Channel`]): how a notice becomes its messages and
//! how one is sent. Everything else about a job is the same for every
//! channel and lives here and in the worker: reading it back from the store,
//! its lane, the lease it is sent under, retries, fencing and settling.

use std::sync::Arc;

use super::{BoxFuture, Handler, Lease, Notice, PayloadError, SendError, Settled, Sink};
use crate::store::{NewJob, QueueItem};

/// A channel's side of the outbox.
pub trait Channel: Send + Sync + 'static {
    /// Its jobs.
    type Job: Send;

    /// The sink's name, the outbox's `sink` column.
    const NAME: &'static str;

    /// The jobs `notice` means here (none when it is not for this channel).
    fn plan(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError>;

    /// Jobs of one lane go out one at a time, in the order queued; None: a
    /// job that waits for no other.
    fn lane(&self, job: &Self::Job) -> Option<String>;

    /// Sends `job` (stored as `item`). A job whose earlier attempt may have
    /// reached the other side finds what it did first; one that calls out
    /// more than once renews `lease` before each call.
    fn send<'a>(
        &'a self,
        job: Self::Job,
        item: &'a QueueItem,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<(), SendError>>;

    /// `item`'s job, read back from its payload (most are [`super::decode_job`]).
    fn decode(item: &QueueItem) -> Result<Self::Job, SendError>;
}

/// A channel as the notifier plans with it and the worker runs it.
pub struct Outbox<C>(pub Arc<C>);

impl<C: Channel> Outbox<C> {
    /// The sink of `channel`, for the notifier and the outbox's worker.
    pub fn sink(channel: C) -> Arc<dyn Sink> {
        Arc::new(Self(Arc::new(channel)))
    }
}

impl<C: Channel> Handler for Outbox<C> {
    fn lane(&self, item: &QueueItem) -> Option<String> {
        self.0.lane(&C::decode(item).ok()?)
    }

    fn handle<'a>(
        &'a self,
        item: &'a QueueItem,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Settled, SendError>> {
        Box::pin(async move {
            self.0.send(C::decode(item)?, item, lease).await?;
            Ok(Settled::NotYet)
        })
    }
}

impl<C: Channel> Sink for Outbox<C> {
    fn name(&self) -> &'static str {
        C::NAME
    }

    fn plan(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
        self.0.plan(notice)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A channel whose jobs are a person's name, sent in the lane of its
    /// first letter.
    #[derive(Default)]
    struct Names(Mutex<Vec<String>>);

    impl Channel for Names {
        type Job = String;
        const NAME: &'static str = "names";

        fn plan(&self, _notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
            Ok(Vec::new())
        }

        fn lane(&self, job: &String) -> Option<String> {
            job.get(..1).map(str::to_string)
        }

        fn send<'a>(
            &'a self,
            job: String,
            _item: &'a QueueItem,
            _lease: &'a Lease,
        ) -> BoxFuture<'a, Result<(), SendError>> {
            self.0.lock().unwrap().push(job);
            Box::pin(async { Ok(()) })
        }

        fn decode(item: &QueueItem) -> Result<String, SendError> {
            super::super::decode_job(Self::NAME, item)
        }
    }

    fn item(payload: &str) -> QueueItem {
        QueueItem {
            id: "1".into(),
            route: "names".into(),
            topic: "name".into(),
            payload: payload.into(),
            attempts: 1,
            created_at: 0,
            last_error: None,
        }
    }

    /// The adapter reads a job back for its lane; a job that does not read
    /// back is in no lane (the worker then gives it up when it runs it).
    #[test]
    fn the_adapter_names_the_channel_and_its_lanes() {
        let outbox = Outbox(Arc::new(Names::default()));
        assert_eq!(outbox.name(), "names");
        assert_eq!(outbox.lane(&item(r#""alice""#)).as_deref(), Some("a"));
        assert_eq!(outbox.lane(&item("not json")), None);
        assert!(matches!(
            Names::decode(&item("not json")),
            Err(SendError::Permanent(_))
        ));
    }
}
