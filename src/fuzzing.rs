//! Entry points for the `cargo fuzz` targets in `fuzz/`, not an API.
//!
//! Each function feeds one parser of outside input with whatever libFuzzer
//! makes, and panics when a property the rest of gatebot relies on breaks,
//! so that libFuzzer reports it as a crash. docs/testing.md says how to run them.

use crate::command::{self, Parsed, SlashInvocation, Target, Verb};
use crate::gate::{GateKey, GateKind, RepoName, Scope};

/// The repository short keys (`pr/42`) and bare numbers resolve against.
fn default_repo() -> RepoName {
    RepoName::new("acme", "shop").expect("a valid repository")
}

// ---- PR comments ----

/// A PR comment body: every command it carries renders back, one per
/// paragraph, to the same commands; an edit that changes nothing adds nothing.
pub fn comment(body: &str) {
    let parsed = command::parse_comment(body);
    let lines = body.split_inclusive(['\n', '\r']).count().max(1);
    for p in &parsed {
        assert!(
            (1..=lines).contains(&p.line()),
            "line {} of {lines}",
            p.line()
        );
    }
    let rendered: String = parsed.iter().map(|p| render_parsed(p) + "\n\n").collect();
    assert_eq!(
        without_lines(&command::parse_comment(&rendered)),
        without_lines(&parsed),
        "rendered back as {rendered:?}"
    );
    assert!(command::new_commands(body, body).is_empty());
    assert_eq!(command::new_commands("", body), parsed);
}

/// One parsed command as a person would write it.
fn render_parsed(p: &Parsed) -> String {
    match p {
        Parsed::Command(inv) => match &inv.reason {
            Some(reason) => format!("/{} {reason}", inv.command),
            None => format!("/{}", inv.command),
        },
        Parsed::Unknown { word, .. } => format!("/{word}"),
        Parsed::Freeze { unfreeze, rest, .. } => {
            let verb = if *unfreeze { "unfreeze" } else { "freeze" };
            format!("/{verb} {rest}")
        }
    }
}

/// The commands without their line numbers, which rendering changes.
fn without_lines(parsed: &[Parsed]) -> Vec<Parsed> {
    parsed
        .iter()
        .cloned()
        .map(|mut p| {
            match &mut p {
                Parsed::Command(inv) => inv.line = 0,
                Parsed::Unknown { line, .. } | Parsed::Freeze { line, .. } => *line = 0,
            }
            p
        })
        .collect()
}

// ---- the slash command ----

/// The text after `/gatebot`: a command that parses renders back to the
/// same command, and every gate it names round-trips through its path.
pub fn slash(text: &str) {
    if let Some((_, rest)) = command::freeze_verb(text) {
        let line = command::parse_freeze(rest);
        let _ = line.read(1_800_000_000_000);
    }
    let Ok(inv) = command::parse_slash(text) else {
        return;
    };
    let rendered = render_slash(&inv);
    assert_eq!(
        command::parse_slash(&rendered).as_ref(),
        Ok(&inv),
        "rendered back as {rendered:?}"
    );
    let repo = default_repo();
    if let Ok(Some(subject)) = crate::core::commands::subject_of(inv.target, Some(&repo)) {
        let _ = subject.display();
        for c in Verb::ALL {
            for key in crate::core::commands::gates_for(c, &subject) {
                key_round_trips(&key);
            }
        }
    }
}

/// The slash command's form body as Slack posts it.
pub fn slash_form(body: &[u8]) {
    let c = crate::slack::payload::SlashCommand::from_form(body);
    let _ = c.user_label();
    slash(&c.text);
}

fn render_slash(inv: &SlashInvocation) -> String {
    let mut out = inv.command.to_string();
    if let Some(t) = &inv.target {
        out.push(' ');
        out.push_str(&render_target(t));
    }
    if let Some(r) = &inv.reason {
        out.push(' ');
        out.push_str(r);
    }
    out
}

fn render_target(t: &Target) -> String {
    match t {
        Target::Pr { repo: None, number } => format!("#{number}"),
        Target::Pr {
            repo: Some(repo),
            number,
        } => format!("{repo}#{number}"),
        Target::Canary { namespace, name } => format!("canary/{namespace}/{name}"),
        Target::Gate(path) => path.clone(),
        Target::Namespace(ns) => format!("ns/{ns}"),
        Target::Named(name) => format!("named/{name}"),
    }
}

// ---- gate keys and paths ----

/// A gate key as operators, the API and the audit page's search take it: a
/// key that parses is written as a path that parses, without a default
/// repository, to the same key, as stored keys are read back.
pub fn gate_key(text: &str) {
    let repo = default_repo();
    if let Ok(key) = GateKey::parse(text, None) {
        assert_eq!(GateKey::parse(text, Some(&repo)).as_ref(), Ok(&key));
    }
    if let Ok(key) = GateKey::parse(text, Some(&repo)) {
        key_round_trips(&key);
    }
    // The route `/gates/{kind}/{*scope}` splits the scope on `/`.
    if let Some((kind, scope)) = text.split_once('/') {
        if let Some(kind) = GateKind::from_route(kind) {
            let segments: Vec<&str> = scope.split('/').collect();
            if let Ok(key) = GateKey::from_scope_segments(kind, &segments, Some(&repo)) {
                key_round_trips(&key);
            }
        }
    }
}

fn key_round_trips(key: &GateKey) {
    let path = key.to_string();
    assert!(path.starts_with('/'), "{path:?}");
    assert_eq!(
        GateKey::parse(&path, None).as_ref(),
        Ok(key),
        "via {path:?}"
    );
    let json = serde_json::to_string(key).expect("a key serializes");
    let back: GateKey = serde_json::from_str(&json).expect("a stored key reads back");
    assert_eq!(&back, key);
    let _ = key.subject();
}

// ---- Flagger ----

/// A body Flagger posts to a gate, the loadtester API or the event hook:
/// refused with a 4xx or read; a canary it names is a gate key that
/// round-trips through its path.
pub fn flagger(body: &[u8]) {
    let input = match crate::flagger::FlaggerBody::parse(body) {
        Ok(Some(b)) => b.input(None),
        Ok(None) => return,
        Err(e) => Err(e),
    };
    let input = match input {
        Ok(input) => input,
        Err(refused) => {
            assert!(refused.status.is_client_error(), "{refused:?}");
            return;
        }
    };
    let Some(canary) = input.canary else { return };
    assert_eq!(canary.to_string().parse().as_ref(), Ok(&canary));
    for kind in [GateKind::LegacyGate, GateKind::Promote] {
        key_round_trips(&GateKey::new(kind, Scope::Canary(canary.clone())));
    }
    let metadata = input.metadata.recorded();
    let _ = metadata.get("timestamp").map(|t| t.parse::<i64>());
    if let Some(message) = metadata.get("eventMessage") {
        progress_folds(
            message,
            input.checksum.recorded(),
            metadata.get("threshold"),
        );
    }
}

/// An event message folded twice into a canary's progress: a weight stays a
/// percentage, a failure is told at most once, the line renders.
fn progress_folds(message: &str, checksum: &str, threshold: Option<&String>) {
    use crate::gate::progress::{threshold_of, CanaryProgress, Seen};
    let seen = Seen {
        checksum,
        message,
        threshold: threshold_of(threshold),
        at: 0,
    };
    let (p, _) = CanaryProgress::after(None, seen);
    let (p, again) = CanaryProgress::after(Some(p), seen);
    assert_eq!(again, None, "told twice: {message:?}");
    assert!(p.weight.is_none_or(|w| w <= 100));
    let _ = p.line(str::to_string, |at| at.to_string());
}

// ---- GitHub ----

/// A webhook body: what the inbox stores of an event (its trimmed copy)
/// reads back to the same pull request, signed id and time. The same bytes
/// as a signature header are refused without a panic.
pub fn github(body: &[u8]) {
    use crate::github::events::{CheckRunEvent, IssueCommentEvent, PullRequestEvent};
    if let Ok(e) = serde_json::from_slice::<IssueCommentEvent>(body) {
        let stored = serde_json::to_string(&e).expect("an event serializes");
        let back: IssueCommentEvent = serde_json::from_str(&stored).expect("stored reads back");
        assert_eq!(back.signed_id(), e.signed_id());
        assert_eq!(back.pr(), e.pr());
        assert_eq!(back.written_at(), e.written_at());
        assert_eq!(back.comment.body, e.comment.body);
        let _ = (e.on_pull_request(), e.comment.user.is_bot());
    }
    if let Ok(e) = serde_json::from_slice::<PullRequestEvent>(body) {
        let stored = serde_json::to_string(&e).expect("an event serializes");
        let back: PullRequestEvent = serde_json::from_str(&stored).expect("stored reads back");
        assert_eq!(back.signed_id(), e.signed_id());
        assert_eq!(back.pr(), e.pr());
        assert_eq!(back.signed_at(), e.signed_at());
    }
    if let Ok(e) = serde_json::from_slice::<CheckRunEvent>(body) {
        let stored = serde_json::to_string(&e).expect("an event serializes");
        let back: CheckRunEvent = serde_json::from_str(&stored).expect("stored reads back");
        assert_eq!(back.signed_id(), e.signed_id());
        assert_eq!(back.gate(), e.gate());
    }
    let verify = crate::github::verify::verify;
    let header = String::from_utf8_lossy(body);
    assert!(verify("s1, s2", Some(&header), b"{}").is_err());
    let signed = crate::github::verify::sign("s2", body);
    assert_eq!(verify("s1, s2", Some(&signed), body), Ok(()));
}

// ---- Slack ----

/// An interaction's form body (`payload=<JSON>`): what the inbox stores
/// reads back to the same click, id and channel. The same bytes as a
/// signature are refused without a panic; a signed body verifies.
pub fn slack(body: &[u8]) {
    use crate::slack::payload::Interaction;
    if let Ok(i) = Interaction::from_form(body) {
        let stored = serde_json::to_string(&i).expect("an interaction serializes");
        let back: Interaction = serde_json::from_str(&stored).expect("stored reads back");
        assert_eq!(back.click(), i.click());
        assert_eq!(back.click_id(), i.click_id());
        assert_eq!(back.channel_id(), i.channel_id());
        assert_eq!(back.message_ts(), i.message_ts());
        assert_eq!(back.user_label(), i.user_label());
    }
    slash_form(body);
    let verify = crate::slack::verify::verify;
    let now = 1_800_000_000;
    let text = String::from_utf8_lossy(body);
    assert!(verify(b"secret", Some("1800000000"), Some(&text), b"x", now).is_err());
    let _ = verify(b"secret", Some(&text), Some("v0=00"), b"x", now);
    let signed = crate::slack::verify::sign(b"secret", "1800000000", body);
    assert_eq!(
        verify(b"secret", Some("1800000000"), Some(&signed), body, now),
        Ok(now)
    );
}

/// One Socket Mode text frame: read leniently; an envelope's payload reads
/// as an interaction or a slash command without a panic, a click's time is
/// never after now, and the acknowledgement names the envelope.
pub fn socket_frame(text: &str) {
    use crate::slack::payload::{Interaction, SlashCommand};
    use crate::slack::socket::{acknowledgement, clicked_at, disconnect_reason, envelope_kind};
    use crate::slack::socket::{Ack, Frame};
    let Ok(frame) = serde_json::from_str::<Frame>(text) else {
        return;
    };
    let _ = (envelope_kind(&frame.kind), frame.retry_attempt);
    let _ = disconnect_reason(frame.reason.as_deref().unwrap_or("unknown"));
    let payload = frame.payload.unwrap_or(serde_json::Value::Null);
    let now = 1_800_000_000_000;
    if let Ok(i) = serde_json::from_value::<Interaction>(payload.clone()) {
        assert!(clicked_at(&i, now) <= now);
        let _ = (i.click(), i.click_id());
    }
    if let Ok(c) = serde_json::from_value::<SlashCommand>(payload) {
        slash(&c.text);
    }
    let Some(envelope) = frame.envelope_id else {
        return;
    };
    for ack in [Ack::Bare, Ack::Text(text.to_string())] {
        let sent: serde_json::Value =
            serde_json::from_str(&acknowledgement(&envelope, ack)).expect("an ack is JSON");
        assert_eq!(sent["envelope_id"].as_str(), Some(envelope.as_str()));
    }
}

// ---- the policy file ----

/// A policy file: one that loads gives the same answers twice, and the same
/// answers as the same text loaded again.
pub fn policy(text: &str) {
    use crate::config::Permission;
    let load = || crate::policy::Policy::parse(text, Permission::Write, &["U1".to_string()]);
    let (Ok(a), Ok(b)) = (load(), load()) else {
        assert!(load().is_err(), "loads only sometimes");
        return;
    };
    assert_eq!(policy_answers(&a), policy_answers(&a));
    assert_eq!(policy_answers(&a), policy_answers(&b));
}

fn policy_answers(p: &crate::policy::Policy) -> String {
    let mut out = String::new();
    for c in Verb::ALL {
        out += &format!("{:?}{:?}{:?}", p.github(c), p.slack(c), p.teams(c));
    }
    for rule in [
        crate::command::Rule::Freeze,
        crate::command::Rule::Unfreeze,
        crate::command::Rule::Close,
    ] {
        out += &format!(
            "{:?}{:?}{:?}",
            p.github_named(rule),
            p.slack_named(rule),
            p.teams_named(rule)
        );
    }
    out += &format!(
        "{:?}{:?}{:?}{:?}{:?}{:?}{:?}",
        p.deadlines(),
        p.quorum(),
        p.reminders(),
        p.timers(),
        p.github_force(),
        p.slack_force(),
        (p.slack_user_of("octocat"), p.github_login_of("U1")),
    );
    out += &format!(
        "{:?}{:?}",
        p.teams_force(),
        p.github_login_of_teams("6e1f0c9a")
    );
    out += &format!("{}{}", p.metadata_deadlines(), p.rolls_back_on_deadline());
    let now = 1_800_000_000_000;
    for kind in GateKind::ROUTABLE {
        let calendar = p.calendar();
        out += &format!("{:?}", calendar.state(kind, now));
        for hours in [0, 7, 30, 24 * 200] {
            out += &format!("{}", calendar.open_at(kind, now + hours * 3_600_000));
        }
    }
    out
}

// ---- the web pages ----

/// A `Cookie` header: a session reads only from a cookie gatebot signed; a
/// signed value that reads as a session is sealed again to the same
/// session, a tampered one reads as none, and only its own CSRF token passes.
pub fn session(input: &str) {
    use crate::web::session::{cookie, Session, Signer, SESSION_COOKIE};
    let key = secrecy::SecretString::from("a session key for fuzzing".to_string());
    let signer = Signer::new(Some(&key));
    let now = 1_800_000_000_000;
    let mut headers = axum::http::HeaderMap::new();
    if let Ok(v) = axum::http::HeaderValue::from_str(input) {
        headers.insert(axum::http::header::COOKIE, v);
        if let Some(sealed) = cookie(&headers, SESSION_COOKIE) {
            assert!(Session::from_cookie(&signer, sealed, now).is_none());
        }
    }
    assert_eq!(
        signer.open("signin", &signer.seal("signin", input)),
        Some(input)
    );
    let sealed = signer.seal("session", input);
    let Some(s) = Session::from_cookie(&signer, &sealed, now) else {
        return;
    };
    let again = s.cookie_value(&signer);
    let back = Session::from_cookie(&signer, &again, now).expect("a sealed session reads back");
    assert_eq!(format!("{back:?}"), format!("{s:?}"));
    let tampered = format!("{}0", &again[..again.len() - 1]);
    if tampered != again {
        assert!(Session::from_cookie(&signer, &tampered, now).is_none());
    }
    let csrf = crate::web::actions::check_csrf;
    assert!(csrf(&s, &s.csrf).is_ok() || s.csrf.is_empty());
    assert!(csrf(&s, input).is_err() || input == s.csrf);
}

/// The form bodies and query strings of the web pages, read by axum's
/// extractors as the routes read them; the audit page's search refuses
/// with a 400 or reads its gate and times.
pub fn web_form(body: &[u8]) {
    use crate::web::{actions, pages, setup, signin};
    let _ = form::<actions::ActForm>(body);
    let _ = form::<signin::TokenForm>(body);
    let _ = form::<signin::SignoutForm>(body);
    let query = String::from_utf8_lossy(body);
    let _ = query_of::<signin::Callback>(&query);
    let _ = query_of::<setup::Start>(&query);
    let _ = query_of::<setup::Back>(&query);
    if let Some(q) = query_of::<pages::WaitingQuery>(&query) {
        // Kept: only clusters of the policy's; refused: a 400.
        let envs = environments();
        match pages::waiting_filter(&q, &envs) {
            Ok(filter) => {
                for c in filter.clusters.iter().flatten() {
                    assert!(envs.of_cluster(c).is_some(), "{c} is no cluster");
                }
            }
            Err(problem) => {
                let status = axum::response::IntoResponse::into_response(problem).status();
                assert_eq!(status, axum::http::StatusCode::BAD_REQUEST);
            }
        }
    }
    if let Some(q) = query_of::<pages::AuditQuery>(&query) {
        match pages::audit_search(&q, Some(&default_repo())) {
            Ok(search) if !search.gate.is_empty() => {
                let key = GateKey::parse(&search.gate, None).expect("the search names a gate");
                key_round_trips(&key);
            }
            Ok(_) => {}
            Err(problem) => {
                let status = axum::response::IntoResponse::into_response(problem).status();
                assert_eq!(status, axum::http::StatusCode::BAD_REQUEST);
            }
        }
    }
}

/// docs/environments.md's: staging, then production in two regions.
fn environments() -> crate::gate::environment::Environments {
    use crate::gate::environment::{Environment, Environments};
    let name = |n: &str| n.parse().expect("a cluster name");
    let env = |n: &str, clusters: &[&str], after: Option<&str>, soak: u64| Environment {
        name: name(n),
        clusters: clusters.iter().map(|c| name(c)).collect(),
        after: after.map(name),
        soak: std::time::Duration::from_secs(soak),
    };
    Environments::new(
        vec![
            env("staging", &["staging-eu"], None, 0),
            env("production", &["prod-eu", "prod-us"], Some("staging"), 1800),
        ],
        None,
    )
    .expect("valid environments")
}

fn form<T: serde::de::DeserializeOwned>(body: &[u8]) -> Option<T> {
    use axum::extract::FromRequest;
    let request = axum::http::Request::post("/ui")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(axum::body::Body::from(body.to_vec()))
        .expect("a request");
    let read = axum::Form::<T>::from_request(request, &());
    runtime().block_on(read).ok().map(|axum::Form(t)| t)
}

fn query_of<T: serde::de::DeserializeOwned>(query: &str) -> Option<T> {
    let uri: axum::http::Uri = format!("/ui?{query}").parse().ok()?;
    axum::extract::Query::<T>::try_from_uri(&uri)
        .ok()
        .map(|q| q.0)
}

/// One runtime for the whole run: a body in memory is read at once.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    })
}
