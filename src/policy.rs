//! Who may do what: the defaults from the environment, refined by an optional
//! policy file (`GATEBOT_POLICY`, TOML). Pure data and decisions, no I/O but
//! reading the file.
//!
//! ```toml
//! [github]
//! min_permission = "write"          # every command, unless a command says otherwise
//! forbid_self_approval = true        # the PR's author may not /promote (four eyes)
//!
//! approving_review = "promote"       # an approving review counts as /promote (default "off")
//!
//! [github.commands.promote]
//! min_permission = "maintain"
//! teams = ["acme/release-managers"]  # org/team; membership in any one suffices
//!
//! [slack]
//! approvers = ["U012AB3CD", "S0614TZR7"]
//! forbid_self_approval = true        # by the [users] mapping below
//!
//! [slack.commands.rollback]
//! approvers = ["S0ONCALL1"]
//!
//! [teams]                            # Entra object ids, as [slack] (default
//! approvers = ["6e1f…"]              # nobody); per command too
//!
//! [users]                            # GitHub login = Slack user id, or both chats
//! alice = "U012AB3CD"
//! bob = { slack = "U0B0B", teams = "5a7c…" }
//!
//! [[approvals]]                      # N-of-M: distinct people a gate needs
//! kind = "promote"
//! required = 2                       # optional: repository or namespace
//!
//! [github.commands.force]            # break glass: `/promote --force <reason>`
//! teams = ["acme/sre"]
//!
//! [[deadlines]]                      # how long a canary may wait for people
//! kind = "promote"
//! after = "2h"
//! on_deadline = "rollback"           # rollback | close | nothing
//! namespace = "prod"                 # optional: repository, namespace or canary
//!
//! [deadline_metadata]                # believe `deadline` in the hook metadata of
//! allow = true                       # checks without a Flagger token (default false)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;

use crate::command::{Rule, Verb};
use crate::config::{sections, Config, Limits, Permission, Sections};
use crate::gate::deadline::{Deadline, DeadlineRule, OnDeadline};
use crate::gate::environment::{Environment, Environments};
use crate::gate::reason::{ReasonKind, ReasonRule};
use crate::gate::ticket::{ChangeRule, Fields, Mode, Provider};
use crate::gate::window::{Calendar, Window};
use crate::gate::{
    CanaryRef, ClusterName, GateKey, GateKind, Group, Include, Namespace, QuorumRule, RepoName,
    Scope,
};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    github: GithubSection,
    #[serde(default)]
    slack: ChatSection,
    #[serde(default)]
    teams: ChatSection,
    #[serde(default)]
    users: BTreeMap<String, UserIds>,
    /// `[change]`: gates tied to change requests.
    change: Option<toml::Spanned<ChangeEntry>>,
    /// `[groups]`: named lists of GitHub logins, for `[[approvals]] include`.
    #[serde(default)]
    groups: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    deadlines: Vec<toml::Spanned<DeadlineEntry>>,
    #[serde(default)]
    reminders: RemindersEntry,
    #[serde(default)]
    evidence: EvidenceRules,
    /// `[deadline_metadata]`: TOML can't have a `[deadlines]` table beside
    /// the `[[deadlines]]` array, so it has a name of its own.
    #[serde(default)]
    deadline_metadata: DeadlineMetadataEntry,
    #[serde(default)]
    windows: Vec<toml::Spanned<WindowEntry>>,
    #[serde(default)]
    approvals: Vec<toml::Spanned<ApprovalsEntry>>,
    #[serde(default)]
    reasons: Vec<toml::Spanned<ReasonsEntry>>,
    /// Dates (`2026-12-24`) on which no release window opens.
    #[serde(default)]
    holidays: Vec<toml::Spanned<String>>,
    /// `[[environments]]`: ordered groups of clusters.
    #[serde(default)]
    environments: Vec<toml::Spanned<EnvironmentsEntry>>,
    /// The cluster of a check that no Flagger token and no metadata names.
    default_cluster: Option<String>,
    /// `[limits]`: tuning knobs; absent, the defaults (or what a test set) stay.
    limits: Option<Limits>,
    loadtester: Option<sections::Loadtester>,
    templates: Option<sections::Templates>,
    kubernetes: Option<sections::Kubernetes>,
    ui: Option<sections::Ui>,
    /// Where each line of the text starts (for errors that name a line).
    #[serde(skip)]
    line_starts: Vec<usize>,
}

/// Whether a deadline in the hook metadata of a check that carries no Flagger
/// token is believed. Off: anyone who reaches the port could pose as a canary
/// and set a deadline that rolls it back.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadlineMetadataEntry {
    #[serde(default)]
    allow: bool,
}

/// One `[[windows]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowEntry {
    kind: String,
    days: Option<Vec<String>>,
    from: String,
    to: String,
    timezone: Option<String>,
}

/// Reads the `[[windows]]` tables and `holidays`, saying which entry is wrong.
fn calendar(file: &File) -> anyhow::Result<Calendar> {
    const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    let mut windows = Vec::new();
    for (n, w) in file.windows.iter().enumerate() {
        let at = format!("windows[{n}] (line {})", file.line_of(w.span()));
        let w = w.get_ref();
        let kind = match GateKind::from_route(&w.kind) {
            Some(k) if !k.is_rollback() => k,
            _ => anyhow::bail!(
                "{at}: kind `{}`: write start, promote or traffic (a rollback is never held back)",
                w.kind
            ),
        };
        let mut days = [true; 7];
        if let Some(list) = &w.days {
            days = [false; 7];
            for d in list {
                let i = DAYS
                    .iter()
                    .position(|x| x.eq_ignore_ascii_case(d.get(..3).unwrap_or(d)))
                    .ok_or_else(|| anyhow::anyhow!("{at}: day `{d}`: write mon, tue, … sun"))?;
                days[i] = true;
            }
        }
        let time = |t: &str, field: &str| -> anyhow::Result<jiff::civil::Time> {
            t.parse()
                .with_context(|| format!("{at}: {field} `{t}`: write e.g. \"08:00\""))
        };
        let (from, to) = (time(&w.from, "from")?, time(&w.to, "to")?);
        if from >= to {
            anyhow::bail!("{at}: from {} is not before to {}", w.from, w.to);
        }
        let tz_name = w.timezone.clone().unwrap_or_else(|| "UTC".into());
        let tz = jiff::tz::TimeZone::get(&tz_name).with_context(|| {
            format!("{at}: timezone `{tz_name}`: write an IANA name such as \"Europe/Berlin\"")
        })?;
        windows.push(Window {
            kind,
            days,
            from,
            to,
            tz,
            tz_name,
        });
    }
    let holidays = file
        .holidays
        .iter()
        .enumerate()
        .map(|(n, d)| {
            let line = file.line_of(d.span());
            let d = d.get_ref();
            d.parse().with_context(|| {
                format!("holidays[{n}] (line {line}): `{d}`: write e.g. \"2026-12-24\"")
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Calendar { windows, holidays })
}

/// `[evidence]`: the numbers shown beside the buttons (docs/evidence.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceRules {
    /// Flagger's provider for canaries whose hook metadata names none.
    #[serde(default)]
    pub provider: Option<String>,
    /// The query window for canaries whose hook metadata names none.
    #[serde(default)]
    pub interval: Option<String>,
    /// `[[evidence.queries]]`: queries of the policy's own.
    #[serde(default)]
    pub queries: Vec<EvidenceQuery>,
}

/// One `[[evidence.queries]]`: a PromQL template with Flagger's variables.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceQuery {
    pub name: String,
    pub query: String,
    #[serde(default)]
    pub unit: String,
}

/// `[reminders]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RemindersEntry {
    #[serde(default)]
    at: Vec<toml::Spanned<String>>,
    kinds: Option<Vec<toml::Spanned<String>>>,
}

/// When people are reminded of a wait, and at which kinds of gate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reminders {
    /// Ascending; empty: no reminders.
    pub at: Vec<std::time::Duration>,
    pub kinds: Vec<GateKind>,
}

impl RemindersEntry {
    fn read(&self, file: &File) -> anyhow::Result<Reminders> {
        let mut at = Vec::with_capacity(self.at.len());
        for (n, text) in self.at.iter().enumerate() {
            let line = file.line_of(text.span());
            let text = text.get_ref();
            at.push(humantime::parse_duration(text).with_context(|| {
                format!(
                    "reminders.at[{n}] (line {line}): `{text}`: write e.g. \"30m\", \"2h\", \"8h\""
                )
            })?);
        }
        at.sort();
        at.dedup();
        let kinds = match &self.kinds {
            None => vec![GateKind::Start, GateKind::Promote, GateKind::Traffic],
            Some(kinds) => kinds
                .iter()
                .map(|k| match GateKind::from_route(k.get_ref()) {
                    Some(kind) if kind.has_waits() => Ok(kind),
                    _ => Err(anyhow::anyhow!(
                        "reminders.kinds (line {}): `{}`: write start, promote or traffic",
                        file.line_of(k.span()),
                        k.get_ref()
                    )),
                })
                .collect::<anyhow::Result<_>>()?,
        };
        Ok(Reminders { at, kinds })
    }
}

/// One `[[approvals]]` table: how many people a kind of gate needs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalsEntry {
    kind: String,
    required: i64,
    repository: Option<String>,
    namespace: Option<String>,
    #[serde(default)]
    include: Vec<IncludeEntry>,
}

/// One group an `[[approvals]]` entry wants among the approvers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct IncludeEntry {
    /// A GitHub team, `org/slug`.
    team: Option<String>,
    /// A Slack user group id.
    slack_group: Option<String>,
    /// A name of the policy's `[groups]`.
    group: Option<String>,
    at_least: Option<i64>,
}

/// Reads one `include` entry of `[[approvals]]` needing `required` people.
fn include_of(file: &File, entry: &IncludeEntry, required: u32) -> Result<Include, String> {
    let group = match (&entry.team, &entry.slack_group, &entry.group) {
        (Some(team), None, None) => Group::team(team)?,
        (None, Some(id), None) => Group::slack(id)?,
        (None, None, Some(name)) => {
            let group = Group::listed(name)?;
            if !file.groups.contains_key(name) {
                return Err(format!("group `{name}` is not in [groups]"));
            }
            group
        }
        _ => return Err("name one of team, slack_group or group".into()),
    };
    let at_least = match entry.at_least.map(u32::try_from) {
        None => 1,
        Some(Ok(n @ 1..=20)) if n <= required => n,
        Some(_) => {
            return Err(format!(
                "{group}: at_least: write how many of its people must approve, 1 to required ({required})"
            ))
        }
    };
    Ok(Include { group, at_least })
}

/// Reads the `[[approvals]]` tables, saying which one is wrong.
fn quorum_rules(file: &File) -> anyhow::Result<Vec<QuorumRule>> {
    let mut rules = Vec::with_capacity(file.approvals.len());
    for (n, entry) in file.approvals.iter().enumerate() {
        let at = format!("approvals[{n}] (line {})", file.line_of(entry.span()));
        let a = entry.get_ref();
        let kind = match GateKind::from_route(&a.kind) {
            Some(k) if !k.is_rollback() && !k.is_legacy() => k,
            _ => anyhow::bail!(
                "{at}: kind `{}`: write start, promote or traffic (a rollback never waits for a second person)",
                a.kind
            ),
        };
        let required = match u32::try_from(a.required) {
            Ok(r @ 1..=20) => r,
            _ => anyhow::bail!(
                "{at}: required = {}: write how many distinct people must approve, 1 to 20",
                a.required
            ),
        };
        let repository = match &a.repository {
            Some(r) => Some(
                r.parse()
                    .map_err(|e| anyhow::anyhow!("{at}: repository: {e}"))?,
            ),
            None => None,
        };
        let namespace = match &a.namespace {
            Some(ns) => Some(
                Namespace::new(ns)
                    .map_err(|e| anyhow::anyhow!("{at}: namespace: {e}"))?
                    .to_string(),
            ),
            None => None,
        };
        let mut include: Vec<Include> = Vec::with_capacity(a.include.len());
        for entry in &a.include {
            let inc = include_of(file, entry, required)
                .map_err(|e| anyhow::anyhow!("{at}: include: {e}"))?;
            if include.iter().any(|i| i.group == inc.group) {
                anyhow::bail!("{at}: include: {} is named twice", inc.group);
            }
            include.push(inc);
        }
        rules.push(QuorumRule {
            kind,
            repository,
            namespace,
            required,
            include,
        });
    }
    Ok(rules)
}

/// The `[change]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangeEntry {
    provider: String,
    url: String,
    #[serde(default = "reference")]
    mode: String,
    kinds: Option<Vec<String>>,
    #[serde(default)]
    environments: Vec<String>,
    service: Option<String>,
    project: Option<String>,
    template: Option<String>,
    service_desk: Option<String>,
    request_type: Option<String>,
    start_field: Option<String>,
    end_field: Option<String>,
    service_field: Option<String>,
    poll: Option<String>,
    window: Option<String>,
}

fn reference() -> String {
    "reference".into()
}

/// The policy's `[change]`: which gates need a change, where changes live,
/// and how often gatebot asks about those it opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeSite {
    pub rule: ChangeRule,
    pub url: String,
    pub fields: Fields,
    pub poll: std::time::Duration,
}

/// Reads `[change]`, saying what is wrong.
fn change_site(file: &File) -> anyhow::Result<Option<ChangeSite>> {
    let Some(entry) = &file.change else {
        return Ok(None);
    };
    let at = format!("[change] (line {})", file.line_of(entry.span()));
    let c = entry.get_ref();
    change_of(file, c)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{at}: {e}"))
}

fn change_of(file: &File, c: &ChangeEntry) -> Result<ChangeSite, String> {
    let provider = Provider::parse(&c.provider)
        .ok_or_else(|| format!("provider `{}`: write servicenow or jira", c.provider))?;
    let mode = match c.mode.as_str() {
        "reference" => Mode::Reference,
        "create" => Mode::Create,
        other => return Err(format!("mode `{other}`: write reference or create")),
    };
    let url = reqwest_like_url(&c.url)?;
    let kinds = c.kinds.clone().unwrap_or_else(|| vec!["promote".into()]);
    let kinds = kinds
        .iter()
        .map(|k| match GateKind::from_route(k) {
            Some(kind) if !kind.is_rollback() && !kind.is_legacy() => Ok(kind),
            _ => Err(format!("kinds: `{k}`: write start, promote or traffic")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let known = |e: &String| file.environments.iter().any(|x| &x.get_ref().name == e);
    if let Some(e) = c.environments.iter().find(|e| !known(e)) {
        return Err(format!(
            "environments: `{e}` is none of the [[environments]]"
        ));
    }
    let needs = |field: &Option<String>, name: &str| match field {
        Some(v) if !v.trim().is_empty() => Ok(()),
        _ => Err(format!("{name}: {} needs it", provider.name())),
    };
    let project = c.project.clone();
    if provider == Provider::Jira {
        needs(&project, "project")?;
        needs(&c.start_field, "start_field")?;
        needs(&c.end_field, "end_field")?;
        if mode == Mode::Create {
            needs(&c.service_desk, "service_desk")?;
            needs(&c.request_type, "request_type")?;
        }
        let key_like = |p: &str| {
            p.len() <= 10
                && p.starts_with(|ch: char| ch.is_ascii_uppercase())
                && p.chars()
                    .all(|ch| ch.is_ascii_uppercase() || ch.is_ascii_digit() || ch == '_')
        };
        if project.as_deref().is_some_and(|p| !key_like(p)) {
            return Err("project: write the Jira project key, as CHG".into());
        }
    }
    // Ids that go into a path: letters, digits, `_` and `-` only.
    let id_like = |v: &Option<String>, name: &str| match v {
        Some(v)
            if v.is_empty()
                || !v
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-') =>
        {
            Err(format!("{name}: `{v}` is no id"))
        }
        _ => Ok(()),
    };
    id_like(&c.template, "template")?;
    let poll = match &c.poll {
        None => std::time::Duration::from_secs(60),
        Some(text) => match humantime::parse_duration(text) {
            Ok(d)
                if (std::time::Duration::from_secs(10)..=std::time::Duration::from_secs(3600))
                    .contains(&d) =>
            {
                d
            }
            _ => return Err(format!("poll `{text}`: write 10s to 1h")),
        },
    };
    let window = match &c.window {
        None => 4 * 3_600_000,
        Some(text) => match humantime::parse_duration(text) {
            Ok(d)
                if (std::time::Duration::from_secs(600)
                    ..=std::time::Duration::from_secs(7 * 86_400))
                    .contains(&d) =>
            {
                d.as_millis() as i64
            }
            _ => return Err(format!("window `{text}`: write 10m to 7d")),
        },
    };
    Ok(ChangeSite {
        rule: ChangeRule {
            window,
            provider,
            mode,
            kinds,
            environments: c.environments.clone(),
            service: c.service.clone().filter(|s| !s.trim().is_empty()),
            project,
        },
        url,
        fields: Fields {
            template: c.template.clone(),
            service_desk: c.service_desk.clone(),
            request_type: c.request_type.clone(),
            start_field: c.start_field.clone(),
            end_field: c.end_field.clone(),
            service_field: c.service_field.clone(),
        },
        poll,
    })
}

/// An http(s) URL with a host and nothing after it but a path.
fn reqwest_like_url(url: &str) -> Result<String, String> {
    let url = url.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("url `{url}`: write https://<your instance>"))?;
    if rest.is_empty() || rest.contains(['?', '#', '@', ' ']) {
        return Err(format!(
            "url `{url}`: write https://<your instance>, without a user, query or fragment"
        ));
    }
    Ok(url.to_string())
}

/// `[groups]`: each a lower-case name listing GitHub logins.
fn check_groups(file: &File) -> anyhow::Result<()> {
    for (name, logins) in &file.groups {
        Group::listed(name).map_err(|e| anyhow::anyhow!("[groups] {e}"))?;
        if name == crate::gate::quorum::CHANGE {
            anyhow::bail!("[groups] `change` is the change's own group ([change] mode = \"create\"): name yours otherwise");
        }
        if let Some(bad) = logins.iter().find(|l| !crate::gate::is_login(l)) {
            anyhow::bail!("[groups] {name}: `{bad}` is no GitHub login");
        }
    }
    Ok(())
}

/// One `[[reasons]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasonsEntry {
    kind: String,
    environment: Option<String>,
    required: bool,
}

/// Reads the `[[reasons]]` tables, saying which one is wrong; an environment
/// must be one of `[[environments]]`.
fn reason_rules(file: &File) -> anyhow::Result<Vec<ReasonRule>> {
    let mut rules = Vec::with_capacity(file.reasons.len());
    for (n, entry) in file.reasons.iter().enumerate() {
        let at = format!("reasons[{n}] (line {})", file.line_of(entry.span()));
        let r = entry.get_ref();
        let Some(kind) = ReasonKind::parse(&r.kind) else {
            let kinds: Vec<&str> = ReasonKind::ALL.iter().map(|k| k.as_str()).collect();
            anyhow::bail!("{at}: kind `{}`: write one of {}", r.kind, kinds.join(", "));
        };
        if let Some(name) = &r.environment {
            let known = file.environments.iter().any(|e| &e.get_ref().name == name);
            anyhow::ensure!(
                known,
                "{at}: environment `{name}` is none of the [[environments]]"
            );
        }
        rules.push(ReasonRule {
            kind,
            environment: r.environment.clone(),
            required: r.required,
        });
    }
    Ok(rules)
}

/// One `[[deadlines]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadlineEntry {
    kind: String,
    after: String,
    on_deadline: Option<OnDeadline>,
    repository: Option<String>,
    namespace: Option<String>,
    canary: Option<String>,
}

impl DeadlineEntry {
    fn rule(&self, n: usize, line: usize) -> anyhow::Result<DeadlineRule> {
        let at = || format!("deadlines[{n}] (line {line})");
        let kind = match GateKind::from_route(&self.kind) {
            Some(k) if k.has_waits() => k,
            _ => anyhow::bail!(
                "{}: kind `{}`: write start, promote or traffic (nobody waits at a rollback gate)",
                at(),
                self.kind
            ),
        };
        let after = humantime::parse_duration(&self.after)
            .with_context(|| format!("{}: after `{}`: write e.g. 30m, 2h, 1d", at(), self.after))?;
        let action = self
            .on_deadline
            .unwrap_or_else(|| OnDeadline::default_for(kind));
        if !action.allowed_at(kind) {
            anyhow::bail!(
                "{}: on_deadline = \"rollback\" at the start gate: Flagger does not check rollback hooks while it waits to start (fluxcd/flagger#1432); write \"close\" or \"nothing\"",
                at()
            );
        }
        let repository = match &self.repository {
            Some(r) => Some(
                r.parse()
                    .map_err(|e| anyhow::anyhow!("{}: repository: {e}", at()))?,
            ),
            None => None,
        };
        let namespace = match &self.namespace {
            Some(ns) => Some(
                Namespace::new(ns)
                    .map_err(|e| anyhow::anyhow!("{}: namespace: {e}", at()))?
                    .to_string(),
            ),
            None => None,
        };
        let canary = match &self.canary {
            Some(c) => Some(
                c.parse::<CanaryRef>()
                    .map_err(|e| anyhow::anyhow!("{}: canary: {e}", at()))?,
            ),
            None => None,
        };
        Ok(DeadlineRule {
            kind,
            repository,
            namespace,
            canary,
            deadline: Deadline { after, action },
        })
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GithubSection {
    min_permission: Option<Permission>,
    #[serde(default)]
    teams: Vec<String>,
    forbid_self_approval: Option<bool>,
    #[serde(default)]
    commands: HashMap<Rule, GithubCommand>,
    /// What an approving pull-request review counts as.
    #[serde(default)]
    approving_review: ApprovingReview,
    /// `[[github.environments]]`: the GitHub environment of a canary's deployments.
    #[serde(default)]
    environments: Vec<EnvironmentEntry>,
    /// `[[github.protection]]`: the gate whose opening approves a deployment
    /// to an environment that names gatebot among its protection rules.
    #[serde(default)]
    protection: Vec<ProtectionEntry>,
    /// A check run with buttons per waiting gate of a PR (a GitHub App only).
    check_runs: Option<bool>,
    /// A GitHub Deployment per canary revision of a PR.
    deployments: Option<bool>,
    /// The gate kinds a push of new commits closes.
    close_on_push: Option<Vec<String>>,
    /// The bot's own login, whose comments are never commands.
    bot_login: Option<String>,
}

impl GithubSection {
    /// `close_on_push`, read; a name that is no gate kind is said.
    fn close_on_push(&self) -> anyhow::Result<Option<Vec<GateKind>>> {
        let Some(kinds) = &self.close_on_push else {
            return Ok(None);
        };
        let read = kinds.iter().map(|k| {
            GateKind::from_route(k.trim())
                .ok_or_else(|| anyhow::anyhow!("[github] close_on_push: unknown gate kind {k:?}"))
        });
        read.collect::<anyhow::Result<_>>().map(Some)
    }

    /// What the section sets that were settings of their own, on `config`.
    fn settle(&self, config: &mut crate::config::GithubConfig) {
        if let Some(on) = self.check_runs {
            config.check_runs = on;
        }
        if let Some(on) = self.deployments {
            config.deployments = on;
        }
        if let Ok(Some(kinds)) = self.close_on_push() {
            config.close_on_push = kinds;
        }
        if let Some(login) = &self.bot_login {
            config.bot_login = Some(login.clone());
        }
    }
}

/// A GitHub login: letters, digits and single hyphens, with `[bot]` after an App's.
fn github_login(login: &str) -> bool {
    let name = login.strip_suffix("[bot]").unwrap_or(login);
    (1..=39).contains(&name.len())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Approvers who could never match anyone: a Slack id is U…, W… (people) or
/// S… (user groups); a Teams person is an Entra object id (a GUID).
fn approver_problems(file: &File) -> Vec<String> {
    let mut out = Vec::new();
    let lists = |chat: &ChatSection| {
        let commands = chat.commands.values().filter_map(|c| c.approvers.clone());
        chat.approvers
            .clone()
            .into_iter()
            .chain(commands)
            .flatten()
            .collect::<Vec<_>>()
    };
    // U012AB3CD, W…, S…: a letter then upper-case letters and digits.
    let slack_id = |a: &str| {
        a.len() >= 2
            && a.starts_with(['U', 'W', 'S'])
            && a.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    };
    for a in lists(&file.slack).iter().map(|a| a.trim()) {
        if !slack_id(a) {
            out.push(format!(
                "[slack] approvers: {a:?} is not a user (U…, W…) or user group (S…) id"
            ));
        }
    }
    for a in lists(&file.teams).iter().map(|a| a.trim()) {
        if crate::config::is_guid(a) {
            continue;
        }
        let what = if a.contains('@') {
            "an email or sign-in name"
        } else {
            "not an Entra object id"
        };
        out.push(format!(
            "[teams] approvers: {a:?} is {what}: write the person's Entra object id (a GUID like 5a7c0e0b-…, shown as \"Object ID\" on their page in the Entra admin center)"
        ));
    }
    out
}

/// One `[[github.protection]]` table: a deployment to `environment` waits for
/// the PR's gate of kind `gate` (`promote` by default).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProtectionEntry {
    environment: String,
    gate: Option<String>,
}

/// The PR gates a protection rule may wait for: those where people decide.
pub const PROTECTION_KINDS: [GateKind; 3] = [GateKind::Start, GateKind::Promote, GateKind::Traffic];

/// An environment name as GitHub allows it: one line of 1 to 255 characters.
fn check_environment_name(at: &str, name: &str) -> anyhow::Result<()> {
    let env = name.trim();
    if env.is_empty() || env.len() > MAX_ENVIRONMENT || env.chars().any(char::is_control) {
        anyhow::bail!(
            "{at}: environment `{}`: one line of 1 to {MAX_ENVIRONMENT} characters",
            name.escape_debug()
        );
    }
    Ok(())
}

/// Reads the `[[github.protection]]` tables: each environment once, each
/// gate a PR gate people decide (start, promote, traffic).
fn protection_rules(file: &File) -> anyhow::Result<Vec<(String, GateKind)>> {
    let mut rules: Vec<(String, GateKind)> = Vec::new();
    for (n, p) in file.github.protection.iter().enumerate() {
        let at = format!("github.protection[{n}]");
        check_environment_name(&at, &p.environment)?;
        let env = p.environment.trim().to_string();
        let word = p.gate.as_deref().unwrap_or("promote").trim();
        let kind = GateKind::from_route(word)
            .filter(|k| PROTECTION_KINDS.contains(k))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{at}: gate `{}`: write start, promote or traffic",
                    word.escape_debug()
                )
            })?;
        if rules.iter().any(|(e, _)| *e == env) {
            anyhow::bail!("{at}: environment `{env}` is named by an earlier table");
        }
        rules.push((env, kind));
    }
    Ok(rules)
}

/// One `[[github.environments]]` table: the canaries of a namespace, or one
/// canary (`namespace/name`), deploy to `environment`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvironmentEntry {
    namespace: Option<String>,
    canary: Option<String>,
    environment: String,
}

/// GitHub's longest environment name.
const MAX_ENVIRONMENT: usize = 255;

/// Checks each `[[github.environments]]` table names one namespace or one canary, and an environment.
fn check_environments(file: &File) -> anyhow::Result<()> {
    for (n, e) in file.github.environments.iter().enumerate() {
        let at = format!("github.environments[{n}]");
        match (&e.namespace, &e.canary) {
            (Some(_), None) => {}
            (None, Some(c)) => {
                c.parse::<CanaryRef>()
                    .map_err(|why| anyhow::anyhow!("{at}: canary `{c}`: {why}"))?;
            }
            _ => anyhow::bail!("{at}: write either namespace or canary (namespace/name)"),
        }
        check_environment_name(&at, &e.environment)?;
    }
    Ok(())
}

/// What an approving pull-request review counts as (`[github] approving_review`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovingReview {
    /// Nothing: reviews are acknowledged and ignored.
    #[default]
    Off,
    /// A `/promote` by the reviewer, pinned to the commit reviewed.
    Promote,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GithubCommand {
    min_permission: Option<Permission>,
    teams: Option<Vec<String>>,
    forbid_self_approval: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChatSection {
    approvers: Option<Vec<String>>,
    forbid_self_approval: Option<bool>,
    #[serde(default)]
    commands: HashMap<Rule, ChatCommand>,
    /// `[[slack.channels]]` / `[[teams.channels]]`: the channels a Canary's
    /// `slack_channel` / `teams_channel` may name.
    #[serde(default)]
    channels: Vec<ChannelEntry>,
}

/// One `[[slack.channels]]` or `[[teams.channels]]` table: a Canary's
/// `slack_channel` / `teams_channel` may name `channel` (Teams:
/// `conversation`) for the gates of one namespace, repository or canary.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelEntry {
    #[serde(alias = "channel")]
    conversation: String,
    namespace: Option<String>,
    repository: Option<String>,
    canary: Option<String>,
}

/// What a `[[slack.channels]]` / `[[teams.channels]]` table binds its channel to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bound {
    Namespace(String),
    Repository(RepoName),
    Canary(CanaryRef),
}

/// `[[slack.channels]]` or `[[teams.channels]]`, read: which channel (Teams:
/// conversation) may get the messages of which gates when a Canary's
/// metadata names it. The metadata is the caller's word (anyone who reaches
/// the port can send a check); the table is the operator's, so a message
/// with Approve buttons goes only where the operator bound it.
#[derive(Debug, Clone, Default)]
pub struct ChannelBindings(Vec<(String, Bound)>);

impl ChannelBindings {
    /// Whether `conversation` is bound to `canary` (its own table, or its
    /// namespace's) or to the repository or namespace of one of `gates`.
    pub fn allows(
        &self,
        conversation: &str,
        gates: &[GateKey],
        canary: Option<&CanaryRef>,
    ) -> bool {
        let conversation = conversation.trim();
        self.0
            .iter()
            .filter(|(c, _)| c == conversation)
            .any(|(_, bound)| match bound {
                Bound::Canary(c) => canary == Some(c),
                Bound::Namespace(ns) => {
                    canary.is_some_and(|c| c.namespace == *ns)
                        || gates.iter().any(|g| match &g.scope {
                            Scope::Namespace(n) => n.as_str() == ns,
                            Scope::Canary(c) => c.namespace == *ns,
                            _ => false,
                        })
                }
                Bound::Repository(repo) => {
                    gates.iter().any(|g| g.pr().is_some_and(|(r, _)| r == repo))
                }
            })
    }
}

/// Reads `[[slack.channels]]` or `[[teams.channels]]` (`section`): each
/// table one channel and one of namespace, repository or canary.
fn channel_bindings(entries: &[ChannelEntry], section: &str) -> anyhow::Result<ChannelBindings> {
    let mut out = Vec::new();
    for (n, e) in entries.iter().enumerate() {
        let at = format!("{section}.channels[{n}]");
        let conversation = e.conversation.trim();
        if conversation.is_empty() || conversation.chars().any(char::is_control) {
            anyhow::bail!("{at}: channel: a Slack channel id (C…) or a Teams conversation id (19:…@thread.tacv2)");
        }
        let bound = match (&e.namespace, &e.repository, &e.canary) {
            (Some(ns), None, None) => Bound::Namespace(
                Namespace::new(ns.trim())
                    .map_err(|why| anyhow::anyhow!("{at}: namespace `{ns}`: {why}"))?
                    .to_string(),
            ),
            (None, Some(r), None) => Bound::Repository(
                r.trim()
                    .parse()
                    .map_err(|why| anyhow::anyhow!("{at}: repository `{r}`: {why}"))?,
            ),
            (None, None, Some(c)) => Bound::Canary(
                c.trim()
                    .parse()
                    .map_err(|why| anyhow::anyhow!("{at}: canary `{c}`: {why}"))?,
            ),
            _ => anyhow::bail!(
                "{at}: write one of namespace, repository (owner/name) or canary (namespace/name)"
            ),
        };
        out.push((conversation.to_string(), bound));
    }
    Ok(ChannelBindings(out))
}

/// `[[teams.channels]]` and `[[slack.channels]]`, read.
fn channels(file: &File) -> anyhow::Result<(ChannelBindings, ChannelBindings)> {
    Ok((
        channel_bindings(&file.teams.channels, "teams")?,
        channel_bindings(&file.slack.channels, "slack")?,
    ))
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChatCommand {
    approvers: Option<Vec<String>>,
    forbid_self_approval: Option<bool>,
}

/// A person's ids beside their GitHub login in `[users]`: a Slack user id
/// (`alice = "U012AB3CD"`), or a table naming each chat
/// (`alice = { slack = "U012AB3CD", teams = "<Entra object id>" }`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum UserIds {
    Slack(String),
    Chats(ChatIds),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChatIds {
    slack: Option<String>,
    teams: Option<String>,
}

impl UserIds {
    fn slack(&self) -> Option<&str> {
        match self {
            Self::Slack(id) => Some(id),
            Self::Chats(ids) => ids.slack.as_deref(),
        }
    }

    fn teams(&self) -> Option<&str> {
        match self {
            Self::Slack(_) => None,
            Self::Chats(ids) => ids.teams.as_deref(),
        }
    }
}

/// What a GitHub commenter needs for one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubRule {
    pub min_permission: Permission,
    /// `org/team` slugs; empty: no team needed.
    pub teams: Vec<String>,
    /// The PR's author may not run this command.
    pub forbid_self_approval: bool,
}

/// What a Slack or Teams user needs for one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRule {
    /// Slack: user ids (U…, W…) and user group ids (S…); Teams: Entra
    /// object ids. Empty: nobody.
    pub approvers: Vec<String>,
    pub forbid_self_approval: bool,
    /// Where the approvers came from, for refusals that say what to change.
    pub setting: String,
}

#[derive(Debug, Clone)]
pub struct Policy {
    file: File,
    default_permission: Permission,
    default_approvers: Vec<String>,
    /// Who may act from Teams where `[teams]` names none (nobody, but in tests).
    default_teams_approvers: Vec<String>,
    source: Option<String>,
    deadlines: Vec<DeadlineRule>,
    reminders: Reminders,
    calendar: Calendar,
    quorum: Vec<QuorumRule>,
    reasons: Vec<ReasonRule>,
    change: Option<ChangeSite>,
    /// `[[github.protection]]`: environment → the PR gate that approves it.
    protection: Vec<(String, GateKind)>,
    environments: Environments,
    teams_channels: ChannelBindings,
    slack_channels: ChannelBindings,
}

/// One `[[environments]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvironmentsEntry {
    name: String,
    clusters: Vec<String>,
    after: Option<String>,
    soak: Option<String>,
}

impl EnvironmentsEntry {
    fn read(&self, n: usize, line: usize) -> anyhow::Result<Environment> {
        let at = || format!("environments[{n}] (line {line})");
        let name = |text: &str| {
            text.parse::<ClusterName>()
                .map_err(|why| anyhow::anyhow!("{}: {why}", at()))
        };
        let soak = match &self.soak {
            Some(text) => humantime::parse_duration(text)
                .with_context(|| format!("{}: soak `{text}`: write e.g. 30m, 2h", at()))?,
            None => Duration::ZERO,
        };
        Ok(Environment {
            name: name(&self.name)?,
            clusters: self
                .clusters
                .iter()
                .map(|c| name(c))
                .collect::<anyhow::Result<_>>()?,
            after: self.after.as_deref().map(name).transpose()?,
            soak,
        })
    }
}

/// Reads `[[environments]]` and `default_cluster`, checking their order.
fn environments(file: &File) -> anyhow::Result<Environments> {
    let list = file
        .environments
        .iter()
        .enumerate()
        .map(|(n, e)| e.get_ref().read(n, file.line_of(e.span())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let default = file
        .default_cluster
        .as_deref()
        .map(|c| c.parse::<ClusterName>())
        .transpose()
        .map_err(|why| anyhow::anyhow!("default_cluster: {why}"))?;
    Environments::new(list, default).map_err(|why| anyhow::anyhow!("environments: {why}"))
}

/// Reads the `[[deadlines]]` tables into rules, saying which one is wrong.
fn deadline_rules(file: &File) -> anyhow::Result<Vec<DeadlineRule>> {
    file.deadlines
        .iter()
        .enumerate()
        .map(|(n, d)| d.get_ref().rule(n, file.line_of(d.span())))
        .collect()
}

/// Refuses, naming the first, what the tables that were settings hold and
/// gatebot cannot use: a limit out of its range, a name Kubernetes or GitHub
/// does not take, a gate kind that is none, an approver who is nobody.
fn check_settings(file: &File) -> anyhow::Result<()> {
    file.github.close_on_push()?;
    if let Some(login) = file
        .github
        .bot_login
        .as_deref()
        .filter(|l| !github_login(l))
    {
        anyhow::bail!("[github] bot_login = {login:?} is not a GitHub login");
    }
    let limits = file.limits.as_ref().map(Limits::problems);
    let problems = limits
        .into_iter()
        .flatten()
        .chain(file.sections().problems())
        .chain(approver_problems(file));
    match problems.into_iter().next() {
        Some(problem) => anyhow::bail!(problem),
        None => Ok(()),
    }
}

/// Commands that open a gate: the ones four eyes applies to by default.
fn approves(command: Verb) -> bool {
    matches!(command, Verb::Promote | Verb::Start | Verb::Traffic)
}

impl Policy {
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let (file, source) = match &config.policy {
            Some(path) => (read(path)?, Some(path.display().to_string())),
            None => (File::default(), None),
        };
        let named = source.as_deref().unwrap_or("the policy file");
        let context = format!("GATEBOT_POLICY: {named}");
        let mut policy = Self::read(file, source, &config.slack.approvers).context(context)?;
        policy.default_teams_approvers = clean(&config.teams.approvers);
        Ok(policy)
    }

    /// Parses policy text (for tests and `check-config`).
    pub fn parse(
        text: &str,
        default_permission: Permission,
        default_approvers: &[String],
    ) -> anyhow::Result<Self> {
        let file = File::parse(text).context("the policy file does not parse")?;
        let mut policy = Self::read(file, Some("policy".into()), default_approvers)?;
        policy.default_permission = default_permission;
        Ok(policy)
    }

    /// Every table of `file` read and checked, the first problem said.
    fn read(file: File, source: Option<String>, approvers: &[String]) -> anyhow::Result<Self> {
        check_environments(&file)?;
        check_settings(&file)?;
        check_groups(&file)?;
        let change = change_site(&file)?;
        let (teams_channels, slack_channels) = channels(&file)?;
        Ok(Self {
            environments: environments(&file)?,
            teams_channels,
            slack_channels,
            protection: protection_rules(&file)?,
            deadlines: deadline_rules(&file)?,
            reminders: file.reminders.read(&file)?,
            calendar: calendar(&file)?,
            quorum: quorum_rules(&file)?,
            reasons: reason_rules(&file)?,
            change,
            file,
            // `[github] min_permission` refines it, per command too.
            default_permission: Permission::Write,
            default_approvers: clean(approvers),
            default_teams_approvers: Vec::new(),
            source,
        })
    }

    /// The GitHub environment of `canary`'s deployments: its own table's,
    /// else its namespace's; None when no table names it. Never the
    /// namespace itself: a check names its namespace, and a deployment's
    /// environment is what runs `on: deployment` workflows.
    pub fn environment_of(&self, canary: &CanaryRef) -> Option<String> {
        let tables = &self.file.github.environments;
        let own = canary.to_string();
        tables
            .iter()
            .find(|e| e.canary.as_deref().is_some_and(|c| c.trim() == own))
            .or_else(|| {
                tables.iter().find(|e| {
                    e.namespace
                        .as_deref()
                        .is_some_and(|n| n.trim() == canary.namespace)
                })
            })
            .map(|e| e.environment.trim().to_string())
    }

    /// `[[teams.channels]]`: where a Canary's `teams_channel` may send its cards.
    /// The `[limits]` table, when the file has one.
    pub fn limits(&self) -> Option<&Limits> {
        self.file.limits.as_ref()
    }

    /// Sets on `config` what the file's `[limits]`, `[loadtester]`,
    /// `[templates]`, `[kubernetes]` and `[ui]` tables name.
    pub fn settle(&self, config: &mut Config) {
        if let Some(limits) = self.limits() {
            config.limits = limits.clone();
        }
        self.file.sections().apply(config);
        self.file.github.settle(&mut config.github);
    }

    pub fn teams_channels(&self) -> &ChannelBindings {
        &self.teams_channels
    }

    /// `[[slack.channels]]`: where a Canary's `slack_channel` may send its messages.
    pub fn slack_channels(&self) -> &ChannelBindings {
        &self.slack_channels
    }

    /// `[[environments]]`: the clusters' order (empty: one gate for every cluster).
    pub fn environments(&self) -> &Environments {
        &self.environments
    }

    /// The PR gate whose opening approves a deployment to `environment`
    /// (`[[github.protection]]`); None when no table names it.
    pub fn protection_gate(&self, environment: &str) -> Option<GateKind> {
        let env = environment.trim();
        self.protection
            .iter()
            .find(|(e, _)| e == env)
            .map(|(_, kind)| *kind)
    }

    /// Every `[[github.protection]]` table: (environment, gate kind).
    pub fn protections(&self) -> &[(String, GateKind)] {
        &self.protection
    }

    /// What an approving pull-request review counts as.
    pub fn approving_review(&self) -> ApprovingReview {
        self.file.github.approving_review
    }

    pub fn github(&self, command: Verb) -> GithubRule {
        self.github_rule(Rule::Verb(command), command == Verb::Promote)
    }

    /// Who may `/freeze` and `/unfreeze` on a PR (`[github.commands.freeze]`).
    pub fn github_named(&self, rule: Rule) -> GithubRule {
        self.github_rule(rule, false)
    }

    fn github_rule(&self, rule: Rule, four_eyes_by_default: bool) -> GithubRule {
        let section = &self.file.github;
        let specific = section.commands.get(&rule);
        GithubRule {
            min_permission: specific
                .and_then(|c| c.min_permission)
                .or(section.min_permission)
                .unwrap_or(self.default_permission),
            teams: specific
                .and_then(|c| c.teams.clone())
                .unwrap_or_else(|| section.teams.clone()),
            forbid_self_approval: specific
                .and_then(|c| c.forbid_self_approval)
                .or(section
                    .forbid_self_approval
                    .filter(|_| four_eyes_by_default))
                .unwrap_or(false),
        }
    }

    pub fn slack(&self, command: Verb) -> ChatRule {
        self.slack_rule(Rule::Verb(command), approves(command))
    }

    /// Who may `freeze` and `unfreeze` from Slack (`[slack.commands.freeze]`).
    pub fn slack_named(&self, rule: Rule) -> ChatRule {
        self.slack_rule(rule, false)
    }

    fn slack_rule(&self, rule: Rule, approves: bool) -> ChatRule {
        let defaults = (
            &self.default_approvers,
            "the policy file's [slack] approvers",
        );
        self.chat_rule("slack", &self.file.slack, defaults, rule, approves)
    }

    /// Who may run `command` from Teams: `[teams.commands.<command>]`, else `[teams]`.
    pub fn teams(&self, command: Verb) -> ChatRule {
        self.teams_rule(Rule::Verb(command), approves(command))
    }

    /// Who may `freeze` and `unfreeze` from Teams (`[teams.commands.freeze]`).
    pub fn teams_named(&self, rule: Rule) -> ChatRule {
        self.teams_rule(rule, false)
    }

    fn teams_rule(&self, rule: Rule, approves: bool) -> ChatRule {
        let defaults = (
            &self.default_teams_approvers,
            "the policy file's [teams] approvers",
        );
        self.chat_rule("teams", &self.file.teams, defaults, rule, approves)
    }

    /// A chat's rule for `rule`: its command's table, else the chat's
    /// approvers, else the environment's; four eyes as the tables say.
    fn chat_rule(
        &self,
        chat: &str,
        section: &ChatSection,
        (default_approvers, default_setting): (&Vec<String>, &str),
        rule: Rule,
        approves: bool,
    ) -> ChatRule {
        let specific = section.commands.get(&rule);
        let source = self.source_name();
        let (approvers, setting) = match (
            specific.and_then(|c| c.approvers.as_ref()),
            &section.approvers,
        ) {
            (Some(a), _) => (
                clean(a),
                format!("{chat}.commands.{rule}.approvers in {source}"),
            ),
            (None, Some(a)) => (clean(a), format!("{chat}.approvers in {source}")),
            (None, None) => (default_approvers.clone(), default_setting.to_string()),
        };
        ChatRule {
            approvers,
            forbid_self_approval: specific
                .and_then(|c| c.forbid_self_approval)
                .or(section.forbid_self_approval.filter(|_| approves))
                .unwrap_or(false),
            setting,
        }
    }

    /// The wait deadlines, in the file's order (checked when it was read).
    pub fn deadlines(&self) -> &[DeadlineRule] {
        &self.deadlines
    }

    /// Whether deadlines from unauthenticated checks' metadata are believed.
    pub fn metadata_deadlines(&self) -> bool {
        self.file.deadline_metadata.allow
    }

    /// Whether a deadline can roll a canary back: the policy's, or one in
    /// the hook metadata it believes.
    pub fn rolls_back_on_deadline(&self) -> bool {
        self.metadata_deadlines()
            || self
                .deadlines
                .iter()
                .any(|d| d.deadline.action == OnDeadline::Rollback)
    }

    /// What an operator should know about Flagger's side of this server:
    /// without Flagger tokens, whoever reaches the port can pose as any
    /// canary, and a deadline that rolls back lets them roll it back.
    pub fn door_warnings(&self, tokens: &crate::gate::FlaggerTokens) -> Vec<String> {
        let mut out = Vec::new();
        let envs = &self.environments;
        if !tokens.is_empty() {
            for cluster in envs.clusters() {
                if !tokens.clusters().any(|c| c == cluster) {
                    out.push(format!("cluster {cluster} is in [[environments]] but has no Flagger token: no check can reach its gates; add it to GATEBOT_FLAGGER_TOKENS"));
                }
            }
            return out;
        }
        if !envs.is_empty() {
            out.push("[[environments]] without Flagger tokens: a check names its cluster in its metadata, a claim anyone who can reach the port can make; set GATEBOT_FLAGGER_TOKENS".into());
        }
        if self.rolls_back_on_deadline() {
            out.push("deadline rollbacks without Flagger tokens: anyone who can reach the port can pose as a canary, start its wait early and have the deadline roll it back; set GATEBOT_FLAGGER_TOKENS".into());
        }
        if self.metadata_deadlines() {
            out.push("[deadline_metadata] allow = true: any caller's hook metadata can set a canary's deadline".into());
        }
        out
    }

    /// When waits' deadlines fall and reminders are due.
    pub fn timers(&self) -> crate::gate::timers::WaitTimers {
        crate::gate::timers::WaitTimers {
            deadlines: self.deadlines.clone(),
            metadata_deadlines: self.metadata_deadlines(),
            reminders: self.reminders.at.clone(),
            reminder_kinds: self.reminders.kinds.clone(),
        }
    }

    pub fn reminders(&self) -> &Reminders {
        &self.reminders
    }

    /// `[evidence]`, as written (checked where the queries are rendered).
    pub fn evidence(&self) -> &EvidenceRules {
        &self.file.evidence
    }

    /// How many people each kind of gate needs, in the file's order.
    pub fn quorum(&self) -> &[QuorumRule] {
        &self.quorum
    }

    /// Which gates are tied to change requests, and where changes live.
    pub fn change(&self) -> Option<&ChangeSite> {
        self.change.as_ref()
    }

    /// Which commands must say why, in the file's order.
    pub fn reasons(&self) -> &[ReasonRule] {
        &self.reasons
    }

    /// Who may break glass (`/promote --force <reason>`) from GitHub: only
    /// what `[github.commands.force]` says; None when it says nothing.
    pub fn github_force(&self) -> Option<GithubRule> {
        self.file
            .github
            .commands
            .contains_key(&Rule::Force)
            .then(|| self.github_rule(Rule::Force, false))
    }

    /// Who may break glass from Slack: only `[slack.commands.force].approvers`,
    /// never the general approvers; four eyes as that table says.
    pub fn slack_force(&self) -> Option<ChatRule> {
        self.chat_force("slack", &self.file.slack)
    }

    /// Who may break glass from Teams: only `[teams.commands.force].approvers`.
    pub fn teams_force(&self) -> Option<ChatRule> {
        self.chat_force("teams", &self.file.teams)
    }

    fn chat_force(&self, chat: &str, section: &ChatSection) -> Option<ChatRule> {
        let force = section.commands.get(&Rule::Force)?;
        let approvers = force.approvers.as_ref()?;
        Some(ChatRule {
            approvers: clean(approvers),
            forbid_self_approval: force.forbid_self_approval.unwrap_or(false),
            setting: format!("{chat}.commands.force.approvers in {}", self.source_name()),
        })
    }

    /// The release windows and holidays.
    pub fn calendar(&self) -> &Calendar {
        &self.calendar
    }

    /// The Slack user id of a GitHub login, when the policy maps them.
    pub fn slack_user_of(&self, github_login: &str) -> Option<&str> {
        self.file
            .users
            .iter()
            .find(|(login, _)| login.eq_ignore_ascii_case(github_login))
            .and_then(|(_, ids)| ids.slack())
    }

    /// Whether the policy's `[groups]` lists `login` in `group`.
    pub fn listed_in(&self, group: &str, login: &str) -> bool {
        self.file
            .groups
            .get(group)
            .is_some_and(|logins| logins.iter().any(|l| l.eq_ignore_ascii_case(login)))
    }

    /// The GitHub login of a Slack user id, when the policy maps them.
    pub fn github_login_of(&self, slack_user: &str) -> Option<&str> {
        self.file
            .users
            .iter()
            .find(|(_, ids)| ids.slack() == Some(slack_user))
            .map(|(login, _)| login.as_str())
    }

    /// The GitHub login of a Teams person (their Entra object id, a GUID
    /// Teams writes in either case), when the policy maps them.
    pub fn github_login_of_teams(&self, aad_object_id: &str) -> Option<&str> {
        self.file
            .users
            .iter()
            .find(|(_, ids)| {
                ids.teams()
                    .is_some_and(|id| id.eq_ignore_ascii_case(aad_object_id))
            })
            .map(|(login, _)| login.as_str())
    }

    fn source_name(&self) -> &str {
        self.source.as_deref().unwrap_or("the policy file")
    }
}

/// `text` with every control character but the line break escaped (`\u{1b}`).
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' => c.to_string(),
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

fn read(path: &Path) -> anyhow::Result<File> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("GATEBOT_POLICY: cannot read {}", path.display()))?;
    File::parse(&text).with_context(|| format!("GATEBOT_POLICY: {} does not parse", path.display()))
}

/// The keys of the file that are tables (`[github]`), not arrays of them.
const TABLES: [&str; 12] = [
    "github",
    "slack",
    "teams",
    "users",
    "reminders",
    "evidence",
    "deadline_metadata",
    "limits",
    "loadtester",
    "templates",
    "kubernetes",
    "ui",
];

impl File {
    /// The tables that set what were settings of their own.
    fn sections(&self) -> Sections {
        Sections {
            loadtester: self.loadtester.clone(),
            templates: self.templates.clone(),
            kubernetes: self.kubernetes.clone(),
            ui: self.ui.clone(),
        }
    }

    /// Parses the file and keeps where each line starts, so that errors about
    /// an entry can name its line. An error quotes the file: its control
    /// characters are escaped, so that it cannot drive the terminal it is shown on.
    fn parse(text: &str) -> anyhow::Result<Self> {
        Self::parse_text(text).map_err(|e| anyhow::anyhow!(printable(&format!("{e:#}"))))
    }

    fn parse_text(text: &str) -> anyhow::Result<Self> {
        let table: toml::Table = toml::from_str(text)?;
        // serde reads an array as a struct's fields in order: `limits = [1, 2]`
        // would set the first two limits without a word.
        for key in TABLES {
            if let Some(value) = table.get(key).filter(|v| !v.is_table()) {
                anyhow::bail!(
                    "{key} must be a table ([{key}]), not a {}",
                    value.type_str()
                );
            }
        }
        let mut file: File = toml::from_str(text)?;
        file.line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Ok(file)
    }

    /// The 1-based line of a byte span's start.
    fn line_of(&self, span: std::ops::Range<usize>) -> usize {
        self.line_starts
            .partition_point(|start| *start <= span.start)
    }
}

fn clean(ids: &[String]) -> Vec<String> {
    ids.iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[github]
forbid_self_approval = true
[github.commands.promote]
min_permission = "maintain"
teams = ["acme/release"]
[slack]
approvers = ["U1", "S2"]
[slack.commands.rollback]
approvers = ["S9"]
[users]
alice = "U1"
"#;

    fn policy() -> Policy {
        Policy::parse(FILE, Permission::Write, &["U0".into()]).unwrap()
    }

    /// docs/policy.md, "Settings in the policy file": the example reads, and sets each field.
    #[test]
    fn the_settings_example_of_the_docs_reads() {
        let docs = include_str!("../docs/policy.md");
        let example = docs
            .split("## Settings in the policy file")
            .nth(1)
            .and_then(|rest| rest.split("```toml\n").nth(1))
            .and_then(|rest| rest.split("```").next())
            .expect("the example");
        let policy = Policy::parse(example, Permission::Write, &[]).unwrap();
        let mut config = Config::with_database("sqlite://unused.db");
        policy.settle(&mut config);
        assert_eq!(
            config.templates_dir.as_deref(),
            Some(Path::new("/etc/gatebot/templates"))
        );
        assert!(config.kubernetes.lookup && config.loadtester_open_access);
        assert_eq!(config.kubernetes.container.as_deref(), Some("app"));
        assert_eq!(
            config.kubernetes.app_secret.as_deref(),
            Some("gatebot-github-app")
        );
        assert_eq!(config.ui.trusted_proxies, ["10.0.0.0/8"]);
    }

    #[test]
    fn errors_quote_the_file_without_its_control_characters() {
        for text in [
            "[limits]\nidle_timeout = \"\u{1b}[31mRED\u{7}\"\n",
            "[limits]\n\"\u{1b}[2Jfake\" = 1\n",
        ] {
            let e = Policy::parse(text, Permission::Write, &[]).unwrap_err();
            let said = format!("{e:#}");
            assert!(
                !said.contains('\u{1b}') && !said.contains('\u{7}'),
                "{said:?}"
            );
            assert!(said.contains("\\u{1b}"), "{said:?}");
        }
    }

    #[test]
    fn approvals_are_read_and_bad_ones_name_their_line() {
        let ok = Policy::parse(
            "[[approvals]]\nkind = \"promote\"\nrequired = 2\n\n[[approvals]]\nkind = \"traffic\"\nrequired = 3\nnamespace = \"prod\"\n",
            Permission::Write,
            &[],
        )
        .unwrap();
        let rules = ok.quorum();
        assert_eq!(rules.len(), 2);
        assert_eq!((rules[0].kind, rules[0].required), (GateKind::Promote, 2));
        assert_eq!(rules[1].namespace.as_deref(), Some("prod"));
        let table = [
            (
                "\n[[approvals]]\nkind = \"rollback\"\nrequired = 2\n",
                "approvals[0] (line 2): kind `rollback`: write start, promote or traffic",
            ),
            (
                "[[approvals]]\nkind = \"promote\"\nrequired = 0\n",
                "approvals[0] (line 1): required = 0: write how many distinct people must approve, 1 to 20",
            ),
            (
                "[[approvals]]\nkind = \"promote\"\nrequired = 2\nrepository = \"nope\"\n",
                "approvals[0] (line 1): repository:",
            ),
        ];
        refused_with(&table);
    }

    /// Each policy text is refused with an error that says `want`.
    fn refused_with(table: &[(&str, &str)]) {
        for (text, want) in table {
            let err = format!(
                "{:#}",
                Policy::parse(text, Permission::Write, &[]).unwrap_err()
            );
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn holidays_and_reminders_errors_name_their_line() {
        let table = [
            (
                "\nholidays = [\"2026-12-24\",\n  \"christmas\"]\n",
                "holidays[1] (line 3): `christmas`",
            ),
            (
                "[reminders]\nat = [\"30m\",\n  \"soon\"]\n",
                "reminders.at[1] (line 3): `soon`",
            ),
            (
                "[reminders]\nat = [\"30m\"]\nkinds = [\"rollback\"]\n",
                "reminders.kinds (line 3): `rollback`",
            ),
        ];
        refused_with(&table);
    }

    #[test]
    fn reasons_are_read_and_bad_ones_name_their_line() {
        let text = "[[environments]]\nname = \"production\"\nclusters = [\"prod-eu\"]\n\
                    [[reasons]]\nkind = \"promote\"\nenvironment = \"production\"\nrequired = true\n\
                    [[reasons]]\nkind = \"hold\"\nrequired = false\n";
        let p = Policy::parse(text, Permission::Write, &[]).unwrap();
        assert_eq!(p.reasons().len(), 2);
        assert_eq!(p.reasons()[0].environment.as_deref(), Some("production"));
        refused_with(&[
            (
                "[[reasons]]\nkind = \"approve\"\nrequired = true\n",
                "reasons[0] (line 1): kind `approve`: write one of start, promote, traffic, rollback, hold, force",
            ),
            (
                "[[reasons]]\nkind = \"promote\"\nenvironment = \"prod\"\nrequired = true\n",
                "reasons[0] (line 1): environment `prod` is none of the [[environments]]",
            ),
            ("[[reasons]]\nkind = \"promote\"\n", "missing field `required`"),
            (
                "[[reasons]]\nkind = \"promote\"\nrequired = true\nmin = 3\n",
                "unknown field `min`",
            ),
        ]);
    }

    #[test]
    fn groups_in_a_quorum_are_read_and_bad_ones_name_their_line() {
        let text = "[groups]\nrelease = [\"alice\", \"Bob\"]\n\
                    [[approvals]]\nkind = \"promote\"\nrequired = 2\n\
                    include = [{ team = \"Acme/SRE\" }, { slack_group = \"S0ONCALL\", at_least = 2 }, { group = \"release\" }]\n";
        let p = Policy::parse(text, Permission::Write, &[]).unwrap();
        let include: Vec<(String, u32)> = p.quorum()[0]
            .include
            .iter()
            .map(|i| (i.group.to_string(), i.at_least))
            .collect();
        assert_eq!(
            include,
            [
                ("acme/sre".to_string(), 1),
                ("S0ONCALL".to_string(), 2),
                ("release".to_string(), 1)
            ]
        );
        assert!(p.listed_in("release", "bob") && !p.listed_in("release", "carol"));
        let rule = |include: &str| {
            format!("[groups]\nrelease = [\"alice\"]\n[[approvals]]\nkind = \"promote\"\nrequired = 2\ninclude = [{include}]\n")
        };
        let refused = [
            (
                rule("{ team = \"sre\" }"),
                "approvals[0] (line 3): include: `sre`: write a GitHub team as org/team-slug",
            ),
            (
                rule("{ slack_group = \"U123\" }"),
                "include: `U123`: write a Slack user group by its id (S…)",
            ),
            (
                rule("{ group = \"ops\" }"),
                "include: group `ops` is not in [groups]",
            ),
            (
                rule("{ team = \"acme/sre\", group = \"release\" }"),
                "include: name one of team, slack_group or group",
            ),
            (
                rule("{ team = \"acme/sre\", at_least = 3 }"),
                "acme/sre: at_least: write how many of its people must approve, 1 to required (2)",
            ),
            (
                rule("{ team = \"acme/sre\", at_least = 0 }"),
                "1 to required (2)",
            ),
            (
                rule("{ team = \"acme/sre\" }, { team = \"ACME/sre\" }"),
                "include: acme/sre is named twice",
            ),
            (
                rule("{ team = \"acme/sre\", min = 1 }"),
                "unknown field `min`",
            ),
            (
                "[groups]\nRelease = [\"alice\"]\n".to_string(),
                "[groups] `Release`: name a [groups] group in lower case",
            ),
            (
                "[groups]\nrelease = [\"slack:U1\"]\n".to_string(),
                "[groups] release: `slack:U1` is no GitHub login",
            ),
        ];
        for (text, want) in refused {
            let err = format!(
                "{:#}",
                Policy::parse(&text, Permission::Write, &[]).unwrap_err()
            );
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    /// Every table docs/change-management.md shows is read as it says.
    #[test]
    fn the_change_management_examples_are_valid() {
        let doc = include_str!("../docs/change-management.md");
        let envs = "[[environments]]\nname = \"production\"\nclusters = [\"prod-eu\"]\n";
        let blocks: Vec<&str> = doc
            .split("```toml\n")
            .skip(1)
            .map(|b| b.split("```").next().unwrap_or_default())
            .collect();
        assert_eq!(blocks.len(), 3);
        for block in blocks {
            let p = Policy::parse(&format!("{envs}{block}"), Permission::Write, &[])
                .unwrap_or_else(|e| panic!("{block}: {e:#}"));
            assert!(p.change().is_some(), "{block}");
        }
        let created = Policy::parse(
            &format!(
                "{envs}{}",
                doc.split("```toml\n")
                    .nth(3)
                    .unwrap()
                    .split("```")
                    .next()
                    .unwrap()
            ),
            Permission::Write,
            &[],
        )
        .unwrap();
        let site = created.change().unwrap();
        assert_eq!(site.rule.window, 4 * 3_600_000);
        assert_eq!(site.poll, std::time::Duration::from_secs(60));
        assert_eq!(
            site.fields.template.as_deref(),
            Some("4a1ad9d3c3f1e110e9d6b6c1a0013197")
        );
    }

    /// docs/policy.md's complete example is a valid file.
    #[test]
    fn the_documented_example_is_valid() {
        let doc = include_str!("../docs/policy.md");
        let start = doc.find("```toml\n").expect("an example") + "```toml\n".len();
        let end = start + doc[start..].find("```").expect("its end");
        let p = Policy::parse(&doc[start..end], Permission::Write, &[]).unwrap();
        assert_eq!(p.quorum().len(), 2);
        assert!(p.github_force().is_some() && p.slack_force().is_some());
        assert_eq!(p.deadlines().len(), 3);
    }

    #[test]
    fn break_glass_is_only_for_whom_the_policy_names() {
        let none = policy();
        assert_eq!(none.github_force(), None);
        assert_eq!(none.slack_force(), None);
        let named = Policy::parse(
            "[slack]\napprovers = [\"U1\"]\n[github.commands.force]\nmin_permission = \"admin\"\n[slack.commands.force]\napprovers = [\"S0ONCALL\"]\n",
            Permission::Write,
            &[],
        )
        .unwrap();
        assert_eq!(
            named.github_force().map(|r| r.min_permission),
            Some(Permission::Admin)
        );
        assert_eq!(
            named.slack_force().map(|r| r.approvers),
            Some(vec!["S0ONCALL".to_string()])
        );
    }

    #[test]
    fn deadlines_are_read_and_bad_ones_say_which_and_what_to_write() {
        let ok = Policy::parse(
            "[[deadlines]]\nkind = \"promote\"\nafter = \"2h\"\nnamespace = \"prod\"\n",
            Permission::Write,
            &[],
        )
        .unwrap();
        let rules = ok.deadlines();
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].deadline.after,
            std::time::Duration::from_secs(7200)
        );
        assert_eq!(rules[0].deadline.action, OnDeadline::Rollback);
        assert_eq!(rules[0].namespace.as_deref(), Some("prod"));
        for (text, says) in [
            (
                "kind = \"start\"\nafter = \"1h\"\non_deadline = \"rollback\"",
                "flagger#1432",
            ),
            (
                "kind = \"rollback\"\nafter = \"1h\"",
                "nobody waits at a rollback gate",
            ),
            ("kind = \"promote\"\nafter = \"soon\"", "write e.g. 30m"),
            (
                "kind = \"promote\"\nafter = \"1h\"\nnamespace = \"Prod\"",
                "namespace",
            ),
            (
                "kind = \"promote\"\nafter = \"1h\"\non_deadline = \"explode\"",
                "on_deadline",
            ),
        ] {
            let file = format!(
                "[[deadlines]]\nkind = \"traffic\"\nafter = \"1h\"\n\n[[deadlines]]\n{text}\n"
            );
            let err = Policy::parse(&file, Permission::Write, &[]).unwrap_err();
            let err = format!("{err:#}");
            assert!(err.contains(says), "{text}: {err}");
            if !says.contains("on_deadline") {
                // The second entry's table starts on line 5.
                assert!(err.contains("deadlines[1] (line 5)"), "{text}: {err}");
            }
        }
    }

    #[test]
    fn per_command_rules_override_defaults() {
        let p = policy();
        let promote = p.github(Verb::Promote);
        assert_eq!(promote.min_permission, Permission::Maintain);
        assert_eq!(promote.teams, vec!["acme/release".to_string()]);
        assert!(promote.forbid_self_approval);
        let start = p.github(Verb::Start);
        assert_eq!(start.min_permission, Permission::Write);
        assert!(start.teams.is_empty());
        assert!(
            !start.forbid_self_approval,
            "four eyes applies to /promote unless a command says so"
        );
    }

    #[test]
    fn teams_channels_bind_a_conversation_to_a_namespace_repository_or_canary() {
        let text = "[[teams.channels]]\nconversation = \"19:b@thread.tacv2\"\nnamespace = \"billing\"\n\n\
                    [[teams.channels]]\nconversation = \"19:s@thread.tacv2\"\nrepository = \"acme/shop\"\n\n\
                    [[teams.channels]]\nconversation = \"19:c@thread.tacv2\"\ncanary = \"test/podinfo\"\n";
        let p = Policy::parse(text, Permission::Write, &[]).unwrap();
        let channels = p.teams_channels();
        let pr = GateKey::parse("/gates/start/acme/shop/pr/42", None).unwrap();
        let other_repo = GateKey::parse("/gates/start/acme/web/pr/42", None).unwrap();
        let podinfo: CanaryRef = "test/podinfo".parse().unwrap();
        let api: CanaryRef = "billing/api".parse().unwrap();
        assert!(channels.allows(
            "19:b@thread.tacv2",
            std::slice::from_ref(&other_repo),
            Some(&api)
        ));
        assert!(!channels.allows(
            "19:b@thread.tacv2",
            std::slice::from_ref(&pr),
            Some(&podinfo)
        ));
        assert!(channels.allows("19:s@thread.tacv2", std::slice::from_ref(&pr), Some(&api)));
        assert!(!channels.allows(
            "19:s@thread.tacv2",
            std::slice::from_ref(&other_repo),
            Some(&api)
        ));
        assert!(channels.allows("19:c@thread.tacv2", &[other_repo], Some(&podinfo)));
        assert!(!channels.allows("19:c@thread.tacv2", std::slice::from_ref(&pr), Some(&api)));
        assert!(!channels.allows("19:unbound@thread.tacv2", &[pr], Some(&podinfo)));
        for bad in [
            "[[teams.channels]]\nconversation = \"19:x\"\n",
            "[[teams.channels]]\nconversation = \"19:x\"\nnamespace = \"a\"\ncanary = \"a/b\"\n",
            "[[teams.channels]]\nconversation = \" \"\nnamespace = \"a\"\n",
            "[[teams.channels]]\nconversation = \"19:x\"\nrepository = \"nope\"\n",
        ] {
            assert!(Policy::parse(bad, Permission::Write, &[]).is_err(), "{bad}");
        }
    }

    #[test]
    fn slack_channels_are_bound_like_teams_channels_and_kept_apart() {
        let text = "[[slack.channels]]\nchannel = \"C0BILLING\"\nnamespace = \"billing\"\n";
        let p = Policy::parse(text, Permission::Write, &[]).unwrap();
        let api: CanaryRef = "billing/api".parse().unwrap();
        let podinfo: CanaryRef = "test/podinfo".parse().unwrap();
        assert!(p.slack_channels().allows("C0BILLING", &[], Some(&api)));
        assert!(!p.slack_channels().allows("C0BILLING", &[], Some(&podinfo)));
        assert!(!p.teams_channels().allows("C0BILLING", &[], Some(&api)));
        let bad = "[[slack.channels]]\nchannel = \"C1\"\n";
        assert!(Policy::parse(bad, Permission::Write, &[]).is_err());
    }

    #[test]
    fn slack_approvers_come_from_the_most_specific_place() {
        let p = policy();
        assert_eq!(p.slack(Verb::Rollback).approvers, vec!["S9".to_string()]);
        assert_eq!(
            p.slack(Verb::Promote).approvers,
            vec!["U1".to_string(), "S2".to_string()]
        );
        let env_only = Policy::parse("", Permission::Write, &[" U0 ".into(), "".into()]).unwrap();
        let rule = env_only.slack(Verb::Promote);
        assert_eq!(rule.approvers, vec!["U0".to_string()]);
        assert_eq!(rule.setting, "the policy file's [slack] approvers");
    }

    #[test]
    fn users_map_both_ways() {
        let p = policy();
        assert_eq!(p.slack_user_of("Alice"), Some("U1"));
        assert_eq!(p.github_login_of("U1"), Some("alice"));
        assert_eq!(p.github_login_of("U2"), None);
    }

    #[test]
    fn users_name_their_slack_and_teams_ids() {
        let text = "[users]\nalice = \"U1\"\nbob = { slack = \"U2\", teams = \"6E1F-AB\" }\ncarol = { teams = \"c0\" }\n";
        let p = Policy::parse(text, Permission::Write, &[]).unwrap();
        assert_eq!(p.github_login_of("U1"), Some("alice"));
        assert_eq!(p.github_login_of("U2"), Some("bob"));
        assert_eq!(p.github_login_of_teams("6e1f-ab"), Some("bob"));
        assert_eq!(p.github_login_of_teams("C0"), Some("carol"));
        assert_eq!(
            p.github_login_of_teams("U1"),
            None,
            "a Slack id is not a Teams id"
        );
        assert_eq!(p.slack_user_of("carol"), None);
        let typo = "[users]\nbob = { teamz = \"x\" }\n";
        assert!(Policy::parse(typo, Permission::Write, &[]).is_err());
    }

    #[test]
    fn teams_approvers_come_from_the_most_specific_place() {
        let (t1, t9, t0) = (
            "11111111-1111-4111-8111-111111111111",
            "99999999-9999-4999-8999-999999999999",
            "00000000-0000-4000-8000-000000000000",
        );
        let text = format!("[teams]\napprovers = [\"{t1}\"]\nforbid_self_approval = true\n[teams.commands.rollback]\napprovers = [\"{t9}\"]\n[teams.commands.force]\napprovers = [\"{t0}\"]\n");
        let p = Policy::parse(&text, Permission::Write, &[]).unwrap();
        let promote = p.teams(Verb::Promote);
        assert_eq!(promote.approvers, vec![t1.to_string()]);
        assert!(promote.forbid_self_approval);
        assert_eq!(promote.setting, "teams.approvers in policy");
        assert_eq!(p.teams(Verb::Rollback).approvers, vec![t9.to_string()]);
        assert_eq!(
            p.teams_force().map(|r| r.approvers),
            Some(vec![t0.to_string()])
        );
        let email = "[teams.commands.promote]\napprovers = [\"alice@example.com\"]\n";
        let e = Policy::parse(email, Permission::Write, &[]).unwrap_err();
        assert!(
            format!("{e:#}").contains("is an email or sign-in name"),
            "{e:#}"
        );
        for bad in [
            "alice",
            "Steve",
            "Ursula Smith",
            "Wendy@example.com",
            "Sre-oncall",
        ] {
            let slack = format!("[slack]\napprovers = [\"{bad}\"]\n");
            assert!(
                Policy::parse(&slack, Permission::Write, &[]).is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            p.slack(Verb::Promote).approvers,
            Vec::<String>::new(),
            "Slack's stay apart"
        );
        let none = Policy::parse("", Permission::Write, &[]).unwrap();
        assert_eq!(
            none.teams(Verb::Promote).setting,
            "the policy file's [teams] approvers"
        );
        assert_eq!(none.teams_force(), None);
    }

    #[test]
    fn an_approving_review_counts_only_when_the_policy_says_so() {
        let off = Policy::parse("", Permission::Write, &[]).unwrap();
        assert_eq!(off.approving_review(), ApprovingReview::Off);
        let on = "[github]\napproving_review = \"promote\"\n";
        let on = Policy::parse(on, Permission::Write, &[]).unwrap();
        assert_eq!(on.approving_review(), ApprovingReview::Promote);
        let wrong = "[github]\napproving_review = \"start\"\n";
        let e = Policy::parse(wrong, Permission::Write, &[]).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("`off`, `promote`") || e.contains("off") && e.contains("promote"),
            "{e}"
        );
    }

    #[test]
    fn a_canarys_environment_is_its_own_then_its_namespaces_then_none() {
        let text = "[[github.environments]]\nnamespace = \"prod\"\nenvironment = \"production\"\n\n[[github.environments]]\ncanary = \"prod/billing\"\nenvironment = \"billing-production\"\n";
        let p = Policy::parse(text, Permission::Write, &[]).unwrap();
        let of = |c: &str| p.environment_of(&c.parse().unwrap());
        assert_eq!(of("prod/podinfo").as_deref(), Some("production"));
        assert_eq!(of("prod/billing").as_deref(), Some("billing-production"));
        assert_eq!(of("test/podinfo"), None, "never the namespace itself");
        for wrong in [
            "[[github.environments]]\nenvironment = \"x\"\n",
            "[[github.environments]]\nnamespace = \"a\"\ncanary = \"a/b\"\nenvironment = \"x\"\n",
            "[[github.environments]]\nnamespace = \"a\"\nenvironment = \" \"\n",
            "[[github.environments]]\ncanary = \"nope\"\nenvironment = \"x\"\n",
        ] {
            assert!(
                Policy::parse(wrong, Permission::Write, &[]).is_err(),
                "{wrong}"
            );
        }
    }

    #[test]
    fn an_environment_is_protected_by_the_gate_its_table_names() {
        let text = "[[github.protection]]\nenvironment = \"production\"\ngate = \"promote\"\n\n[[github.protection]]\nenvironment = \"canary\"\ngate = \"start\"\n\n[[github.protection]]\nenvironment = \"staging\"\n";
        let p = Policy::parse(text, Permission::Write, &[]).unwrap();
        assert_eq!(p.protection_gate("production"), Some(GateKind::Promote));
        assert_eq!(p.protection_gate("canary"), Some(GateKind::Start));
        assert_eq!(
            p.protection_gate("staging"),
            Some(GateKind::Promote),
            "by default"
        );
        assert_eq!(p.protection_gate("qa"), None);
        for (wrong, says) in [
            ("[[github.protection]]\nenvironment = \"x\"\ngate = \"rollback\"\n", "start, promote or traffic"),
            ("[[github.protection]]\nenvironment = \"x\"\ngate = \"promot\"\n", "start, promote or traffic"),
            ("[[github.protection]]\nenvironment = \"\"\n", "1 to 255"),
            ("[[github.protection]]\nenvironment = \"x\"\n\n[[github.protection]]\nenvironment = \" x\"\n", "earlier table"),
            ("[[github.protection]]\ngate = \"promote\"\n", "environment"),
        ] {
            let e = Policy::parse(wrong, Permission::Write, &[]).unwrap_err();
            let e = format!("{e:#}");
            assert!(e.contains(says), "{wrong}: {e}");
        }
    }

    #[test]
    fn typos_are_errors() {
        assert!(Policy::parse(
            "[github]\nmin_permision = \"write\"",
            Permission::Write,
            &[]
        )
        .is_err());
    }
}
