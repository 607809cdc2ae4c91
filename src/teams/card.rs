//! The Adaptive Card of a waiting gate (pure: what it shows comes in a
//! `CardView`). Everything Flagger, a pipeline or a person wrote is escaped:
//! a TextBlock reads Markdown and `{{DATE(…)}}`, and neither may come from them.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::activity::CardData;
use crate::gate::reason::MAX_REASON;
use crate::gate::{GateKey, GateKind, Millis, RepoName};

/// The card's reason field, sent as the button data's `reason`.
pub const REASON: &str = "reason";

/// The verbs of the card's buttons, as the invoke names them.
pub const APPROVE: &str = "approve";
pub const REJECT: &str = "reject";
pub const HOLD: &str = "hold";

/// Longest text kept from one field; the rest is cut.
const FIELD_MAX: usize = 300;

/// Everything a card shows.
#[derive(Debug, Clone, PartialEq)]
pub struct CardView {
    pub wait_id: i64,
    pub gate: GateKey,
    /// `namespace/name`; None: a named gate announced before any canary asks.
    pub canary: Option<String>,
    pub checksum: String,
    /// Flagger's phase when the wait started.
    pub phase: String,
    pub metadata: BTreeMap<String, String>,
    pub since: Millis,
    pub now: Millis,
    /// How things stand, when not simply waiting ("Approved by …").
    pub status: Option<Status>,
    /// At a gate that needs several people: who approved so far.
    pub approvals: Option<String>,
    /// Whether the buttons are still offered.
    pub open: bool,
    /// The canary's progress as its events tell it, one line with Flagger's
    /// words already escaped (`progress_line`).
    pub progress: Option<String>,
    /// The canary's numbers against its primary's (`evidence`), while it waits.
    pub evidence: Option<String>,
    /// With environments: every cluster's gate of the same kind and PR.
    pub path: Vec<crate::core::path::PathRow>,
}

/// The progress line of a card: Flagger's message escaped, the time in UTC.
pub fn progress_line(p: &crate::gate::progress::CanaryProgress) -> String {
    p.line(escape, |at| format!("at {} UTC", hhmm(at)))
}

/// A line under the facts, coloured as Adaptive Cards colour text.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub text: String,
    /// `good`, `attention` or `warning`.
    pub color: &'static str,
}

/// Where links point.
#[derive(Debug, Clone, Default)]
pub struct Links {
    /// GATEBOT_PUBLIC_URL, without a trailing slash.
    pub public_url: Option<String>,
    pub default_repo: Option<RepoName>,
}

/// What the card offers: buttons (the bot) or a link to the page (Workflows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    Buttons,
    PageLink,
}

/// The card as JSON (Adaptive Cards 1.4, the version Teams renders with
/// `Action.Execute`).
pub fn render(view: &CardView, links: &Links, offer: Offer) -> Value {
    let mut body = vec![json!({
        "type": "TextBlock", "size": "Medium", "weight": "Bolder", "wrap": true,
        "text": headline(view),
    })];
    body.push(json!({"type": "FactSet", "facts": facts(view, links)}));
    if let Some(approvals) = &view.approvals {
        body.push(text_block(
            &format!("Approvals: {}", escape(approvals)),
            None,
        ));
    }
    if let Some(progress) = &view.progress {
        body.push(text_block(progress, None));
    }
    if let Some(evidence) = &view.evidence {
        body.push(text_block(&escape(evidence), None));
    }
    if !view.path.is_empty() {
        body.push(path_facts(&view.path));
    }
    if let Some(status) = &view.status {
        body.push(text_block(&escape(&status.text), Some(status.color)));
    }
    let mut actions = Vec::new();
    if view.open && offer == Offer::Buttons {
        // Teams sends what is typed here with the button pressed (`data.reason`).
        body.push(json!({
            "type": "Input.Text", "id": REASON, "label": "Reason",
            "placeholder": "Why (the policy may ask for one)", "maxLength": MAX_REASON,
        }));
        actions.extend(buttons(view));
    }
    if let Some(url) = page_url(view, links) {
        actions.push(json!({"type": "Action.OpenUrl", "title": "Open in gatebot", "url": url}));
    }
    json!({
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
        "actions": actions,
    })
}

/// The path, one fact per cluster: "production · prod-eu": "waiting (this card)".
fn path_facts(path: &[crate::core::path::PathRow]) -> Value {
    let facts: Vec<Value> = path
        .iter()
        .map(|p| {
            let here = if p.here { " (this card)" } else { "" };
            // gatebot's own words: names the policy checked, a hex commit, a time.
            let order = p.order.as_deref().map(|o| format!(" · {o}"));
            json!({
                "title": format!("{} · {}", p.environment, p.cluster),
                "value": format!("{}{here}{}", p.state, order.unwrap_or_default()),
            })
        })
        .collect();
    json!({"type": "FactSet", "facts": facts})
}

/// A failure of Flagger's outside the analysis, as Flagger said it.
#[derive(Debug, Clone, Copy)]
pub struct Failure<'a> {
    pub canary: &'a str,
    pub checksum: &'a str,
    pub what: &'a str,
    pub message: &'a str,
    pub next: &'a str,
}

/// The card that tells a failure; Flagger's words escaped like every field.
pub fn failure(f: &Failure<'_>) -> Value {
    let headline = format!("{}: {}", escape(f.canary), escape(f.what));
    json!({
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": [
            {"type": "TextBlock", "size": "Medium", "weight": "Bolder", "wrap": true,
             "color": "attention", "text": headline},
            {"type": "FactSet", "facts": [{"title": "Revision", "value": escape(f.checksum)}]},
            text_block(&format!("Flagger said: {}", escape(f.message)), None),
            text_block(&format!("Next: {}.", escape(f.next)), None),
        ],
    })
}

fn headline(view: &CardView) -> String {
    let kind = kind_word(&view.gate);
    match (&view.canary, view.metadata.get("title")) {
        (Some(canary), _) => format!("{} is waiting at the {kind} gate", escape(canary)),
        (None, Some(title)) => format!("{} waits for approval at the {kind} gate", escape(title)),
        (None, None) => format!(
            "{} waits for approval at the {kind} gate",
            escape(&view.gate.subject())
        ),
    }
}

fn kind_word(key: &GateKey) -> &'static str {
    match key.kind {
        GateKind::LegacyGate => "loadtester",
        other => other.as_str(),
    }
}

fn facts(view: &CardView, links: &Links) -> Vec<Value> {
    let fact = |title: &str, value: String| json!({"title": title, "value": value});
    let mut facts = Vec::new();
    if let Some((namespace, name)) = view.canary.as_deref().and_then(|c| c.split_once('/')) {
        facts.push(fact("Canary", escape(name)));
        facts.push(fact("Namespace", escape(namespace)));
        facts.push(fact("Revision", escape(&view.checksum)));
    }
    if let Some((subject, url)) = pr_link(view, links) {
        facts.push(fact(
            "Pull request",
            format!("[{}]({url})", escape(&subject)),
        ));
    }
    facts.push(fact("Gate", escape(&view.gate.to_string())));
    facts.push(fact(
        "Waiting",
        format!(
            "since {} UTC ({})",
            hhmm(view.since),
            waited(view.now - view.since)
        ),
    ));
    facts
}

fn buttons(view: &CardView) -> Vec<Value> {
    let data = CardData {
        wait_id: view.wait_id,
        gate: view.gate.to_string(),
        reason: None,
    };
    let rolls_back =
        crate::core::commands::rollback_of(&view.gate, &crate::gate::Phase::parse(&view.phase))
            .is_some();
    let reject = if rolls_back {
        "Reject (roll back)"
    } else {
        "Reject"
    };
    [
        (APPROVE, "Approve", "positive"),
        (REJECT, reject, "destructive"),
        (HOLD, "Hold", "default"),
    ]
    .into_iter()
    .map(|(verb, title, style)| {
        json!({"type": "Action.Execute", "verb": verb, "title": title, "style": style, "data": data})
    })
    .collect()
}

/// The gate's page, when GATEBOT_PUBLIC_URL says where the pages are.
fn page_url(view: &CardView, links: &Links) -> Option<String> {
    let base = links.public_url.as_deref()?;
    Some(format!("{base}/ui{}", view.gate))
}

/// The pull request the gate (or the canary's metadata) names: its name and
/// GitHub link, both made of parsed values only.
fn pr_link(view: &CardView, links: &Links) -> Option<(String, String)> {
    let (repo, n) = match view.gate.pr() {
        Some((repo, n)) => (repo.clone(), n.0),
        None => {
            let n: u64 = view
                .metadata
                .get("pr")?
                .trim()
                .trim_start_matches('#')
                .parse()
                .ok()?;
            let repo: RepoName = match view.metadata.get("repository") {
                Some(r) => r.parse().ok()?,
                None => links.default_repo.clone()?,
            };
            (repo, n)
        }
    };
    Some((
        format!("{repo}#{n}"),
        format!("https://github.com/{repo}/pull/{n}"),
    ))
}

fn text_block(text: &str, color: Option<&str>) -> Value {
    let mut block = json!({"type": "TextBlock", "wrap": true, "text": text});
    if let Some(color) = color {
        block["color"] = json!(color);
    }
    block
}

/// `14:02` (UTC).
pub fn hhmm(ms: Millis) -> String {
    let secs = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}", secs / 3600, (secs / 60) % 60)
}

/// `3 min`, `2 h 5 min`, `1 d 3 h`.
fn waited(ms: Millis) -> String {
    let mins = ms.max(0) / 60_000;
    match mins {
        m if m < 60 => format!("{m} min"),
        m if m < 24 * 60 => format!("{} h {} min", m / 60, m % 60),
        m => format!("{} d {} h", m / (24 * 60), (m / 60) % 24),
    }
}

/// Text as a TextBlock shows it literally: one line, at most `FIELD_MAX`
/// characters, every ASCII punctuation mark backslash-escaped (CommonMark
/// lets any be), and `{{` broken so no date function is read from it.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars().take(FIELD_MAX) {
        match c {
            c if c.is_control() => out.push(' '),
            '{' => out.push_str("{\u{200B}"),
            c if c.is_ascii_punctuation() && c != '/' && c != ':' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{escape, render, waited, CardView, Links, Offer};
    use crate::core::path::PathRow;

    #[test]
    fn a_card_shows_the_path_one_fact_per_cluster() {
        let row = |environment: &str, cluster: &str, state, here, order: Option<&str>| PathRow {
            environment: environment.into(),
            cluster: cluster.into(),
            state,
            here,
            order: order.map(Into::into),
        };
        let view = CardView {
            wait_id: 1,
            gate: crate::gate::GateKey::parse("/gates/promote/acme/shop/pr/42@prod-eu", None).unwrap(),
            canary: Some("test/podinfo".into()),
            checksum: "rev-e1".into(),
            phase: "WaitingPromotion".into(),
            metadata: Default::default(),
            since: 0,
            now: 0,
            status: None,
            approvals: None,
            open: true,
            progress: None,
            evidence: None,
            path: vec![
                row("staging", "staging-eu", "open", false, None),
                row("production", "prod-eu", "waiting", true, Some("waiting: staging promoted 85d557f 5 min ago; production may go at 2024-05-01T14:32:00Z (soak 30 min)")),
                row("production", "prod-us", "not started", false, None),
            ],
        };
        let card = render(&view, &Links::default(), Offer::Buttons);
        let facts = card["body"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|b| b["type"] == "FactSet")
            .unwrap()["facts"]
            .clone();
        assert_eq!(
            facts,
            serde_json::json!([
                {"title": "staging · staging-eu", "value": "open"},
                {"title": "production · prod-eu", "value": "waiting (this card) · waiting: staging promoted 85d557f 5 min ago; production may go at 2024-05-01T14:32:00Z (soak 30 min)"},
                {"title": "production · prod-us", "value": "not started"},
            ])
        );
    }

    #[test]
    fn markup_is_escaped() {
        assert_eq!(escape("**x** [a](b)"), "\\*\\*x\\*\\* \\[a\\]\\(b\\)");
        assert_eq!(escape("{{DATE(x)}}"), "{\u{200B}{\u{200B}DATE\\(x\\)\\}\\}");
        assert_eq!(escape("a\nb"), "a b");
        assert_eq!(escape("test/podinfo"), "test/podinfo");
        assert_eq!(escape(&"x".repeat(1000)).len(), 300);
    }

    #[test]
    fn waits_read_as_people_say_them() {
        assert_eq!(waited(59_000), "0 min");
        assert_eq!(waited(125 * 60_000), "2 h 5 min");
        assert_eq!(waited(27 * 3_600_000), "1 d 3 h");
    }
}
