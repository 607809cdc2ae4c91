//! The read-only pages: what waits now, one gate, one pull request, the audit
//! log and the notifications' health. Every list is a page of a bounded size
//! read by an indexed range, so 10,000 gates cost what 10 do.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::view::{self, when, Permits, Viewer, When};
use super::{gate_path, render, Problem};
use crate::core::AppState;
use crate::core::{AuditEntry, AuditSearch, Job, QueueName};
use crate::gate::environment::{Environments, Target};
use crate::gate::{AuditAction, ClusterName, GateKey, Millis, PrNumber, RepoName};

/// Rows per page.
pub const PAGE: usize = 50;

fn page_limit() -> i64 {
    i64::try_from(PAGE + 1).unwrap_or(i64::MAX)
}

/// The waiting page's query: `?env=production` or `?cluster=prod-eu` keeps
/// only the waits of those clusters; `before` is the next page's cursor.
#[derive(Debug, Default, Deserialize)]
pub struct WaitingQuery {
    before: Option<i64>,
    #[serde(default)]
    env: String,
    #[serde(default)]
    cluster: String,
}

/// Which waits the waiting page keeps: all, or those of an environment's
/// clusters, or of one cluster. Every name is one of the policy's.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct WaitingFilter {
    pub env: Option<ClusterName>,
    pub cluster: Option<ClusterName>,
    /// The clusters whose waits are kept; `None`: every wait.
    pub clusters: Option<Vec<ClusterName>>,
}

impl WaitingFilter {
    /// `env=production` (or `cluster=prod-eu`, or both), to carry to the next page.
    fn query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if let Some(env) = &self.env {
            q.append_pair("env", env.as_str());
        }
        if let Some(cluster) = &self.cluster {
            q.append_pair("cluster", cluster.as_str());
        }
        q.finish()
    }

    /// What the page is filtered to, in words ("production", "prod-eu").
    fn scope(&self) -> Option<String> {
        self.cluster
            .as_ref()
            .or(self.env.as_ref())
            .map(ToString::to_string)
    }
}

/// `names` as a list to read: "staging, production".
fn listed<'a>(names: impl Iterator<Item = &'a ClusterName>) -> String {
    names
        .map(ClusterName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// One of the policy's names, or a 400 naming the valid ones. A name that
/// is not a DNS label is not repeated: it may be anything.
fn one_of<'a>(
    field: &str,
    what: &str,
    text: &str,
    valid: impl Iterator<Item = &'a ClusterName>,
) -> Result<ClusterName, Problem> {
    let valid: Vec<&ClusterName> = valid.collect();
    let choices = listed(valid.iter().copied());
    let name: ClusterName = text.parse().map_err(|_| {
        Problem::bad_request(format!(
            "{field}: not a name of the policy (a DNS label: a-z, 0-9 and -); the {what}s are {choices}"
        ))
    })?;
    if !valid.contains(&&name) {
        return Err(Problem::bad_request(format!(
            "{field}: `{name}` is no {what} of the policy ({choices})"
        )));
    }
    Ok(name)
}

/// What the waiting page's query keeps, or a 400 that says which names are.
pub(crate) fn waiting_filter(
    q: &WaitingQuery,
    envs: &Environments,
) -> Result<WaitingFilter, Problem> {
    let (env, cluster) = (q.env.trim(), q.cluster.trim());
    if env.is_empty() && cluster.is_empty() {
        return Ok(WaitingFilter::default());
    }
    if envs.is_empty() {
        return Err(Problem::bad_request(
            "the policy has no [[environments]]: every wait is one for all clusters, so there is nothing to filter by",
        ));
    }
    let env = match env {
        "" => None,
        text => Some(one_of(
            "env",
            "environment",
            text,
            envs.all().iter().map(|e| &e.name),
        )?),
    };
    let cluster = match cluster {
        "" => None,
        text => Some(one_of("cluster", "cluster", text, envs.clusters())?),
    };
    let clusters = match (&env, &cluster) {
        (Some(e), Some(c)) => {
            let of_env = envs.clusters_of(&Target::Environment(e.clone()));
            if !of_env.contains(c) {
                return Err(Problem::bad_request(format!(
                    "cluster: `{c}` is not in {e} ({})",
                    listed(of_env.iter())
                )));
            }
            vec![c.clone()]
        }
        (Some(e), None) => envs.clusters_of(&Target::Environment(e.clone())),
        (None, Some(c)) => vec![c.clone()],
        (None, None) => Vec::new(),
    };
    Ok(WaitingFilter {
        env,
        cluster,
        clusters: Some(clusters),
    })
}

/// The waiting page's links to each environment and cluster (none without
/// environments), the one shown marked.
fn filter_links(envs: &Environments, shown: &WaitingFilter) -> Vec<serde_json::Value> {
    if envs.is_empty() {
        return Vec::new();
    }
    let link = |kind: &str, name: Option<&ClusterName>, current: bool| {
        let query = match name {
            Some(n) => form_urlencoded::Serializer::new(String::new())
                .append_pair(if kind == "env" { "env" } else { "cluster" }, n.as_str())
                .finish(),
            None => String::new(),
        };
        json!({
            "kind": kind, "name": name.map_or("All", ClusterName::as_str),
            "query": query, "current": current,
        })
    };
    let mut links = vec![link("all", None, shown.clusters.is_none())];
    for env in envs.all() {
        let here = shown.env.as_ref() == Some(&env.name) && shown.cluster.is_none();
        links.push(link("env", Some(&env.name), here));
        for c in &env.clusters {
            links.push(link("cluster", Some(c), shown.cluster.as_ref() == Some(c)));
        }
    }
    links
}

pub async fn waiting(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<WaitingQuery>,
) -> Result<Response, Problem> {
    let envs = state.records.environments();
    let filter = waiting_filter(&q, envs)?;
    let clusters = filter.clusters.as_deref();
    let now = state.clock.now_ms();
    let mut waits = state
        .records
        .open_waits_page(clusters, q.before, page_limit())
        .await?;
    let more = waits.len() > PAGE;
    waits.truncate(PAGE);
    let next = if more {
        waits.last().map(|w| w.id)
    } else {
        None
    };
    let total = state.records.open_wait_count_of(clusters).await?;
    let mut permits = Permits::new(&state, &viewer);
    let mut rows = Vec::with_capacity(waits.len());
    for wait in &waits {
        rows.push(view::waiting_row(&state, wait, now, &mut permits).await?);
    }
    let filtered = filter.query();
    let mut here = form_urlencoded::Serializer::new(filtered.clone());
    if let Some(b) = q.before {
        here.append_pair("before", &b.to_string());
    }
    let here = match here.finish() {
        query if query.is_empty() => "/ui".to_string(),
        query => format!("/ui?{query}"),
    };
    render(
        &state,
        "waiting.html.j2",
        json!({
            "base": viewer.base(here), "rows": rows, "total": total, "next": next,
            "paged": q.before.is_some(),
            "filters": filter_links(envs, &filter), "filter": filtered,
            "scope": filter.scope(),
        }),
    )
}

#[derive(Serialize)]
struct AuditRow {
    id: i64,
    at: When,
    gate: String,
    gate_url: String,
    action: &'static str,
    actor: String,
    source: &'static str,
    reason: Option<String>,
    revision: Option<String>,
    canary: Option<String>,
}

fn audit_row(id: i64, e: &AuditEntry, now: Millis) -> AuditRow {
    AuditRow {
        id,
        at: when(e.at, now),
        gate: e.gate.to_string(),
        gate_url: gate_path(&e.gate),
        action: e.action.as_str(),
        actor: e.actor.name.clone(),
        source: e.actor.source.as_str(),
        reason: e.reason.clone(),
        revision: e.revision.clone(),
        canary: e.canary.as_ref().map(ToString::to_string),
    }
}

#[derive(Serialize)]
struct EventView {
    at: When,
    canary: String,
    kind: String,
    phase: String,
    revision: String,
    message: String,
}

/// The Flagger timeline of `canaries`, newest first.
async fn timeline(
    state: &AppState,
    canaries: &[String],
    now: Millis,
) -> Result<Vec<EventView>, Problem> {
    let mut events = Vec::new();
    for c in canaries {
        events.extend(state.records.events(Some(c), 50).await?);
    }
    events.sort_by_key(|e| std::cmp::Reverse(e.received_at));
    events.truncate(100);
    Ok(events
        .into_iter()
        .map(|e| EventView {
            at: when(e.received_at, now),
            canary: e.canary.to_string(),
            kind: e.kind,
            phase: e.phase.to_string(),
            revision: e.checksum,
            message: e.message,
        })
        .collect())
}

/// The waiting canary's charts (`evidence`), with its approvals and weight
/// steps marked: SVG drawn by the server from numbers and gatebot's words.
async fn charts(
    state: &AppState,
    canary: &crate::gate::CanaryRef,
    audit: &[AuditEntry],
    now: Millis,
) -> Result<Vec<String>, Problem> {
    use crate::evidence::chart::{self, Mark, MarkLabel};
    use crate::gate::progress::{step, Step};
    let drawn = state.evidence.charts_of(canary);
    if drawn.is_empty() {
        return Ok(Vec::new());
    }
    let approvals = audit.iter().filter(|e| {
        matches!(
            e.action,
            AuditAction::Open | AuditAction::Approve | AuditAction::Force
        )
    });
    let mut marks: Vec<Mark> = approvals
        .map(|e| Mark {
            at: e.at,
            label: MarkLabel::Approved,
        })
        .collect();
    for e in state.records.events(Some(&canary.to_string()), 50).await? {
        if let Step::Weight(w) = step(&e.message) {
            marks.push(Mark {
                at: e.received_at,
                label: MarkLabel::Weight(w),
            });
        }
    }
    Ok(drawn
        .iter()
        .filter_map(|c| chart::svg(c, &marks, now))
        .collect())
}

pub async fn gate(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(rest): Path<String>,
) -> Result<Response, Problem> {
    show_gate(state, viewer, &format!("/gates/{rest}")).await
}

pub async fn legacy_gate(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(rest): Path<String>,
) -> Result<Response, Problem> {
    show_gate(state, viewer, &format!("/loadtester/{rest}")).await
}

async fn show_gate(state: AppState, viewer: Viewer, path: &str) -> Result<Response, Problem> {
    let key = GateKey::parse(path, state.config.github.repository.as_ref())
        .map_err(|e| Problem::bad_request(format!("no such gate: {e}")))?;
    let now = state.clock.now_ms();
    let detail = state.engine.reads().detail(&key).await?;
    let open_wait = detail.waits.iter().find(|w| w.ended_at.is_none());
    let metadata = open_wait
        .map(|w| w.metadata.clone())
        .or_else(|| detail.observations.first().map(|o| o.metadata.clone()))
        .unwrap_or(serde_json::Value::Null);
    let title = view::title_of(&state, &key, &metadata).await?;
    let progress = match open_wait.and_then(|w| w.canary.as_ref().map(|c| (c, w))) {
        Some((canary, w)) => state
            .records
            .canary_progress(canary)
            .await?
            .filter(|p| p.of_revision(&w.checksum))
            // Escaped by the page's template, as all of its text.
            .map(|p| p.line(str::to_string, |at| format!("{} ago", view::ago(now - at)))),
        None => None,
    };
    let waiting = open_wait.and_then(|w| w.canary.as_ref());
    let evidence = waiting.and_then(|c| state.evidence.line_of(c));
    let charts = match waiting {
        Some(canary) => charts(&state, canary, &detail.audit, now).await?,
        None => Vec::new(),
    };
    let pr = match key.pr() {
        Some((repo, n)) => Some(view::pr_view(&state, repo, n.0).await?),
        None => None,
    };
    let mut permits = Permits::new(&state, &viewer);
    let (state_shown, buttons) = permits.beside(&detail.gate, open_wait, now).await?;
    let audit: Vec<_> = detail
        .audit
        .iter()
        .enumerate()
        .map(|(i, e)| audit_row(i64::try_from(i).unwrap_or(0), e, now))
        .collect();
    let names: Vec<String> = detail
        .observations
        .iter()
        .map(|o| o.canary.to_string())
        .collect();
    let path = path_rows(&state, &key, now).await?;
    let here = gate_path(&key);
    render(
        &state,
        "gate.html.j2",
        json!({
            "base": viewer.base(here),
            "gate": key.to_string(), "kind": key.kind.as_str(), "subject": key.subject(),
            "title": title, "pr": pr,
            "state": state_shown,
            "buttons": buttons,
            "wait": open_wait.map(|w| json!({
                "canary": w.canary.as_ref().map(ToString::to_string), "revision": w.checksum,
                "since": when(w.started_at, now), "progress": progress,
                "evidence": evidence, "charts": charts,
            })),
            "canaries": canary_rows(&detail, now), "waits": wait_rows(&detail, now),
            "path": path, "audit": audit,
            "timeline": timeline(&state, &names, now).await?,
        }),
    )
}

/// The path of a cluster's gate through the environments: a row per
/// environment and cluster, each linking to that cluster's gate of the same
/// kind. Empty without environments, or for a gate of every cluster.
async fn path_rows(
    state: &AppState,
    key: &GateKey,
    now: Millis,
) -> Result<Vec<serde_json::Value>, Problem> {
    let rows = crate::core::path::path_of(&state.records, key, now).await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let url = r
                .cluster
                .parse::<ClusterName>()
                .ok()
                .map(|c| gate_path(&key.clone().at(Some(c))));
            json!({
                "environment": r.environment, "cluster": r.cluster, "url": url,
                "state": r.state, "class": r.state.replace(' ', "-"),
                "here": r.here, "order": r.order,
            })
        })
        .collect())
}

/// The gate's canaries, as the page's table shows them.
fn canary_rows(detail: &crate::core::GateDetail, now: Millis) -> Vec<serde_json::Value> {
    detail
        .observations
        .iter()
        .map(|o| {
            json!({
                "canary": o.canary.to_string(), "revision": o.checksum, "phase": o.phase,
                "answer": o.answer, "reason": o.reason, "last_seen": when(o.last_seen, now),
                "waiting": o.wait_id.is_some(),
            })
        })
        .collect()
}

/// The gate's waits, newest first, as the page's table shows them.
fn wait_rows(detail: &crate::core::GateDetail, now: Millis) -> Vec<serde_json::Value> {
    detail
        .waits
        .iter()
        .map(|w| {
            json!({
                "canary": w.canary.as_ref().map(ToString::to_string), "revision": w.checksum,
                "phase": w.phase, "started": when(w.started_at, now),
                "ended": w.ended_at.map(|t| when(t, now)), "outcome": w.outcome,
            })
        })
        .collect()
}

pub async fn pull_request(
    State(state): State<AppState>,
    viewer: Viewer,
    Path((owner, repo, number)): Path<(String, String, String)>,
) -> Result<Response, Problem> {
    let repo = RepoName::new(&owner, &repo)
        .map_err(|e| Problem::bad_request(format!("no such repository: {e}")))?;
    let number: PrNumber = number
        .parse()
        .map_err(|e| Problem::bad_request(format!("no such pull request: {e}")))?;
    let now = state.clock.now_ms();
    let pr = view::pr_view(&state, &repo, number.0).await?;
    let summaries = state.engine.reads().gates_of_pr(&repo, number).await?;
    let mut permits = Permits::new(&state, &viewer);
    let mut gates = Vec::new();
    let mut audit = Vec::new();
    let mut names = Vec::new();
    // A gate's clusters in the environments' order (staging before production).
    let envs = state.records.environments();
    let mut keyed: Vec<_> = summaries
        .iter()
        .filter_map(|s| Some((GateKey::parse(&s.gate, None).ok()?, s)))
        .collect();
    keyed.sort_by_cached_key(|(key, _)| {
        let place = key
            .cluster
            .as_ref()
            .and_then(|c| envs.clusters().position(|e| e == c));
        (key.clone().at(None).to_string(), place)
    });
    for (key, s) in keyed {
        let gate = state.engine.gate(&key).await?;
        names.extend(s.canaries.iter().map(|c| c.canary.to_string()));
        let waiting = s.canaries.iter().find(|c| c.waiting_since.is_some());
        let cluster = key.cluster.as_ref();
        let environment = cluster.and_then(|c| envs.of_cluster(c));
        gates.push(json!({
            "gate": s.gate, "gate_url": gate_path(&key), "kind": key.kind.as_str(),
            "cluster": cluster.map(ToString::to_string),
            "environment": environment.map(|e| e.name.to_string()),
            "state": view::state_view(&gate, now),
            "wait": waiting.map(|c| json!({
                "canary": c.canary.to_string(), "revision": c.checksum,
                "since": c.waiting_since.map(|t| when(t, now)),
            })),
            "buttons": permits.buttons(&gate).await,
        }));
        audit.extend(state.records.audit_log(Some(&key), 50).await?);
    }
    audit.sort_by_key(|e| std::cmp::Reverse(e.at));
    audit.truncate(100);
    let audit: Vec<_> = audit
        .iter()
        .enumerate()
        .map(|(i, e)| audit_row(i64::try_from(i).unwrap_or(0), e, now))
        .collect();
    names.sort();
    names.dedup();
    render(
        &state,
        "pr.html.j2",
        json!({
            "base": viewer.base(pr.url.clone()), "pr": pr, "gates": gates, "audit": audit,
            "timeline": timeline(&state, &names, now).await?,
        }),
    )
}

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct AuditQuery {
    #[serde(default)]
    actor: String,
    #[serde(default)]
    repo: String,
    #[serde(default)]
    gate: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    before: Option<i64>,
}

/// `2026-12-01`, `2026-12-01T10:00` (UTC) or a full RFC 3339 time.
fn parse_time(field: &str, text: &str) -> Result<Option<Millis>, Problem> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let bad = || {
        Problem::bad_request(format!(
            "{field}: `{text}` is not a time (2026-12-01, 2026-12-01T10:00 in UTC, or RFC 3339)"
        ))
    };
    if let Ok(t) = text.parse::<jiff::Timestamp>() {
        return Ok(Some(t.as_millisecond()));
    }
    let civil = text
        .parse::<jiff::civil::DateTime>()
        .or_else(|_| text.parse::<jiff::civil::Date>().map(|d| d.at(0, 0, 0, 0)))
        .map_err(|_| bad())?;
    let t = jiff::tz::TimeZone::UTC
        .to_timestamp(civil)
        .map_err(|_| bad())?;
    Ok(Some(t.as_millisecond()))
}

/// What the audit page's query asks for, or a 400 naming the field.
pub(crate) fn audit_search(
    q: &AuditQuery,
    default_repo: Option<&RepoName>,
) -> Result<AuditSearch, Problem> {
    let gate = if q.gate.trim().is_empty() {
        String::new()
    } else {
        GateKey::parse(&q.gate, default_repo)
            .map_err(|e| Problem::bad_request(format!("gate: {e}")))?
            .to_string()
    };
    Ok(AuditSearch {
        actor: q.actor.trim().trim_start_matches('@').to_string(),
        repo: q.repo.trim().to_string(),
        gate,
        since: parse_time("since", &q.since)?,
        until: parse_time("until", &q.until)?,
        before: q.before,
    })
}

pub async fn audit(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<AuditQuery>,
) -> Result<Response, Problem> {
    let now = state.clock.now_ms();
    let search = audit_search(&q, state.config.github.repository.as_ref())?;
    let mut found = state.records.search_audit(&search, page_limit()).await?;
    let more = found.len() > PAGE;
    found.truncate(PAGE);
    let rows: Vec<_> = found.iter().map(|(id, e)| audit_row(*id, e, now)).collect();
    let next = if more {
        found.last().map(|(id, _)| {
            let mut s = form_urlencoded::Serializer::new(String::new());
            s.append_pair("actor", &q.actor)
                .append_pair("repo", &q.repo)
                .append_pair("gate", &q.gate)
                .append_pair("since", &q.since)
                .append_pair("until", &q.until)
                .append_pair("before", &id.to_string());
            format!("/ui/audit?{}", s.finish())
        })
    } else {
        None
    };
    render(
        &state,
        "audit.html.j2",
        json!({ "base": viewer.base("/ui/audit"), "q": q, "rows": rows, "next": next }),
    )
}

pub async fn health(State(state): State<AppState>, viewer: Viewer) -> Result<Response, Problem> {
    let now = state.clock.now_ms();
    let job = |j: &Job| {
        json!({
            "sink": j.sink, "topic": j.topic, "state": j.state, "attempts": j.attempts,
            "created": when(j.created_at, now), "next": when(j.next_attempt_at, now),
            "overdue": j.next_attempt_at <= now, "error": j.last_error,
        })
    };
    let queued: Vec<_> = state
        .records
        .jobs(Some("pending"), i64::try_from(PAGE).unwrap_or(50))
        .await?
        .iter()
        .map(job)
        .collect();
    let failed: Vec<_> = state
        .records
        .jobs(Some("failed"), i64::try_from(PAGE).unwrap_or(50))
        .await?
        .iter()
        .map(job)
        .collect();
    let pending = state.records.pending(QueueName::Outbox).await?;
    let inbox = state.records.pending(QueueName::Inbox).await?;
    render(
        &state,
        "health.html.j2",
        json!({
            "base": viewer.base("/ui/health"), "queued": queued, "failed": failed,
            "pending": pending, "inbox": inbox,
        }),
    )
}
