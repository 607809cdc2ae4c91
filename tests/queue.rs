//! The durable queues claim in batches and settle in batches: one transaction
//! each, in the order the jobs were queued, never the same job twice.

use gatebot::testing::store::{Claim, NewJob, QueueName, Store};
use gatebot_testkit::harness::{Backend, TestDb};

gatebot_testkit::on_both_stores!(
    jobs_are_claimed_in_batches_in_queue_order,
    a_batch_settles_only_what_its_owner_holds
);

fn job(topic: &str, not_before: i64) -> NewJob {
    NewJob {
        sink: "github".into(),
        topic: topic.into(),
        payload: "{}".into(),
        dedupe_key: None,
        once_key: None,
        not_before,
    }
}

async fn store(backend: Backend) -> (TestDb, Store) {
    let db = TestDb::new(backend).await;
    let store = Store::connect(&db.url).await.expect("store");
    (db, store)
}

async fn queue(store: &Store, jobs: &[NewJob], now: i64) {
    let mut tx = store.begin().await.unwrap();
    for j in jobs {
        assert!(gatebot::testing::store::Queues::enqueue(&mut tx, j, now)
            .await
            .unwrap());
    }
    tx.commit().await.unwrap();
}

async fn jobs_are_claimed_in_batches_in_queue_order(backend: Backend) {
    let (_db, store) = store(backend).await;
    // Queued in one millisecond: they go out in the order queued. One is due later.
    let jobs: Vec<NewJob> = ["eyes", "reply", "rocket", "status"]
        .iter()
        .map(|t| job(t, 0))
        .chain([job("later", 5_000)])
        .collect();
    queue(&store, &jobs, 1_000).await;
    let owner = store.replica().to_string();
    let first = store
        .queues()
        .claim_many(QueueName::Outbox, &owner, 1_000, 60_000, 3)
        .await
        .unwrap();
    let topics: Vec<&str> = first.iter().map(|i| i.topic.as_str()).collect();
    assert_eq!(
        topics,
        ["eyes", "reply", "rocket"],
        "a batch, in queue order"
    );
    let rest = store
        .queues()
        .claim_many(QueueName::Outbox, &owner, 1_000, 60_000, 10)
        .await
        .unwrap();
    let topics: Vec<&str> = rest.iter().map(|i| i.topic.as_str()).collect();
    assert_eq!(
        topics,
        ["status"],
        "claimed jobs are not claimed again; later ones wait"
    );
    let due = store
        .queues()
        .claim_many(QueueName::Outbox, &owner, 5_000, 60_000, 10)
        .await
        .unwrap();
    assert_eq!(due.len(), 1, "the later job once it is due");
}

async fn a_batch_settles_only_what_its_owner_holds(backend: Backend) {
    let (_db, store) = store(backend).await;
    queue(&store, &[job("a", 0), job("b", 0)], 1_000).await;
    let owner = store.replica().to_string();
    let claimed = store
        .queues()
        .claim_many(QueueName::Outbox, &owner, 1_000, 60_000, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let claim = |id, attempts| Claim {
        id,
        owner: &owner,
        attempts,
    };
    let items: Vec<(Claim<'_>, i64)> = claimed
        .iter()
        .map(|i| (claim(&i.id, i.attempts), 1_001))
        .chain([(claim("not-claimed", 1), 1_001)])
        .collect();
    let settled = store
        .queues()
        .finish_many(QueueName::Outbox, &items)
        .await
        .unwrap();
    assert_eq!(settled, [true, true, false]);
    // Settled items are not handed out again, even after their lease would have run out.
    let again = store
        .queues()
        .claim_many(QueueName::Outbox, &owner, 100_000, 60_000, 10)
        .await
        .unwrap();
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(store.queues().pending(QueueName::Outbox).await.unwrap(), 0);
}
