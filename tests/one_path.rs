//! One command path (issue 25): the same command sent through every channel
//! that offers it gets the same answer, on SQLite and PostgreSQL. Each case
//! sends it as people do (a signed PR comment, a signed slash command or
//! click, a page's form, the API), each channel at a gate of its own, and
//! compares what came of it: applied or refused, the gate's audit entries and
//! state, and `gatebot_commands_total{source,command,result}`.
//!
//! Where channels differed before, the rule a person would expect holds
//! everywhere: a freeze's reason is one line of at most 300 characters; a
//! Reject at a start gate keeps it closed, from the page as from Slack; a
//! Reject at a loadtester's gate rolls back while its canary progresses; a
//! refusal (held, break glass) is audited and counted whoever sent it. A
//! pipeline's create and retire of a named gate take the same path.

use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::harness::{client, Backend, ADMIN_TOKEN};
use reqwest::redirect::Policy as Redirects;
use serde_json::{json, Value};

/// Alice and Carol approve in Slack and write on GitHub; four eyes for
/// approvals everywhere; Alice may freeze. No break-glass rule.
const POLICY: &str = r#"
[github]
forbid_self_approval = true

[github.commands.freeze]
min_permission = "write"

[slack]
approvers = ["UALICE", "UCAROL"]
forbid_self_approval = true

[slack.commands.freeze]
approvers = ["UALICE"]

[users]
alice = "UALICE"
carol = "UCAROL"
"#;

gatebot_testkit::on_both_stores!(
    a_freeze_with_a_3000_character_reason_is_refused_everywhere,
    reject_means_the_same_from_slack_and_the_page,
    promote_by_the_prs_author_is_refused_under_four_eyes_everywhere,
    promote_during_a_freeze_is_applied_and_held_closed_everywhere,
    break_glass_without_a_force_rule_is_refused_everywhere,
    approving_a_held_gate_is_refused_everywhere,
    promote_by_someone_who_may_not_is_refused_everywhere,
    a_named_gate_is_created_and_retired_through_the_one_path,
);

struct Env {
    chat: ChatOps,
    /// The page's session (admin token) and its CSRF token.
    admin: (String, String),
    trigger: std::sync::atomic::AtomicU64,
}

impl std::ops::Deref for Env {
    type Target = ChatOps;
    fn deref(&self) -> &ChatOps {
        &self.chat
    }
}

async fn env(backend: Backend) -> Env {
    let chat = ChatOps::start_with(
        backend,
        Setup {
            policy: POLICY,
            permissions: &[("alice", "write"), ("carol", "write"), ("bob", "write")],
            clock: None,
        },
        |config| {
            config.ui.mode = gatebot::testing::config::UiMode::On;
            config.ui.github_client_id = Some("client-1".into());
            config.ui.github_client_secret = Some("client-secret".to_string().into());
        },
    )
    .await;
    let admin = admin_session(&chat).await;
    Env {
        chat,
        admin,
        trigger: Default::default(),
    }
}

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Redirects::none())
        .build()
        .unwrap()
}

fn cookie_of(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap().to_string())
        .unwrap_or_else(|| panic!("no {name} cookie"))
}

fn hidden(html: &str, name: &str) -> String {
    let at = html
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no {name} in {html}"));
    let rest = &html[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_string()
}

async fn page(url: String, cookie: Option<&str>) -> reqwest::Response {
    let mut req = browser().get(url);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    req.send().await.unwrap()
}

async fn csrf_of(chat: &ChatOps, cookie: &str) -> (String, String) {
    let text = page(chat.server.at("/ui"), Some(cookie)).await;
    let text = text.text().await.unwrap();
    (cookie.to_string(), hidden(&text, "csrf"))
}

async fn admin_session(chat: &ChatOps) -> (String, String) {
    let signin = page(chat.server.at("/ui/signin"), None).await;
    let csrf = hidden(&signin.text().await.unwrap(), "csrf");
    let r = browser()
        .post(chat.server.at("/ui/signin/token"))
        .form(&[("token", ADMIN_TOKEN), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    csrf_of(chat, &cookie_of(&r, "gatebot_session")).await
}

/// A session signed in with GitHub as `login` (the fake's OAuth flow).
async fn github_session(chat: &ChatOps, login: &str) -> (String, String) {
    chat.github.set_oauth_login(login);
    let start = page(chat.server.at("/ui/signin/github"), None).await;
    let oauth = cookie_of(&start, "gatebot_oauth");
    let authorize = start.headers()["location"].to_str().unwrap().to_string();
    let back = page(authorize, None).await;
    let back = back.headers()["location"].to_str().unwrap().to_string();
    let signed = page(back, Some(&oauth)).await;
    assert_eq!(signed.status().as_u16(), 303);
    csrf_of(chat, &cookie_of(&signed, "gatebot_session")).await
}

/// What a channel said, and whether it did it.
#[derive(Debug)]
struct Said {
    applied: bool,
    text: String,
}

impl Env {
    fn trigger(&self) -> String {
        let n = self
            .trigger
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("T{n}")
    }

    /// A PR comment by `user` on acme/shop#`pr`, which `author` opened.
    async fn comment(&self, pr: u64, author: &str, user: &str, body: &str) -> Said {
        let id = 1_000
            + self
                .trigger
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let before = self.replies(pr).len();
        self.comment_by(pr, author, id, user, body).await;
        let replies = self.replies(pr);
        let text = replies[before..].join("\n");
        Said {
            applied: !text.contains("not done"),
            text,
        }
    }

    /// `/gatebot <text>` by a Slack user; the later answer.
    async fn slash(&self, user: &str, text: &str) -> Said {
        let trigger = self.trigger();
        let (status, inline) = self.chat.slash(user, "someone", text, &trigger).await;
        assert_eq!(status, 200, "{inline}");
        let text = self.answers(&trigger).await.join("\n");
        let text = if text.is_empty() { inline } else { text };
        Said {
            applied: !text.contains("may not")
                && !text.contains(":lock:")
                && !text.contains("not set up")
                && !text.contains("four eyes")
                && !text.contains("held")
                && !text.contains("at most"),
            text,
        }
    }

    /// A click of `action` on the waiting message of `gate` by Alice.
    async fn click(&self, gate: &str, action: &str) -> Said {
        let message = self
            .waiting_message(gate)
            .unwrap_or_else(|| panic!("no waiting message for {gate}"));
        let trigger = self.trigger();
        let status = self
            .chat
            .click("UALICE", "alice", action, &message, &trigger)
            .await;
        assert_eq!(status, 200);
        let text = self.answers(&trigger).await.join("\n");
        Said {
            applied: text.is_empty(),
            text,
        }
    }

    /// A page's button at `gate`, confirmed, by the session.
    async fn act(&self, session: &(String, String), gate: &str, action: &str) -> Said {
        let r = browser()
            .post(self.server.at("/ui/act"))
            .header("cookie", &session.0)
            .form(&[
                ("gate", gate),
                ("action", action),
                ("csrf", &session.1),
                ("confirmed", "yes"),
            ])
            .send()
            .await
            .unwrap();
        let applied = r.status().as_u16() == 303;
        let text = r.text().await.unwrap().replace("&#x2f;", "/");
        self.server.drained().await;
        Said { applied, text }
    }

    /// `POST /api/v1/<path>` with the admin token.
    async fn api(&self, path: &str, body: Value) -> Said {
        let r = client()
            .post(self.server.at(&format!("/api/v1/{path}")))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let applied = r.status().is_success();
        let text = format!("{} {}", r.status().as_u16(), r.text().await.unwrap());
        self.server.drained().await;
        Said { applied, text }
    }

    /// A Flagger check of `gate` by test/`name`; starts a wait and its message.
    async fn check(&self, gate: &str, name: &str, phase: &str) -> (u16, String) {
        let r = client()
            .post(self.server.at(gate))
            .json(&json!({"name": name, "namespace": "test", "phase": phase, "checksum": "rev-1"}))
            .send()
            .await
            .unwrap();
        let answer = (r.status().as_u16(), r.text().await.unwrap());
        self.server.drained().await;
        answer
    }

    /// The gate's state and its audit actions, oldest first.
    async fn gate(&self, gate: &str) -> (String, Vec<String>) {
        let path = gate.trim_start_matches("/gates");
        let found = self.server.api(&format!("/api/v1/gates{path}")).await;
        let mut actions: Vec<String> = found["audit"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e["action"].as_str().unwrap_or_default().to_string())
            .collect();
        actions.reverse();
        (
            found["state"].as_str().unwrap_or_default().to_string(),
            actions,
        )
    }

    async fn counted(&self, source: &str, command: &str, result: &str) -> f64 {
        self.server
            .metric(&format!(
                r#"gatebot_commands_total{{source="{source}",command="{command}",result="{result}"}}"#
            ))
            .await
    }

    async fn freezes(&self) -> usize {
        self.server.api("/api/v1/freezes").await["freezes"]
            .as_array()
            .map_or(0, Vec::len)
    }
}

/// One channel's result, as the table compares it.
#[derive(Debug, PartialEq)]
struct Seen {
    applied: bool,
    state: String,
    audit: Vec<String>,
    counted: f64,
}

async fn seen(env: &Env, said: &Said, gate: &str, counter: (&str, &str, &str)) -> Seen {
    let (state, audit) = env.gate(gate).await;
    Seen {
        applied: said.applied,
        state,
        audit,
        counted: env.counted(counter.0, counter.1, counter.2).await,
    }
}

/// Every row equals the first.
fn same(rows: &[(&str, Seen)]) {
    let (first, want) = &rows[0];
    for (channel, got) in &rows[1..] {
        assert_eq!(got, want, "{channel} differs from {first}");
    }
}

async fn a_freeze_with_a_3000_character_reason_is_refused_everywhere(backend: Backend) {
    let env = env(backend).await;
    let long = "x".repeat(3_000);
    let github = env
        .comment(1, "bob", "alice", &format!("/freeze {long}"))
        .await;
    let slack = env
        .slash("UALICE", &format!("freeze acme/shop {long}"))
        .await;
    let api = env
        .api("freezes", json!({"scope": "acme/shop", "reason": long}))
        .await;
    for (channel, said) in [("github", &github), ("slack", &slack), ("api", &api)] {
        assert!(!said.applied, "{channel}: {said:?}");
        assert!(
            said.text.contains("at most 300 characters"),
            "{channel}: {said:?}"
        );
        assert_eq!(
            env.counted(channel, "freeze", "refused").await,
            1.0,
            "{channel}"
        );
        assert_eq!(
            env.counted(channel, "freeze", "applied").await,
            0.0,
            "{channel}"
        );
    }
    assert!(api.text.starts_with("400"), "{api:?}");
    assert_eq!(env.freezes().await, 0);
    assert!(env.announcements().is_empty(), "{:?}", env.announcements());
}

async fn reject_means_the_same_from_slack_and_the_page(backend: Backend) {
    let env = env(backend).await;
    // A promotion, a loadtester's gate while progressing, a start gate: the
    // first two roll back, the last stays closed.
    for (n, via) in [(11, "slack"), (12, "web")] {
        let promote = format!("/gates/promote/acme/shop/pr/{n}");
        let loadtester = format!("/loadtester/gate/test/app{n}");
        let start = format!("/gates/start/acme/shop/pr/{}", n + 10);
        assert_eq!(env.check(&promote, "web", "Progressing").await.0, 403);
        assert_eq!(
            env.check("/gate/check", &format!("app{n}"), "Progressing")
                .await
                .0,
            403
        );
        assert_eq!(env.check(&start, "api", "Initializing").await.0, 403);
        for gate in [&promote, &loadtester, &start] {
            let said = match via {
                "slack" => env.click(gate, "gatebot_reject").await,
                _ => env.act(&env.admin, gate, "reject").await,
            };
            assert!(said.applied, "{via} at {gate}: {said:?}");
        }
    }
    let mut rows = Vec::new();
    for (n, via) in [(11, "slack"), (12, "web")] {
        let rollback = env.gate(&format!("/gates/rollback/acme/shop/pr/{n}")).await;
        let legacy = env.gate(&format!("/loadtester/rollback/test/app{n}")).await;
        let start = env
            .gate(&format!("/gates/start/acme/shop/pr/{}", n + 10))
            .await;
        let counted = env.counted(via, "reject", "applied").await;
        rows.push((via, (rollback, legacy, start, counted)));
    }
    let want = (
        ("open".to_string(), vec!["open".to_string()]),
        ("open".to_string(), vec!["open".to_string()]),
        (
            "closed".to_string(),
            vec!["wait".to_string(), "close".to_string()],
        ),
        3.0,
    );
    for (via, got) in rows {
        assert_eq!(got, want, "{via}");
    }
}

async fn promote_by_the_prs_author_is_refused_under_four_eyes_everywhere(backend: Backend) {
    let env = env(backend).await;
    for pr in [21, 22, 23] {
        env.github.set_author(pr, "carol");
    }
    let github = env.comment(21, "carol", "carol", "/promote").await;
    let slack = env.slash("UCAROL", "promote 22").await;
    let carol = github_session(&env, "carol").await;
    let web = env
        .act(&carol, "/gates/promote/acme/shop/pr/23", "approve")
        .await;
    let mut rows = Vec::new();
    for (pr, via, said) in [
        (21, "github", &github),
        (22, "slack", &slack),
        (23, "web", &web),
    ] {
        assert!(said.text.contains("four eyes"), "{via}: {said:?}");
        let gate = format!("/gates/promote/acme/shop/pr/{pr}");
        rows.push((
            via,
            seen(&env, said, &gate, (via, "promote", "refused")).await,
        ));
    }
    assert_eq!(rows[0].1.audit, ["refuse"]);
    assert_eq!(rows[0].1.state, "closed");
    same(&rows);
}

async fn promote_during_a_freeze_is_applied_and_held_closed_everywhere(backend: Backend) {
    let env = env(backend).await;
    let frozen = env
        .api(
            "freezes",
            json!({"scope": "acme/shop", "reason": "incident 12"}),
        )
        .await;
    assert!(frozen.applied, "{frozen:?}");
    let github = env.comment(31, "bob", "alice", "/promote").await;
    let slack = env.slash("UALICE", "promote 32").await;
    let api = env
        .api(
            "gates/open",
            json!({"gate": "/gates/promote/acme/shop/pr/33"}),
        )
        .await;
    let web = env
        .act(&env.admin, "/gates/promote/acme/shop/pr/34", "approve")
        .await;
    let mut rows = Vec::new();
    for (pr, via, said) in [
        (31, "github", &github),
        (32, "slack", &slack),
        (33, "api", &api),
        (34, "web", &web),
    ] {
        let gate = format!("/gates/promote/acme/shop/pr/{pr}");
        let (status, reason) = env.check(&gate, "web", "Progressing").await;
        assert_eq!(status, 403, "{via}: {reason}");
        assert!(reason.contains("frozen (acme/shop)"), "{via}: {reason}");
        rows.push((
            via,
            seen(&env, said, &gate, (via, "promote", "applied")).await,
        ));
    }
    assert!(rows[0].1.applied);
    assert_eq!(rows[0].1.state, "open");
    // Opened, then the check waits: the freeze holds it closed.
    assert_eq!(rows[0].1.audit, ["open", "wait"]);
    same(&rows);
}

async fn break_glass_without_a_force_rule_is_refused_everywhere(backend: Backend) {
    let env = env(backend).await;
    let github = env
        .comment(41, "bob", "alice", "/promote --force prod is down")
        .await;
    let slack = env.slash("UALICE", "promote 42 --force prod is down").await;
    let mut rows = Vec::new();
    for (pr, via, said) in [(41, "github", &github), (42, "slack", &slack)] {
        assert!(
            said.text.contains("break glass is not set up"),
            "{via}: {said:?}"
        );
        let gate = format!("/gates/promote/acme/shop/pr/{pr}");
        rows.push((
            via,
            seen(&env, said, &gate, (via, "promote", "refused")).await,
        ));
    }
    assert_eq!(rows[0].1.audit, ["refuse"]);
    same(&rows);
}

async fn approving_a_held_gate_is_refused_everywhere(backend: Backend) {
    let env = env(backend).await;
    for pr in 51..=54 {
        let held = env.comment(pr, "bob", "alice", "/hold").await;
        assert!(held.applied, "{held:?}");
    }
    let github = env.comment(51, "bob", "alice", "/promote").await;
    let slack = env.slash("UALICE", "promote 52").await;
    let api = env
        .api(
            "gates/open",
            json!({"gate": "/gates/promote/acme/shop/pr/53"}),
        )
        .await;
    let web = env
        .act(&env.admin, "/gates/promote/acme/shop/pr/54", "approve")
        .await;
    let mut rows = Vec::new();
    for (pr, via, said) in [
        (51, "github", &github),
        (52, "slack", &slack),
        (53, "api", &api),
        (54, "web", &web),
    ] {
        assert!(said.text.contains("held"), "{via}: {said:?}");
        let gate = format!("/gates/promote/acme/shop/pr/{pr}");
        rows.push((
            via,
            seen(&env, said, &gate, (via, "promote", "refused")).await,
        ));
    }
    assert!(!rows[0].1.applied);
    assert_eq!(rows[0].1.state, "held");
    assert_eq!(rows[0].1.audit, ["hold", "refuse"]);
    same(&rows);
}

async fn promote_by_someone_who_may_not_is_refused_everywhere(backend: Backend) {
    let env = env(backend).await;
    // Mallory has no permission on GitHub and is no approver in Slack (where
    // the refusal is answered at once, before the command is stored).
    let github = env.comment(61, "bob", "mallory", "/promote").await;
    let slack = env.slash("UMALLORY", "promote 62").await;
    assert!(github.text.contains("needs write permission"), "{github:?}");
    assert!(slack.text.contains("not an approver"), "{slack:?}");
    let mut rows = Vec::new();
    for (pr, via, said) in [(61, "github", &github), (62, "slack", &slack)] {
        let gate = format!("/gates/promote/acme/shop/pr/{pr}");
        rows.push((
            via,
            seen(&env, said, &gate, (via, "promote", "refused")).await,
        ));
    }
    assert_eq!(rows[0].1.audit, ["refuse"]);
    assert_eq!(rows[0].1.counted, 1.0);
    same(&rows);
}

/// `POST /api/v1/gates` or `DELETE /api/v1/gates/…` with the admin token;
/// the status and the answer.
async fn pipeline(env: &Env, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let r = client()
        .request(method, env.server.at(&format!("/api/v1/gates{path}")))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    // A refusal is plain text.
    let answer = serde_json::from_str(&text).unwrap_or(Value::String(text));
    env.server.drained().await;
    (status, answer)
}

/// A pipeline's create and retire are commands like the others: applied or
/// refused, audited and counted once.
async fn a_named_gate_is_created_and_retired_through_the_one_path(backend: Backend) {
    let env = env(backend).await;
    let gate = "/gates/promote/named/release-1";
    let spec = json!({"kind": "promote", "name": "release-1", "title": "Release 1"});
    let (status, created) = pipeline(&env, reqwest::Method::POST, "", spec.clone()).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["gate"], gate);
    let (_, again) = pipeline(&env, reqwest::Method::POST, "", spec).await;
    assert_eq!(again["created"], false, "{again}");
    let other = json!({"kind": "promote", "name": "release-1", "title": "Release 2"});
    let (status, conflict) = pipeline(&env, reqwest::Method::POST, "", other).await;
    assert_eq!(status, 409, "{conflict}");
    assert!(
        conflict.to_string().contains("with another title"),
        "{conflict}"
    );
    assert_eq!(env.counted("api", "create", "applied").await, 2.0);
    assert_eq!(env.counted("api", "create", "refused").await, 1.0);
    assert_eq!(
        env.gate(gate).await,
        (
            "closed".to_string(),
            vec!["create".to_string(), "refuse".to_string()]
        )
    );

    let (status, retired) = pipeline(
        &env,
        reqwest::Method::DELETE,
        "/promote/named/release-1",
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{retired}");
    assert_eq!(retired["retired"], true, "{retired}");
    let (status, missing) = pipeline(
        &env,
        reqwest::Method::DELETE,
        "/promote/named/release-9",
        json!({}),
    )
    .await;
    assert_eq!(status, 404, "{missing}");
    assert_eq!(env.counted("api", "retire", "applied").await, 1.0);
    assert_eq!(env.counted("api", "retire", "refused").await, 1.0);
    let (state, audit) = env.gate(gate).await;
    assert_eq!(state, "held");
    assert_eq!(audit, vec!["create", "refuse", "hold"]);
}
