//! Block Kit messages (our own serde types); the words come from templates.

use serde::Serialize;
use serde_json::{json, Value};

use super::payload::{ButtonValue, APPROVE, REJECT};
use super::record::{Decision, View};
use crate::gate::reason::MAX_REASON;
use crate::gate::{GateKey, GateKind, Millis, RepoName};
use crate::templates::escape::{self, mrkdwn};
use crate::templates::Templates;

/// A Block Kit block, as much of it as gatebot sends.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Section {
        text: Text,
    },
    Actions {
        block_id: String,
        elements: Vec<Button>,
    },
    Context {
        elements: Vec<Text>,
    },
}

/// A Block Kit text object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum Text {
    #[serde(rename = "plain_text")]
    Plain { text: String },
    #[serde(rename = "mrkdwn")]
    Markdown { text: String },
}

impl Text {
    fn plain(text: impl Into<String>) -> Self {
        Self::Plain { text: text.into() }
    }

    fn markdown(text: impl Into<String>) -> Self {
        Self::Markdown { text: text.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename = "button")]
pub struct Button {
    action_id: String,
    text: Text,
    value: String,
    /// `primary` or `danger`.
    style: &'static str,
    confirm: Confirm,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
struct Confirm {
    title: Text,
    text: Text,
    confirm: Text,
    deny: Text,
}

/// `14:02` (UTC) for texts; Slack's `<!date>` shows local time where it can.
pub fn hhmm(ms: Millis) -> String {
    let secs = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}", secs / 3600, (secs / 60) % 60)
}

#[derive(Serialize)]
struct DecisionCtx {
    approved: bool,
    by: String,
    name: String,
    via: String,
    at: Millis,
    at_hhmm: String,
    reason: Option<String>,
    rollback_gate: Option<String>,
}

impl From<&Decision> for DecisionCtx {
    fn from(d: &Decision) -> Self {
        Self {
            approved: d.approved,
            by: d.by(),
            name: d.name.clone(),
            via: d.via.clone(),
            at: d.at,
            at_hhmm: hhmm(d.at),
            // A person's words: no mention, link or markup forms in them.
            reason: d.reason.as_deref().map(|r| mrkdwn(r, MAX_REASON)),
            rollback_gate: d
                .rollback_gate
                .as_deref()
                .map(|g| mrkdwn(g, escape::METADATA)),
        }
    }
}

#[derive(Serialize)]
struct WaitCtx {
    canary: String,
    gate: String,
    kind: String,
    hook: String,
    subject: String,
    pr_url: Option<String>,
    revision: String,
    phase: String,
    since: Millis,
    since_secs: i64,
    since_hhmm: String,
    decision: Option<DecisionCtx>,
    /// A named gate's title and links (from the pipeline that created it).
    title: Option<String>,
    links: Vec<crate::store::Link>,
    /// At a namespace gate: every canary waiting there.
    waiting: Vec<String>,
    /// At a gate that needs several people: "1 of 2 approvals: @alice".
    approvals: Option<String>,
    /// `weight 30 % · … · last: "…" <ago>`, Flagger's words escaped.
    progress: Option<String>,
    /// The canary's numbers: gatebot's words, the policy's names.
    evidence: Option<String>,
    /// With environments: a row per cluster (gatebot's own words).
    path: Vec<crate::core::path::PathRow>,
    ended: Option<serde_json::Value>,
    #[serde(rename = "final")]
    final_state: Option<serde_json::Value>,
}

/// The PR a gate (or the canary's metadata) names, with its GitHub link.
pub fn pr_link(
    key: Option<&GateKey>,
    metadata: &std::collections::BTreeMap<String, String>,
    default_repo: Option<&RepoName>,
) -> Option<(String, String)> {
    if let Some((repo, n)) = key.and_then(GateKey::pr) {
        return Some((
            format!("{repo}#{n}"),
            format!("https://github.com/{repo}/pull/{n}"),
        ));
    }
    let n: u64 = metadata
        .get("pr")?
        .trim()
        .trim_start_matches('#')
        .parse()
        .ok()?;
    let repo: RepoName = match metadata.get("repository").or_else(|| metadata.get("repo")) {
        Some(r) => r.parse().ok()?,
        None => default_repo?.clone(),
    };
    Some((
        format!("{repo}#{n}"),
        format!("https://github.com/{repo}/pull/{n}"),
    ))
}

/// A named gate's links, which gatebot itself wrote into the announcement.
fn links_of(metadata: &std::collections::BTreeMap<String, String>) -> Vec<crate::store::Link> {
    let Some(text) = metadata.get("links") else {
        return Vec::new();
    };
    match serde_json::from_str(text) {
        Ok(links) => links,
        Err(e) => {
            tracing::warn!(error = %e, "links of a named gate are unreadable: shown without them");
            Vec::new()
        }
    }
}

fn context(view: &View, default_repo: Option<&RepoName>) -> WaitCtx {
    let info = &view.info;
    let key = &info.gate;
    let link = pr_link(Some(key), &info.metadata, default_repo);
    // Everything from Flagger's side is escaped here, so a custom template gets it safe.
    let subject = match &link {
        Some((s, _)) => s.clone(),
        None => mrkdwn(&key.subject(), escape::METADATA),
    };
    WaitCtx {
        canary: info
            .canary
            .as_ref()
            .map_or_else(String::new, |c| mrkdwn(&c.to_string(), escape::METADATA)),
        gate: mrkdwn(&key.to_string(), escape::METADATA),
        kind: match key.kind {
            GateKind::LegacyGate => "loadtester",
            other => other.as_str(),
        }
        .to_string(),
        hook: key.kind.flagger_hook().to_string(),
        subject,
        pr_url: link.map(|(_, url)| url),
        revision: mrkdwn(&info.checksum, escape::CHECKSUM),
        phase: mrkdwn(&info.phase, escape::WORD),
        since: info.since,
        since_secs: info.since.div_euclid(1000),
        since_hhmm: hhmm(info.since),
        decision: view.decision.as_ref().map(DecisionCtx::from),
        title: info
            .metadata
            .get("title")
            .map(|t| mrkdwn(t, escape::METADATA)),
        links: links_of(&info.metadata),
        waiting: view
            .waiting
            .iter()
            .map(|c| mrkdwn(c, escape::METADATA))
            .collect(),
        approvals: view.approvals.clone(),
        progress: view.progress.as_ref().map(|p| {
            p.line(
                |m| mrkdwn(m, escape::MESSAGE),
                |at| format!("<!date^{}^{{ago}}|at {} UTC>", at.div_euclid(1000), hhmm(at)),
            )
        }),
        evidence: view.evidence.as_ref().map(|e| mrkdwn(e, escape::MESSAGE)),
        path: view.path.clone(),
        ended: view.ended.as_ref().map(|e| {
            serde_json::json!({"outcome": e.outcome, "at": e.at, "at_hhmm": hhmm(e.at)})
        }),
        final_state: view.final_state.as_ref().map(|f| {
            serde_json::json!({"kind": mrkdwn(&f.kind, escape::WORD), "message": mrkdwn(&f.message, escape::MESSAGE), "at": f.at, "at_hhmm": hhmm(f.at)})
        }),
    }
}

fn section(text: String) -> Block {
    Block::Section {
        text: Text::markdown(text),
    }
}

fn button(
    id: &str,
    label: &str,
    style: &'static str,
    value: &str,
    confirm: (&str, String, &str),
) -> Button {
    let (title, text, ok) = confirm;
    Button {
        action_id: id.into(),
        text: Text::plain(label),
        value: value.to_string(),
        style,
        confirm: Confirm {
            title: Text::plain(title),
            text: Text::markdown(text),
            confirm: Text::plain(ok),
            deny: Text::plain("Cancel"),
        },
    }
}

/// The full block list of a waiting message, and its notification text.
pub fn wait_message(
    templates: &Templates,
    view: &View,
    default_repo: Option<&RepoName>,
) -> anyhow::Result<(String, Vec<Block>)> {
    let ctx = context(view, default_repo);
    let main = templates.render("slack/wait.j2", &ctx)?.trim().to_string();
    let fallback = match &ctx.title {
        _ if !ctx.canary.is_empty() => format!("{} is waiting at {}", ctx.canary, ctx.gate),
        Some(title) => format!("{title} waits for approval at {}", ctx.gate),
        None => format!("{} waits for approval", ctx.gate),
    };
    let mut blocks = vec![section(main)];
    if view.open() {
        let value = serde_json::to_string(&ButtonValue {
            gate: view.info.gate.to_string(),
            wait_id: view.info.wait_id,
        })?;
        // As the click will do it: a Reject that opens a rollback gate says so.
        let rolls_back = crate::core::commands::rollback_of(
            &view.info.gate,
            &crate::gate::Phase::parse(&view.info.phase),
        )
        .is_some();
        let reject_means = if rolls_back {
            "roll the canary back"
        } else {
            "keep the gate closed"
        };
        blocks.push(Block::Actions {
            block_id: format!("gatebot-wait-{}", view.info.wait_id),
            elements: vec![
                button(
                    APPROVE,
                    "Approve",
                    "primary",
                    &value,
                    (
                        "Approve?",
                        format!("Open `{}` for revision `{}`?", ctx.gate, ctx.revision),
                        "Approve",
                    ),
                ),
                button(
                    REJECT,
                    "Reject",
                    "danger",
                    &value,
                    (
                        "Reject?",
                        format!("Reject revision `{}`: {reject_means}?", ctx.revision),
                        "Reject",
                    ),
                ),
            ],
        });
    } else {
        let status = templates
            .render("slack/status.j2", &ctx)?
            .trim()
            .to_string();
        if !status.is_empty() {
            blocks.push(Block::Context {
                elements: vec![Text::markdown(status)],
            });
        }
    }
    Ok((fallback, blocks))
}

/// The modal that asks why, for a click the policy's `[[reasons]]` want a
/// reason for (`why` is the core's refusal, in gatebot's words): submitted,
/// it comes back as that click with the reason typed. `origin` is the
/// button's own (`ModalOrigin`), so the click it answers is the one pressed.
pub fn reason_modal(approve: bool, why: &str, origin: &str) -> Value {
    use super::payload::{REASON_INPUT, REASON_MODAL};
    let verb = if approve { "Approve" } else { "Reject" };
    json!({
        "type": "modal",
        "callback_id": REASON_MODAL,
        "private_metadata": origin,
        "title": {"type": "plain_text", "text": "Why?"},
        "submit": {"type": "plain_text", "text": verb},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            // gatebot's words, from the policy's names: its code span stays one.
            {"type": "section", "text": {"type": "mrkdwn", "text": escape::entities(why)}},
            {
                "type": "input",
                "block_id": REASON_INPUT,
                "label": {"type": "plain_text", "text": "Reason"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON_INPUT,
                    "multiline": true,
                    "min_length": 1,
                    "max_length": crate::gate::reason::MAX_REASON,
                },
            },
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slack::record::WaitInfo;

    fn view() -> View {
        View {
            waiting: Vec::new(),
            path: Vec::new(),
            info: WaitInfo {
                wait_id: 7,
                gate: GateKey::parse("/gates/promote/acme/shop/pr/42", None).unwrap(),
                canary: Some("test/podinfo".parse().unwrap()),
                checksum: "85d557f47b".into(),
                phase: "Progressing".into(),
                metadata: Default::default(),
                since: 1_714_572_120_000,
            },
            decision: None,
            ended: None,
            final_state: None,
            progress: None,
            evidence: None,
            approvals: None,
        }
    }

    #[test]
    fn waiting_message_has_both_buttons_then_none() {
        let t = Templates::new(None).unwrap();
        let (_, blocks) = wait_message(&t, &view(), None).unwrap();
        let json = serde_json::to_string(&blocks).unwrap();
        assert!(json.contains("gatebot_approve") && json.contains("gatebot_reject"));
        assert!(json.contains("\"style\":\"primary\"") && json.contains("\"style\":\"danger\""));
        assert!(json.contains("https://github.com/acme/shop/pull/42"));
        // The shape Slack expects, field for field.
        let actions = serde_json::to_value(&blocks[1]).unwrap();
        assert_eq!(actions["type"], "actions");
        assert_eq!(actions["block_id"], "gatebot-wait-7");
        let approve = &actions["elements"][0];
        assert_eq!(
            approve["confirm"]["deny"],
            serde_json::json!({"type": "plain_text", "text": "Cancel"})
        );
        assert_eq!(approve["type"], "button");
        assert_eq!(approve["text"]["type"], "plain_text");
        assert_eq!(approve["confirm"]["text"]["type"], "mrkdwn");
        assert!(json.starts_with(r#"[{"type":"section","text":{"type":"mrkdwn","text":"#));
        let mut decided = view();
        decided.decision = Some(Decision {
            approved: true,
            user_id: Some("U1".into()),
            name: "alice".into(),
            via: "slack".into(),
            at: 1_714_572_120_000,
            reason: None,
            rollback_gate: None,
        });
        let (_, blocks) = wait_message(&t, &decided, None).unwrap();
        let json = serde_json::to_string(&blocks).unwrap();
        assert!(!json.contains("gatebot_approve"), "{json}");
        assert!(
            json.contains("Approved by <@U1> at 14:02 (revision 85d557f47b)"),
            "{json}"
        );
    }
}
