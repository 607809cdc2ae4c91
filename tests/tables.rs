//! The typed tables that replaced the key/value table `kv`, on both stores:
//! each round trip, a push time that only moves forward, a Slack decision
//! withdrawn, and an upgrade that carries old `kv` rows over.

use std::collections::BTreeMap;
use std::path::Path;

use gatebot::testing::core::Records;
use gatebot::testing::gate::{GateKey, PrNumber, RepoName};
use gatebot::testing::github::pushes;
use gatebot::testing::slack::record::{self, Decision, Ended, Final, Posted, WaitInfo};
use gatebot::testing::store::{StatusComment, Store, TeamsConversation};
use gatebot_testkit::harness::{Backend, TestDb};
use serde_json::json;
use sqlx::{AnyPool, Row};

gatebot_testkit::on_both_stores!(
    pr_authors_round_trip,
    pr_push_times_only_move_forward,
    status_comments_round_trip,
    one_replica_at_a_time_creates_a_status_comment,
    slack_facts_round_trip,
    a_slack_decision_goes_with_its_transaction,
    kv_rows_survive_the_upgrade,
    teams_conversations_are_bounded,
);

/// One row per conversation, at most `cap` of them: a new one past the cap
/// is not kept, one known already is updated, and a removal makes room.
async fn teams_conversations_are_bounded(backend: Backend) {
    let (_db, store) = store(backend).await;
    let conversation = |id: &str, url: &str| TeamsConversation {
        conversation_id: id.into(),
        service_url: url.into(),
        tenant_id: "t".into(),
        kind: "channel".into(),
        name: format!("{id} channel"),
    };
    let old = "https://smba.trafficmanager.net/amer/";
    let new = "https://smba.trafficmanager.net/emea/";
    assert!(store
        .teams()
        .remember_teams_conversation(&conversation("19:a", old), 1, 2)
        .await
        .unwrap());
    assert!(store
        .teams()
        .remember_teams_conversation(&conversation("19:b", old), 2, 2)
        .await
        .unwrap());
    assert!(!store
        .teams()
        .remember_teams_conversation(&conversation("19:c", old), 3, 2)
        .await
        .unwrap());
    assert!(store
        .teams()
        .remember_teams_conversation(&conversation("19:a", new), 4, 2)
        .await
        .unwrap());
    let a = store
        .teams()
        .teams_conversation("19:a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        a.service_url, new,
        "a known conversation's reference is updated"
    );
    assert_eq!(
        store.teams().teams_conversations(10).await.unwrap().len(),
        2
    );
    store
        .teams()
        .forget_teams_conversation("19:a")
        .await
        .unwrap();
    assert!(store
        .teams()
        .remember_teams_conversation(&conversation("19:c", old), 5, 2)
        .await
        .unwrap());
    let ids: Vec<String> = store
        .teams()
        .teams_conversations(10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.conversation_id)
        .collect();
    assert_eq!(ids, ["19:b", "19:c"]);
}

async fn store(backend: Backend) -> (TestDb, Store) {
    let db = TestDb::new(backend).await;
    let store = Store::connect(&db.url).await.expect("store");
    (db, store)
}

fn repo() -> RepoName {
    "acme/shop".parse().unwrap()
}

fn info(wait_id: i64, gate: &str, canary: &str) -> WaitInfo {
    WaitInfo {
        wait_id,
        gate: GateKey::parse(gate, None).expect("a gate key"),
        canary: Some(canary.parse().expect("a canary")),
        checksum: format!("rev-{wait_id}"),
        phase: "Progressing".into(),
        metadata: BTreeMap::from([("pr".to_string(), "42".to_string())]),
        since: 1_000 + wait_id,
    }
}

async fn pr_authors_round_trip(backend: Backend) {
    let (_db, store) = store(backend).await;
    let records = Records::new(store.clone());
    let repo = repo();
    assert_eq!(
        store.prs().pr_author(&repo, PrNumber(42)).await.unwrap(),
        None
    );
    gatebot::testing::core::authors::remember(&records, &repo, PrNumber(42), "alice", 10)
        .await
        .unwrap();
    gatebot::testing::core::authors::remember(&records, &repo, PrNumber(42), "alice", 20)
        .await
        .unwrap();
    assert_eq!(
        store
            .prs()
            .pr_author(&repo, PrNumber(42))
            .await
            .unwrap()
            .as_deref(),
        Some("alice")
    );
    assert_eq!(
        store.prs().pr_author(&repo, PrNumber(43)).await.unwrap(),
        None
    );
    let other: RepoName = "acme/other".parse().unwrap();
    assert_eq!(
        store.prs().pr_author(&other, PrNumber(42)).await.unwrap(),
        None
    );
}

async fn pr_push_times_only_move_forward(backend: Backend) {
    let (_db, store) = store(backend).await;
    let records = Records::new(store.clone());
    let repo = repo();
    let n = PrNumber(7);
    assert_eq!(pushes::last(&records, &repo, n).await.unwrap(), None);
    pushes::remember(&records, &repo, n, 5_000, 1)
        .await
        .unwrap();
    pushes::remember(&records, &repo, n, 3_000, 2)
        .await
        .unwrap();
    assert_eq!(pushes::last(&records, &repo, n).await.unwrap(), Some(5_000));
    pushes::remember(&records, &repo, n, 6_000, 3)
        .await
        .unwrap();
    assert_eq!(pushes::last(&records, &repo, n).await.unwrap(), Some(6_000));

    // Deliveries out of order and at once: the latest push wins whatever the order.
    let n = PrNumber(8);
    let writers: Vec<_> = [40, 10, 90, 30, 70, 20, 80, 60, 50]
        .into_iter()
        .map(|t| {
            let (records, repo) = (records.clone(), repo.clone());
            tokio::spawn(async move { pushes::remember(&records, &repo, n, t, t).await })
        })
        .collect();
    for w in writers {
        w.await.unwrap().unwrap();
    }
    assert_eq!(pushes::last(&records, &repo, n).await.unwrap(), Some(90));
}

async fn status_comments_round_trip(backend: Backend) {
    let (_db, store) = store(backend).await;
    let repo = repo();
    let n = PrNumber(42);
    assert_eq!(store.prs().status_comment(&repo, n).await.unwrap(), None);
    let first = StatusComment {
        comment_id: 9_000_000_001,
        digest: Some("aa".into()),
    };
    store
        .prs()
        .remember_status_comment(&repo, n, &first, 1)
        .await
        .unwrap();
    assert_eq!(
        store.prs().status_comment(&repo, n).await.unwrap(),
        Some(first)
    );
    // Recreated after someone deleted it: a new id and digest replace both.
    let second = StatusComment {
        comment_id: 9_000_000_002,
        digest: Some("bb".into()),
    };
    let mut tx = store.begin().await.unwrap();
    gatebot::testing::store::Prs::put_status_comment(&mut tx, &repo, n, &second, 2)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        store.prs().status_comment(&repo, n).await.unwrap(),
        Some(second)
    );
    assert_eq!(
        store
            .prs()
            .status_comment(&repo, PrNumber(43))
            .await
            .unwrap(),
        None
    );
}

async fn slack_facts_round_trip(backend: Backend) {
    let (_db, store) = store(backend).await;
    let records = Records::new(store.clone());
    let canary = "test/podinfo";
    assert_eq!(
        record::get(&records, &record::msg_key(1)).await.unwrap(),
        None
    );
    let mut gate_waits = Vec::new();
    for id in 1..=22 {
        let posted = Posted {
            info: info(id, "/gates/promote/acme/shop/pr/42", canary),
            channel: "C1".into(),
            ts: format!("1700000000.{id:06}"),
        };
        record::remember(&records, &posted, 100 + id).await.unwrap();
        gate_waits.push(id);
        assert_eq!(
            record::get(&records, &record::msg_key(id)).await.unwrap(),
            Some(posted)
        );
    }
    let elsewhere = Posted {
        info: WaitInfo {
            metadata: BTreeMap::new(),
            ..info(30, "/gates/rollback/acme/shop/pr/42", "test/other")
        },
        channel: "C2".into(),
        ts: "1700000001.000001".into(),
    };
    record::remember(&records, &elsewhere, 200).await.unwrap();
    assert_eq!(
        record::get(&records, &record::msg_key(30)).await.unwrap(),
        Some(elsewhere)
    );
    assert_eq!(
        record::waits_of_gate(&records, "/gates/promote/acme/shop/pr/42")
            .await
            .unwrap(),
        gate_waits[2..].to_vec(),
        "the latest 20, oldest first"
    );
    assert_eq!(
        record::latest_of_canary(&records, canary).await.unwrap(),
        Some(22)
    );
    // Posted again (a retry): the latest post of the canary is that one's.
    let again = Posted {
        info: info(3, "/gates/promote/acme/shop/pr/42", canary),
        channel: "C1".into(),
        ts: "1700000002.000003".into(),
    };
    record::remember(&records, &again, 300).await.unwrap();
    assert_eq!(
        record::latest_of_canary(&records, canary).await.unwrap(),
        Some(3)
    );
    assert_eq!(
        record::latest_of_canary(&records, "test/none")
            .await
            .unwrap(),
        None
    );

    let view = record::view(
        &records,
        info(1, "/gates/promote/acme/shop/pr/1", canary),
        0,
    )
    .await
    .unwrap();
    assert!(view.open(), "nothing decided, ended or final yet");
    let decision = Decision {
        approved: false,
        user_id: Some("UALICE".into()),
        name: "alice".into(),
        via: "slack".into(),
        at: 400,
        reason: Some("too slow".into()),
        rollback_gate: Some("/gates/rollback/acme/shop/pr/42".into()),
    };
    record::put(&records, &record::decision_key(1), &decision, 400)
        .await
        .unwrap();
    let ended = Ended {
        outcome: "expired".into(),
        at: 500,
    };
    record::put(&records, &record::ended_key(1), &ended, 500)
        .await
        .unwrap();
    let fin = Final {
        kind: "succeeded".into(),
        message: "promotion completed".into(),
        at: 600,
    };
    record::put(&records, &record::final_key(1), &fin, 600)
        .await
        .unwrap();
    let view = record::view(
        &records,
        info(1, "/gates/promote/acme/shop/pr/1", canary),
        0,
    )
    .await
    .unwrap();
    assert_eq!(view.decision, Some(decision));
    assert_eq!(view.ended, Some(ended));
    assert_eq!(view.final_state, Some(fin));
    let other = record::view(
        &records,
        info(2, "/gates/promote/acme/shop/pr/2", canary),
        0,
    )
    .await
    .unwrap();
    assert!(other.open(), "facts are per wait");
}

async fn a_slack_decision_goes_with_its_transaction(backend: Backend) {
    let (_db, store) = store(backend).await;
    let records = Records::new(store.clone());
    let key = record::decision_key(5);
    let mut decision = Decision {
        approved: true,
        user_id: None,
        name: "bob".into(),
        via: "github".into(),
        at: 10,
        reason: None,
        rollback_gate: None,
    };
    record::put(&records, &key, &decision, 10).await.unwrap();
    assert_eq!(
        record::get(&records, &key).await.unwrap(),
        Some(decision.clone())
    );
    // A message is decided once: a later decision leaves the first.
    let first = decision.clone();
    decision.user_id = Some("UBOB".into());
    decision.via = "slack".into();
    record::put(&records, &key, &decision, 11).await.unwrap();
    assert_eq!(record::get(&records, &key).await.unwrap(), Some(first));
    // A decision written with a change that then fails goes with it.
    let other = record::decision_key(8);
    let mut tx = store.begin().await.unwrap();
    gatebot::testing::store::SlackRows::put_slack_decision(&mut tx, 8, &decision)
        .await
        .unwrap();
    tx.rollback().await;
    assert_eq!(record::get(&records, &other).await.unwrap(), None);
    let mut tx = store.begin().await.unwrap();
    gatebot::testing::store::SlackRows::put_slack_decision(&mut tx, 8, &decision)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(record::get(&records, &other).await.unwrap(), Some(decision));
}

/// A database at the schema before the typed tables (migrations 0001–0003),
/// as a previous release left it.
async fn previous_schema(db: &TestDb) -> AnyPool {
    let dialect = match db.backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    let all = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(dialect);
    let old = db.dir.path().join("previous-migrations");
    std::fs::create_dir_all(&old).unwrap();
    for name in ["0001_init.sql", "0002_replicas.sql", "0003_missing_prs.sql"] {
        std::fs::copy(all.join(name), old.join(name)).unwrap();
    }
    let url = match db.backend {
        Backend::Sqlite => {
            std::fs::create_dir_all(db.dir.path().join("data")).unwrap();
            format!("{}?mode=rwc", db.url)
        }
        Backend::Postgres => db.url.clone(),
    };
    sqlx::any::install_default_drivers();
    let pool = AnyPool::connect(&url).await.unwrap();
    sqlx::migrate::Migrator::new(old.as_path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    pool
}

async fn kv_rows_survive_the_upgrade(backend: Backend) {
    let db = TestDb::new(backend).await;
    let pool = previous_schema(&db).await;
    let posted = |id: i64, canary: &str| {
        json!({
            "info": {"wait_id": id, "gate": "/gates/promote/acme/shop/pr/42", "canary": canary,
                     "checksum": format!("rev-{id}"), "phase": "Progressing",
                     "metadata": {"pr": "42", "team": "shop"}, "since": 1_000 + id},
            "channel": "C1", "ts": format!("1700000000.{id:06}"),
        })
        .to_string()
    };
    let rows: Vec<(String, String, i64)> = vec![
        ("pr-author:acme/shop#42".into(), "alice".into(), 100),
        ("pr-pushed:acme/shop#42".into(), "1700000000000".into(), 101),
        (
            "github-status-comment:acme/shop#42".into(),
            "9001".into(),
            102,
        ),
        (
            "github-status-hash:acme/shop#42".into(),
            "abc123".into(),
            102,
        ),
        (
            "github-status-comment:acme/shop#7".into(),
            "9002".into(),
            103,
        ),
        ("slack-msg:5".into(), posted(5, "test/podinfo"), 200),
        ("slack-msg:6".into(), posted(6, "test/podinfo"), 201),
        // Written before messages kept metadata: serde's default, an empty map.
        (
            "slack-msg:7".into(),
            json!({"info": {"wait_id": 7, "gate": "/gates/promote/acme/shop/pr/7", "canary": "test/old", "checksum": "c",
                            "phase": "Progressing", "since": 7}, "channel": "C7", "ts": "7.0"})
            .to_string(),
            202,
        ),
        (
            "slack-decision:5".into(),
            json!({"approved": true, "user_id": "UALICE", "name": "alice", "via": "slack",
                   "at": 300, "reason": null, "rollback_gate": null})
            .to_string(),
            300,
        ),
        (
            "slack-decision:7".into(),
            json!({"approved": false, "user_id": null, "name": "bob", "via": "api",
                   "at": 301, "reason": "no", "rollback_gate": "/gates/rollback/acme/shop/pr/42"})
            .to_string(),
            301,
        ),
        // Withdrawn: no decision.
        ("slack-decision:6".into(), "null".into(), 302),
        (
            "slack-ended:6".into(),
            json!({"outcome": "expired", "at": 400}).to_string(),
            400,
        ),
        (
            "slack-final:5".into(),
            json!({"kind": "succeeded", "message": "done", "at": 500}).to_string(),
            500,
        ),
        ("slack-canary:test/podinfo".into(), "6".into(), 201),
        (
            "slack-gate:/gates/promote/acme/shop/pr/42".into(),
            "[5,6]".into(),
            201,
        ),
        // Never written by gatebot: left behind without failing the upgrade.
        ("pr-author:no-number".into(), "x".into(), 1),
        ("pr-pushed:acme/shop#9".into(), "soon".into(), 1),
        ("something-else".into(), "{".into(), 1),
    ];
    for (k, v, at) in &rows {
        sqlx::query("INSERT INTO kv (k, v, updated_at) VALUES ($1, $2, $3)")
            .bind(k.clone())
            .bind(v.clone())
            .bind(*at)
            .execute(&pool)
            .await
            .unwrap();
    }
    pool.close().await;

    let store = Store::connect(&db.url).await.expect("migrates");
    let records = Records::new(store.clone());
    let repo = repo();
    assert_eq!(
        store
            .prs()
            .pr_author(&repo, PrNumber(42))
            .await
            .unwrap()
            .as_deref(),
        Some("alice")
    );
    assert_eq!(
        store.prs().pr_pushed_at(&repo, PrNumber(42)).await.unwrap(),
        Some(1_700_000_000_000)
    );
    assert_eq!(
        store.prs().pr_pushed_at(&repo, PrNumber(9)).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .prs()
            .status_comment(&repo, PrNumber(42))
            .await
            .unwrap(),
        Some(StatusComment {
            comment_id: 9001,
            digest: Some("abc123".into())
        })
    );
    assert_eq!(
        store
            .prs()
            .status_comment(&repo, PrNumber(7))
            .await
            .unwrap(),
        Some(StatusComment {
            comment_id: 9002,
            digest: None
        })
    );

    let five = record::get(&records, &record::msg_key(5))
        .await
        .unwrap()
        .expect("message 5");
    assert_eq!(five.info.gate.to_string(), "/gates/promote/acme/shop/pr/42");
    assert_eq!(
        five.info.canary.as_ref().unwrap().to_string(),
        "test/podinfo"
    );
    assert_eq!(five.info.checksum, "rev-5");
    assert_eq!(five.info.since, 1_005);
    assert_eq!(
        five.info.metadata,
        BTreeMap::from([
            ("pr".to_string(), "42".to_string()),
            ("team".to_string(), "shop".to_string())
        ])
    );
    assert_eq!(
        (five.channel.as_str(), five.ts.as_str()),
        ("C1", "1700000000.000005")
    );
    let seven = record::get(&records, &record::msg_key(7))
        .await
        .unwrap()
        .expect("message 7");
    assert!(seven.info.metadata.is_empty());
    assert_eq!(
        record::waits_of_gate(&records, "/gates/promote/acme/shop/pr/42")
            .await
            .unwrap(),
        vec![5, 6]
    );
    assert_eq!(
        record::latest_of_canary(&records, "test/podinfo")
            .await
            .unwrap(),
        Some(6)
    );

    let view5 = record::view(&records, five.info, 0).await.unwrap();
    assert_eq!(
        view5.decision,
        Some(Decision {
            approved: true,
            user_id: Some("UALICE".into()),
            name: "alice".into(),
            via: "slack".into(),
            at: 300,
            reason: None,
            rollback_gate: None,
        })
    );
    assert_eq!(view5.ended, None);
    assert_eq!(
        view5.final_state,
        Some(Final {
            kind: "succeeded".into(),
            message: "done".into(),
            at: 500
        })
    );
    let decision7 = record::get(&records, &record::decision_key(7))
        .await
        .unwrap()
        .expect("decision 7");
    assert!(!decision7.approved);
    assert_eq!(decision7.reason.as_deref(), Some("no"));
    assert_eq!(
        decision7.rollback_gate.as_deref(),
        Some("/gates/rollback/acme/shop/pr/42")
    );
    assert_eq!(
        record::get(&records, &record::decision_key(6))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        record::get(&records, &record::ended_key(6)).await.unwrap(),
        Some(Ended {
            outcome: "expired".into(),
            at: 400
        })
    );

    // kv itself is gone.
    sqlx::any::install_default_drivers();
    let pool = AnyPool::connect(&db.url).await.unwrap();
    let gone = sqlx::query("SELECT COUNT(*) AS n FROM kv")
        .fetch_one(&pool)
        .await;
    assert!(gone.is_err(), "kv was dropped");
    let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM slack_messages")
        .fetch_one(&pool)
        .await
        .unwrap()
        .get("n");
    assert_eq!(n, 3);
}

/// Two replicas sending a PR's first status comment: one job claims its
/// creation, another waits; the same job taken over gets it back at once; a
/// failed creation gives the claim back, and a claim left by a job that never
/// came back is taken over after a minute.
async fn one_replica_at_a_time_creates_a_status_comment(backend: Backend) {
    let (_db, store) = store(backend).await;
    let (repo, n, minute) = (repo(), PrNumber(7), 60_000);
    let claim = |job: &'static str, at: i64| {
        let (store, repo) = (store.clone(), repo.clone());
        async move {
            store
                .prs()
                .claim_status_creation(&repo, n, job, at, minute)
                .await
                .unwrap()
        }
    };
    assert!(claim("job-1", 1_000).await);
    assert!(!claim("job-2", 2_000).await, "held by another job");
    assert!(
        claim("job-1", 2_500).await,
        "the same job, taken over after its lease"
    );
    store.prs().release_status_creation(&repo, n).await.unwrap();
    assert!(claim("job-2", 3_000).await, "given back");
    assert!(
        claim("job-3", 3_000 + minute + 1).await,
        "a stale claim is taken over"
    );
    let sent = StatusComment {
        comment_id: 55,
        digest: None,
    };
    store
        .prs()
        .remember_status_comment(&repo, n, &sent, 4_000)
        .await
        .unwrap();
    assert!(!claim("job-3", 10 * minute).await, "it exists");
    store.prs().release_status_creation(&repo, n).await.unwrap();
    assert_eq!(
        store.prs().status_comment(&repo, n).await.unwrap(),
        Some(sent),
        "a real one stays"
    );
}
