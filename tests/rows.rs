//! Stored rows decode into typed keys, canaries, actions and delivery ids: the
//! JSON the API shows is the text it always was, and a row whose key does not
//! parse is reported as corrupt, never skipped. Phases and answers are typed
//! too: a phase gatebot does not know is kept, an answer or a canary that does
//! not read is corrupt.

use gatebot::testing::gate::{
    Actor, Answer, AuditAction, CanaryRef, DeliveryId, GateKey, Phase, Source,
};
use gatebot::testing::store::{AuditEntry, Store, StoreError};
use gatebot_testkit::harness::{Backend, TestDb};
use serde_json::json;
use sqlx::AnyPool;

gatebot_testkit::on_both_stores!(
    audit_entries_show_as_text,
    a_bad_stored_key_is_corrupt_not_skipped,
    phases_and_answers_decode_typed,
);

const GATE: &str = "/gates/promote/acme/shop/pr/42";

async fn store(backend: Backend) -> (TestDb, Store) {
    let db = TestDb::new(backend).await;
    let store = Store::connect(&db.url).await.expect("store");
    (db, store)
}

async fn audit_entries_show_as_text(backend: Backend) {
    let (_db, store) = store(backend).await;
    let key = GateKey::parse(GATE, None).unwrap();
    let entry = AuditEntry {
        at: 1_000,
        gate: key.clone(),
        action: AuditAction::Pin,
        actor: Actor::new("alice", Source::Slack),
        reason: Some("approval used by test/podinfo".into()),
        revision: Some("rev-a".into()),
        canary: Some(CanaryRef::new("test", "podinfo").unwrap()),
        delivery: Some(DeliveryId::slack_click("T1")),
    };
    let mut tx = store.begin().await.unwrap();
    gatebot::testing::store::History::audit(&mut tx, &entry)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let log = store.history().audit_log(Some(&key), 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].gate, key);
    assert_eq!(log[0].action, AuditAction::Pin);
    assert_eq!(
        serde_json::to_value(&log[0]).unwrap(),
        json!({
            "at": 1_000,
            "gate": GATE,
            "action": "pin",
            "actor": {"name": "alice", "source": "slack"},
            "reason": "approval used by test/podinfo",
            "revision": "rev-a",
            "canary": "test/podinfo",
            "delivery": "slack:T1",
        })
    );
}

async fn a_bad_stored_key_is_corrupt_not_skipped(backend: Backend) {
    let (db, store) = store(backend).await;
    sqlx::any::install_default_drivers();
    let pool = AnyPool::connect(&db.url).await.unwrap();
    // Rows gatebot never writes: a key that is not a gate, an unknown action.
    for (gate, action) in [("promote/pr/acme/shop#42", "open"), (GATE, "reopen")] {
        sqlx::query(
            "INSERT INTO audit (at, gate_key, action, actor, source) VALUES (1, $1, $2, 'x', 'api')",
        )
        .bind(gate)
        .bind(action)
        .execute(&pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO observations (gate_key, canary, checksum, phase, answer, reason, metadata, first_seen, last_seen) \
         VALUES ('not-a-gate', 'test/podinfo', 'c', 'Progressing', 'closed', 'r', '{}', 1, 1)",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    let audit = store.history().audit_log(None, 10).await;
    assert!(
        matches!(audit, Err(StoreError::Corrupt(_))),
        "the audit log says it is unreadable: {audit:?}"
    );
    let observations = store.observations().load_observations().await;
    assert!(
        matches!(observations, Err(StoreError::Corrupt(ref e)) if e.contains("not-a-gate")),
        "observations say which key: {observations:?}"
    );
    let canary = CanaryRef::new("test", "podinfo").unwrap();
    assert!(matches!(
        store.gates().gates_of_canary(&canary).await,
        Err(StoreError::Corrupt(_))
    ));
}

/// Writes one observation at `GATE` as gatebot never would, in place of any other.
async fn observed(pool: &AnyPool, canary: &str, phase: &str, answer: &str) {
    sqlx::query("DELETE FROM observations")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO observations (gate_key, canary, checksum, phase, answer, reason, metadata, first_seen, last_seen) \
         VALUES ($1, $2, 'c1', $3, $4, 'r', '{}', 1, 2)",
    )
    .bind(GATE)
    .bind(canary)
    .bind(phase)
    .bind(answer)
    .execute(pool)
    .await
    .unwrap();
}

async fn phases_and_answers_decode_typed(backend: Backend) {
    let (db, store) = store(backend).await;
    sqlx::any::install_default_drivers();
    let pool = AnyPool::connect(&db.url).await.unwrap();

    // A phase Flagger may add one day is kept as it was sent.
    observed(&pool, "test/podinfo", "Paused", "open").await;
    let rows = store.observations().load_observations().await.unwrap();
    assert_eq!(rows[0].phase, Phase::Other("Paused".into()));
    assert_eq!(rows[0].answer, Answer::Open);
    assert_eq!(rows[0].canary, CanaryRef::new("test", "podinfo").unwrap());
    let json = serde_json::to_value(&rows[0]).unwrap();
    assert_eq!(
        (&json["canary"], &json["phase"], &json["answer"]),
        (&json!("test/podinfo"), &json!("Paused"), &json!("open"))
    );

    // An answer or a canary that does not read is corrupt, whichever read meets it.
    for (canary, answer, says) in [
        ("test/podinfo", "maybe", "maybe"),
        ("no-namespace", "closed", "no-namespace"),
    ] {
        observed(&pool, canary, "Progressing", answer).await;
        let all = store.observations().load_observations().await;
        assert!(
            matches!(all, Err(StoreError::Corrupt(ref e)) if e.contains(says)),
            "{says}: {all:?}"
        );
        let key = GateKey::parse(GATE, None).unwrap();
        let one = store.observations().observations_for(&key).await;
        assert!(
            matches!(one, Err(StoreError::Corrupt(_))),
            "{says}: {one:?}"
        );
        let page = store.pages().canaries_between(GATE, GATE).await;
        assert!(
            matches!(page, Err(StoreError::Corrupt(_))),
            "{says}: {page:?}"
        );
        let mut loaded = 0;
        let at_start = store.loading().each_observation(|_, _| loaded += 1).await;
        assert!(
            matches!(at_start, Err(StoreError::Corrupt(_))) && loaded == 0,
            "{says}: {at_start:?}"
        );
    }
    pool.close().await;
}
