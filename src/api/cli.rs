//! `gatebot gates …`: the operator API from a terminal.

use anyhow::{bail, Context};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

use super::wire::{FreezeList, FreezeView, GateLine, GateList, GateView, Lifted};
use crate::config::{GatesAction, GatesArgs, Setting};
use crate::gate::state::rfc3339;
use crate::gate::{Answer, Gate, GateStatus};

pub async fn run(args: GatesArgs) -> anyhow::Result<()> {
    let server = Server::new(
        &args.server,
        args.token.clone(),
        &args.outbound,
        local_user(),
    )?;
    match &args.action {
        GatesAction::List => {
            let gates = list_all(&server).await?;
            match args.json {
                true => print_json(&json!({ "gates": gates }))?,
                false => print_list(&gates),
            }
        }
        GatesAction::Show { gate } => {
            let path = format!("/api/v1/gates/{}", api_path(gate));
            let view: GateView = server.call(server.get(&path), "show the gate").await?;
            match args.json {
                true => print_json(&view)?,
                false => print_detail(&view),
            }
        }
        GatesAction::Open { gate, reason, env } | GatesAction::Close { gate, reason, env } => {
            let (path, what) = match &args.action {
                GatesAction::Open { .. } => ("/api/v1/gates/open", "open the gate"),
                _ => ("/api/v1/gates/close", "close the gate"),
            };
            let mut body = json!({ "gate": gate, "reason": reason });
            if let Some(env) = env {
                body["env"] = json!(env);
            }
            let req = server.request(reqwest::Method::POST, path).json(&body);
            let changed: Changed = server.call(req, what).await?;
            let gates = match changed {
                Changed::One(gate) => vec![*gate],
                Changed::Many { gates } => gates,
            };
            for gate in &gates {
                match args.json {
                    true => print_json(gate)?,
                    false => println!("{} is {}", gate.key, gate.status.name()),
                }
            }
        }
    }
    Ok(())
}

/// What an open or close answers: the gate, or with `--env` each cluster's.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Changed {
    Many { gates: Vec<Gate> },
    One(Box<Gate>),
}

/// An answer as `--json` shows it: through a `serde_json::Value`, keys in
/// alphabetical order.
fn print_json(answer: &impl Serialize) -> anyhow::Result<()> {
    let value = serde_json::to_value(answer)?;
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}

/// The operator API as the commands call it.
pub(super) struct Server {
    base: String,
    client: reqwest::Client,
    token: Option<SecretString>,
    /// Who runs the command, as the server is told (a claim; the token is who).
    actor: String,
}

impl Server {
    pub(super) fn new(
        server: &str,
        token: Option<SecretString>,
        outbound: &crate::config::OutboundConfig,
        actor: String,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            base: server.trim_end_matches('/').to_string(),
            client: crate::outbound::client(outbound, std::time::Duration::from_secs(15))?,
            token,
            actor,
        })
    }

    /// A request to `path`, from the CLI, with the token if there is one.
    pub(super) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .header("x-gatebot-source", "cli")
            .header("x-gatebot-actor", &self.actor);
        match &self.token {
            Some(t) => req.bearer_auth(t.expose_secret()),
            None => req,
        }
    }

    pub(super) fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::GET, path)
    }

    /// Sends one request and reads its answer, or says what went wrong.
    async fn call<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
        what: &str,
    ) -> anyhow::Result<T> {
        let base = &self.base;
        let (status, body) = exchange(req).await.map_err(|e| match e {
            NoAnswer::Unreachable(why) => anyhow::anyhow!(
                "cannot reach gatebot at {base} ({why}): is it running? Set --server or GATEBOT_SERVER"
            ),
            NoAnswer::CutOff(e) => e,
        })?;
        if !status.is_success() {
            let refused = Refused {
                what: what.to_string(),
                status: status.as_u16(),
                body: body.trim().to_string(),
            };
            return Err(token_hint(refused, self.token.is_some()));
        }
        read(&body).with_context(|| format!("could not {what}"))
    }
}

/// Why a request got no answer.
pub(super) enum NoAnswer {
    /// Not sent, or nothing came back: the reason.
    Unreachable(String),
    CutOff(anyhow::Error),
}

/// Sends one request: the answer's status and body.
pub(super) async fn exchange(
    req: reqwest::RequestBuilder,
) -> Result<(reqwest::StatusCode, String), NoAnswer> {
    let response = req
        .send()
        .await
        .map_err(|e| NoAnswer::Unreachable(crate::outbound::why(&e)))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .context("the server's answer was cut off")
        .map_err(NoAnswer::CutOff)?;
    Ok((status, body))
}

/// An answer the server wrote (`wire`), or why it is not one.
pub(super) fn read<T: DeserializeOwned>(body: &str) -> anyhow::Result<T> {
    serde_json::from_str(body)
        .context("the server's answer is not what this gatebot reads (is it another version?)")
}

/// The server said no; [`token_hint`] adds whose token is missing.
#[derive(Debug, thiserror::Error)]
#[error("could not {what}: {status} {body}")]
struct Refused {
    what: String,
    status: u16,
    body: String,
}

/// Says where an admin-token refusal is fixed: this command's environment, or
/// the server's (whose own answer says so when it has no token).
fn token_hint(refused: Refused, has_token: bool) -> anyhow::Error {
    let hint = match (refused.status, has_token) {
        (401, false) => " (this command has no token: set GATEBOT_ADMIN_TOKEN for this command to the server's token or your own)",
        (401, true) => " (this command's GATEBOT_ADMIN_TOKEN is not the server's: use the token `gatebot serve` runs with, or your own)",
        (403, false) if refused.body.contains("GATEBOT_ADMIN_TOKEN") => {
            " (this command has no token either: set GATEBOT_ADMIN_TOKEN for it too)"
        }
        _ => "",
    };
    anyhow::anyhow!("{refused}{hint}")
}

/// Every gate, following the list's pages.
async fn list_all(server: &Server) -> anyhow::Result<Vec<GateLine>> {
    let mut gates = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/gates?limit={}", super::MAX_PAGE);
        if let Some(c) = &cursor {
            path.push_str("&cursor=");
            path.extend(form_urlencoded::byte_serialize(c.as_bytes()));
        }
        let page: GateList = server.call(server.get(&path), "list gates").await?;
        gates.extend(page.gates);
        match page.next {
            // A cursor that does not move would loop forever.
            Some(next) if cursor.as_deref() == Some(next.as_str()) => {
                bail!("the server's gate list repeats the page after {next}")
            }
            Some(next) => cursor = Some(next),
            None => return Ok(gates),
        }
    }
}

/// `/gates/promote/pr/42`, `gates/promote/pr/42` and `promote/pr/42` all name one gate.
pub(super) fn api_path(gate: &str) -> String {
    let g = gate.trim().trim_matches('/');
    g.strip_prefix("gates/").unwrap_or(g).to_string()
}

fn local_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "cli".into())
}

fn print_list(gates: &[GateLine]) {
    if gates.is_empty() {
        println!("no gates yet: point a Flagger webhook at /gates/<kind>/pr/<n>");
        return;
    }
    println!("{:<48} {:<7} {:<24} CANARIES", "GATE", "STATE", "BY");
    for g in gates {
        let by = g.by.as_ref().map(|a| format!("{} ({})", a.name, a.source));
        let canaries: Vec<String> = g
            .canaries
            .iter()
            .map(|c| {
                let waiting = if c.waiting_since.is_some() {
                    " waiting"
                } else {
                    ""
                };
                format!("{}@{}{waiting}", c.canary, c.checksum)
            })
            .collect();
        println!(
            "{:<48} {:<7} {:<24} {}",
            g.gate,
            g.state,
            by.unwrap_or_else(|| "-".into()),
            canaries.join(", ")
        );
    }
}

fn print_detail(view: &GateView) {
    println!("gate:  {}", view.gate.key);
    println!("state: {}", state_line(view));
    if let Some(change) = view.change() {
        println!("by:    {}", change.by.name);
    }
    for o in &view.observations {
        println!(
            "canary {} revision {} phase {}: {} ({})",
            o.canary, o.checksum, o.phase, o.answer, o.reason
        );
    }
    println!("history:");
    for a in &view.audit {
        println!(
            "  {} {:<7} {} via {}{}",
            rfc3339(a.at),
            a.action.as_str(),
            a.actor.name,
            a.actor.source,
            a.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        );
    }
}

/// The gate's state, and when it is open but some canary is answered closed
/// (pinned to another revision, a freeze…), which and why, in the same line.
fn state_line(view: &GateView) -> String {
    let GateStatus::Open(approval) = &view.gate.status else {
        return view.gate.status.name().to_string();
    };
    let closed: Vec<String> = view
        .observations
        .iter()
        .filter(|o| o.answer == Answer::Closed)
        .map(|o| {
            let canary = o.canary.to_string();
            let at = &o.checksum;
            match approval.pins.get(&canary) {
                Some(pinned) if pinned != at => format!(
                    "{canary}: it is at revision {at}, and the approval is pinned to its revision {pinned}"
                ),
                _ => format!("{canary}: {}", o.reason),
            }
        })
        .collect();
    if closed.is_empty() {
        return "open".to_string();
    }
    format!("open, but closed for {}", closed.join("; "))
}

pub struct ConfigReport {
    pub ok: bool,
    pub text: String,
}

impl ConfigReport {
    pub fn line(&mut self, line: impl std::fmt::Display) {
        use std::fmt::Write;
        let _ = writeln!(self.text, "{line}");
    }

    pub fn problem(&mut self, problem: impl std::fmt::Display) {
        self.ok = false;
        self.line(format_args!("problem:         {problem}"));
    }

    pub fn warning(&mut self, warning: impl std::fmt::Display) {
        self.line(format_args!("warning:         {warning}"));
    }

    /// The last line: whether the configuration is OK.
    pub fn end(&mut self) {
        self.line(if self.ok {
            "configuration OK"
        } else {
            "configuration has problems"
        });
    }
}

/// `gatebot check-config`: what is configured, what is wrong, and whether the store opens.
pub async fn check_config(
    config: crate::Config,
    settings: &[crate::config::Setting],
    unknown: &[crate::config::UnknownName],
) -> ConfigReport {
    let mut report = ConfigReport {
        ok: true,
        text: String::new(),
    };
    list_settings(&mut report, &config, settings);
    summarise(&mut report, &config, settings);
    // A problem here though `serve` only warns: check-config answers "is what
    // I wrote what runs?", and a misspelt name means it is not.
    for name in unknown {
        report.problem(name);
    }
    check_parts(&mut report, &config);
    match crate::store::Store::connect(&config.database_url).await {
        Ok(store) => {
            report.line(format_args!(
                "store:           {} (reachable, migrated)",
                store.backend().as_str()
            ));
            if config.teams.app_id().is_some() {
                teams_conversations(&mut report, &store, config.teams.channel()).await;
            }
            if config.prometheus.url().is_some() {
                evidence(&mut report, &config, &store).await;
            }
            store.close().await;
        }
        Err(e) => report.problem(format_args!("{e:#}")),
    }
    report
}

/// Whether Prometheus answers, and which provider's queries each waiting
/// canary gets (docs/evidence.md).
async fn evidence(report: &mut ConfigReport, config: &crate::Config, store: &crate::store::Store) {
    let calls = crate::metrics::Metrics::new().outbound("prometheus");
    let prometheus = match crate::evidence::prometheus::Prometheus::from_config(
        &config.prometheus,
        config.limits.prometheus_timeout,
        calls,
    ) {
        Ok(Some(p)) => p,
        Ok(None) => return,
        Err(e) => return report.problem(format_args!("GATEBOT_PROMETHEUS_URL: {e:#}")),
    };
    let url = crate::config::url_shown(config.prometheus.url().unwrap_or_default());
    match prometheus.instant("vector(1)").await {
        Ok(_) => report.line(format_args!("prometheus:      {url} answers")),
        Err(why) => report.warning(format_args!(
            "prometheus:      {url}: {why}: messages will say \"metrics unavailable\""
        )),
    }
    // The policy's own problems are reported with the policy.
    let Ok(policy) = crate::policy::Policy::from_config(config) else {
        return;
    };
    let evidence =
        crate::evidence::Evidence::new(None, policy.evidence().clone(), Default::default());
    let waiting = match store.waits().open_waits_after(0).await {
        Ok(waiting) => waiting,
        Err(e) => return report.problem(format_args!("open waits: {e:#}")),
    };
    let mut seen = std::collections::BTreeSet::new();
    for wait in waiting {
        let Some(canary) = wait.canary.filter(|c| seen.insert(c.clone())) else {
            continue;
        };
        let metadata = crate::evidence::strings(&wait.metadata);
        let from = if metadata.contains_key("provider") {
            "its metadata"
        } else {
            "the policy"
        };
        report.line(format_args!(
            "evidence:        {canary} uses {}'s queries (from {from})",
            evidence.provider_of(&metadata).name()
        ));
    }
}

/// The Teams conversations the bot was added to (where cards may go), and
/// whether GATEBOT_TEAMS_CHANNEL is one of them.
async fn teams_conversations(
    report: &mut ConfigReport,
    store: &crate::store::Store,
    channel: Option<&str>,
) {
    const SHOWN: i64 = 50;
    let known = match store.teams().teams_conversations(SHOWN).await {
        Ok(known) => known,
        Err(e) => return report.problem(format_args!("Teams conversations: {e:#}")),
    };
    if known.is_empty() {
        report.line("teams:           the bot was not added to any conversation yet");
    }
    for c in &known {
        report.line(format_args!(
            "teams:           {} ({} {:?})",
            c.conversation_id, c.kind, c.name
        ));
    }
    let listed = |id: &str| known.iter().any(|c| c.conversation_id == id);
    if let Some(channel) = channel.filter(|c| !listed(c)) {
        if known.len() < SHOWN as usize {
            report.warning(format_args!(
                "GATEBOT_TEAMS_CHANNEL {channel} is not a conversation the bot was added to: no card can be posted there"
            ));
        }
    }
}

/// Each setting, where it came from (never a secret's value), and what an
/// unset one means.
fn list_settings(report: &mut ConfigReport, config: &crate::Config, settings: &[Setting]) {
    let width = settings.iter().map(|s| s.env.len()).max().unwrap_or(0);
    // Under the headings .env.example uses; a setting in no group (none, by
    // config's test) is listed last rather than lost.
    let grouped = |env: &str| {
        crate::config::GROUPS
            .iter()
            .any(|(_, names)| names.contains(&env))
    };
    let groups = crate::config::GROUPS
        .iter()
        .map(|(heading, names)| {
            (
                *heading,
                names
                    .iter()
                    .filter_map(|n| settings.iter().find(|s| s.env == *n))
                    .collect::<Vec<_>>(),
            )
        })
        .chain([(
            "Others",
            settings.iter().filter(|s| !grouped(&s.env)).collect(),
        )]);
    for (heading, members) in groups.filter(|(_, m)| !m.is_empty()) {
        report.line(format_args!("# {heading}"));
        for s in members {
            let value = setting_value(s, config);
            report.line(format_args!(
                "{:<width$} {:<12} {value}",
                s.env,
                s.origin.as_str()
            ));
        }
    }
    for s in settings
        .iter()
        .filter(|s| s.origin == crate::config::Origin::Unset)
        // A GitHub App stands in for the token.
        .filter(|s| !(s.env == "GATEBOT_GITHUB_TOKEN" && config.github.app_id.is_some()))
    {
        if let Some(meaning) = crate::config::unset_meaning(&s.env) {
            report.line(format_args!("{} unset: {meaning}", s.env));
        }
    }
}

/// What the server will do: where it listens, who may use it, which channels are on.
fn summarise(report: &mut ConfigReport, config: &crate::Config, settings: &[Setting]) {
    let gh = &config.github;
    let sl = &config.slack;
    report.line(format_args!("listen:          {}", config.listen));
    report.line(format_args!(
        "approval TTL:    {}",
        approval_ttl(config, settings)
    ));
    report.line(format_args!("operator API:    {}", operators(config)));
    let github = match (&gh.token, gh.app_id) {
        (Some(_), _) => "token",
        (None, Some(_)) => "GitHub App",
        (None, None) => "off",
    };
    report.line(format_args!(
        "github:          {github} (API {})",
        crate::config::url_shown(&gh.api_url)
    ));
    if let Some(repo) = &gh.repository {
        report.line(format_args!("default repo:    {repo}"));
    }
    let slack = match (
        sl.bot_token.is_some(),
        sl.signing_secret.is_some(),
        sl.socket_mode_token().is_some(),
    ) {
        (false, _, _) => "off",
        (true, true, true) => "on, HTTP and Socket Mode",
        (true, false, true) => "on, Socket Mode",
        (true, _, false) => "on, HTTP",
    };
    report.line(format_args!(
        "slack:           {slack} (API {})",
        crate::config::url_shown(&sl.api_url),
    ));
    report.line(format_args!(
        "outbound:        {}",
        crate::outbound::describe(&config.outbound)
    ));
}

/// The parts built from the settings: outbound clients, templates, the
/// Flagger door, the policy file; each problem and warning.
fn check_parts(report: &mut ConfigReport, config: &crate::Config) {
    if let Err(e) = crate::outbound::builder(&config.outbound) {
        report.problem(format_args!("{e:#}"));
    }
    for problem in config.problems() {
        report.problem(problem);
    }
    for warning in config.warnings() {
        report.warning(warning);
    }
    if let Err(e) = crate::templates::Templates::new(config.templates_dir.clone()) {
        report.problem(format_args!("{e:#}"));
    }
    report.line(format_args!(
        "flagger:         {}",
        flagger_door(config.flagger_tokens())
    ));
    kubernetes(report, &config.kubernetes);
    match crate::policy::Policy::from_config(config) {
        Ok(policy) => {
            if let Some(path) = &config.policy {
                report.line(format_args!(
                    "policy:          {} ({} deadline rule(s))",
                    path.display(),
                    policy.deadlines().len()
                ));
            }
            let promote = crate::command::Verb::Promote;
            report.line(format_args!(
                "approvers:       Slack {}, Teams {} for promote (the policy file's [slack] and [teams])",
                policy.slack(promote).approvers.len(),
                policy.teams(promote).approvers.len()
            ));
            if let Some(limits) = policy.limits() {
                let changed = limits.changed();
                report.line(format_args!(
                    "limits:          {}",
                    match changed.is_empty() {
                        true => "the defaults ([limits] sets none)".to_string(),
                        false => changed.join(", "),
                    }
                ));
                for warning in limits.warnings() {
                    report.warning(warning);
                }
            }
            if policy.approving_review() == crate::policy::ApprovingReview::Promote {
                report.line(
                    "reviews:         an approving review counts as /promote ([github] approving_review)",
                );
            }
            for env in policy.environments().all() {
                let names: Vec<&str> = env.clusters.iter().map(|c| c.as_str()).collect();
                let after = match &env.after {
                    Some(a) => {
                        format!(", after {a}, soak {}", humantime::format_duration(env.soak))
                    }
                    None => String::new(),
                };
                report.line(format_args!(
                    "environment:     {} ({}){after}",
                    env.name,
                    names.join(", ")
                ));
            }
            for (environment, kind) in policy.protections() {
                report.line(format_args!(
                    "protection:      a deployment to `{environment}` waits for the PR's {kind} gate ([[github.protection]])"
                ));
            }
            reasons(report, policy.reasons());
            if let Some(site) = policy.change() {
                change(report, site, config);
            }
            for warning in policy.door_warnings(config.flagger_tokens()) {
                report.warning(warning);
            }
        }
        Err(e) => report.problem(format_args!("{e:#}")),
    }
}

/// Which commands must say why (`[[reasons]]`), and a rule that cannot do what it says.
fn reasons(report: &mut ConfigReport, rules: &[crate::gate::reason::ReasonRule]) {
    use crate::gate::reason::ReasonKind;
    for r in rules {
        let place = r
            .environment
            .as_deref()
            .map(|e| format!(" in {e}"))
            .unwrap_or_default();
        if r.kind == ReasonKind::Force && !r.required {
            report.warning(
                "[[reasons]] kind = \"force\" with required = false changes nothing: break glass always needs a reason",
            );
            continue;
        }
        let needs = if r.required {
            "needs a reason"
        } else {
            "needs no reason"
        };
        report.line(format_args!(
            "reasons:         {}{place} {needs} ([[reasons]])",
            r.kind
        ));
    }
}

/// Which gates are tied to change requests (`[change]`), and what it lacks.
fn change(
    report: &mut ConfigReport,
    site: &crate::policy::ChangeSite,
    config: &crate::config::Config,
) {
    use crate::gate::ticket::Mode;
    let rule = &site.rule;
    let kinds: Vec<String> = rule.kinds.iter().map(|k| k.to_string()).collect();
    let place = match rule.environments.as_slice() {
        [] => String::new(),
        envs => format!(" in {}", envs.join(", ")),
    };
    let naming = rule
        .service
        .as_deref()
        .map(|s| format!(" naming {s}"))
        .unwrap_or_default();
    let how = match rule.mode {
        Mode::Reference => format!("needs an approved change{naming}, named in the approval"),
        Mode::Create => format!(
            "opens a change{naming} for each waiting canary, every {}",
            humantime::format_duration(site.poll)
        ),
    };
    report.line(format_args!(
        "change:          {}{place} {how} ({} at {}, [change])",
        kinds.join(", "),
        rule.provider.name(),
        crate::config::url_shown(&site.url)
    ));
    if config.change.basic_auth().is_none() {
        report.problem(
            "[change] needs GATEBOT_CHANGE_USER and GATEBOT_CHANGE_PASSWORD (ServiceNow's integration user, or a Jira email and API token)",
        );
    }
    if rule.mode == Mode::Create && config.flagger_tokens().is_empty() {
        report.warning(
            "[change] mode = \"create\" opens no change without GATEBOT_FLAGGER_TOKENS: only a wait a Flagger token vouched for opens one",
        );
    }
}

/// What the policy file's `[kubernetes]` table turns on, when it turns anything on.
fn kubernetes(report: &mut ConfigReport, k: &crate::config::KubernetesConfig) {
    if k.lookup {
        let container = k.container.as_deref().unwrap_or("the first container");
        report.line(format_args!(
            "kubernetes:      a canary's own gate is its PR's: the commit from the annotation {}, else the image tag of {container}; the repository from {}",
            k.commit_annotation, k.repository_annotation
        ));
    }
    if let Some(secret) = &k.app_secret {
        report.line(format_args!(
            "kubernetes:      /ui/setup/github writes the new App into the Secret {secret}"
        ));
    }
}

/// What check-config shows for a setting: never a secret, but the store's URL
/// without its password, every other URL without its password too
/// (`GATEBOT_PROMETHEUS_URL=http://user:pass@host`), and "(empty)" rather
/// than a mark for an empty value.
fn setting_value(s: &crate::config::Setting, config: &crate::Config) -> String {
    use crate::config::Origin;
    match s {
        Setting {
            origin: Origin::Unset,
            ..
        } => "-".to_string(),
        Setting { empty: true, .. } => "(empty)".to_string(),
        // Hashes, not secrets, but long: the names say what matters.
        _ if s.env == "GATEBOT_API_TOKENS" => config
            .api_tokens()
            .map(|(name, _)| name)
            .collect::<Vec<_>>()
            .join(", "),
        _ if s.env == "GATEBOT_DATABASE_URL" => crate::config::url_shown(&config.database_url),
        Setting { secret: true, .. } => "(secret, set)".to_string(),
        // Any URL-valued setting, however it is written (`http:/u:p@h` parses too).
        Setting {
            value: Some(value), ..
        } if value.contains("://") || s.env.ends_with("_URL") => crate::config::url_shown(value),
        Setting { value, .. } => value.clone().unwrap_or_default(),
    }
}

/// The TTL as it was written (`24h`, as everywhere else), and what it means.
fn approval_ttl(config: &crate::Config, settings: &[crate::config::Setting]) -> String {
    if config.approval_ttl.is_zero() {
        return "0 (approvals never expire)".to_string();
    }
    let written = settings
        .iter()
        .find(|s| s.env == "GATEBOT_APPROVAL_TTL")
        .and_then(|s| s.value.clone())
        .unwrap_or_else(|| humantime::format_duration(config.approval_ttl).to_string());
    format!("{written} (an approval expires {written} after it is given)")
}

/// Who may reach Flagger's side: the clusters with tokens, or anyone.
pub fn flagger_door(tokens: &crate::gate::FlaggerTokens) -> String {
    if tokens.is_empty() {
        return "open: no GATEBOT_FLAGGER_TOKENS, so anyone who can reach the port can create waits".into();
    }
    let names: Vec<&str> = tokens.clusters().map(|c| c.as_str()).collect();
    format!("checks need a token, of cluster {}", names.join(", "))
}

/// Who may use the operator API: each token is one person.
fn operators(config: &crate::Config) -> String {
    let mut who: Vec<String> = Vec::new();
    if config.admin_token().is_some() {
        who.push("the admin token (one person, \"admin\")".into());
    }
    let named: Vec<&str> = config.api_tokens().map(|(name, _)| name).collect();
    if !named.is_empty() {
        who.push(format!("named tokens: {}", named.join(", ")));
    }
    if who.is_empty() {
        "read-only (GATEBOT_ADMIN_TOKEN and GATEBOT_API_TOKENS unset)".into()
    } else {
        format!("enabled for {}", who.join("; "))
    }
}

fn server_of(args: &crate::config::ServerArgs) -> anyhow::Result<Server> {
    Server::new(
        &args.server,
        args.token.clone(),
        &args.outbound,
        local_user(),
    )
}

/// `gatebot freeze [scope] --reason … [--for 2h | --until …]`, or the list.
pub async fn freeze(args: crate::config::FreezeArgs) -> anyhow::Result<()> {
    let server = server_of(&args.server)?;
    let Some(reason) = args.reason else {
        let list: FreezeList = server
            .call(server.get("/api/v1/freezes"), "list freezes")
            .await?;
        if list.freezes.is_empty() {
            println!("nothing is frozen");
        }
        for f in list.freezes {
            println!("{}", f.line);
        }
        return Ok(());
    };
    let body = json!({
        "scope": args.scope.as_deref().unwrap_or("all"), "reason": reason,
        "for": args.for_, "until": args.until,
    });
    let req = server
        .request(reqwest::Method::POST, "/api/v1/freezes")
        .json(&body);
    let freeze: FreezeView = server.call(req, "freeze").await?;
    println!("{}", freeze.line);
    Ok(())
}

/// `gatebot unfreeze [scope]`.
pub async fn unfreeze(args: crate::config::UnfreezeArgs) -> anyhow::Result<()> {
    let server = server_of(&args.server)?;
    let scope = args.scope.as_deref().unwrap_or("all");
    let path = format!(
        "/api/v1/freezes?scope={}",
        form_urlencoded::byte_serialize(scope.as_bytes()).collect::<String>()
    );
    let req = server.request(reqwest::Method::DELETE, &path);
    let answer: Lifted = server.call(req, "unfreeze").await?;
    match answer.lifted.len() {
        0 => println!("nothing was frozen in {scope}"),
        n => println!("lifted {n} freeze(s) of {scope}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::api_path;

    #[test]
    fn gate_keys_work_with_or_without_gates_prefix() {
        assert_eq!(api_path("/gates/promote/pr/42"), "promote/pr/42");
        assert_eq!(api_path("promote/pr/42"), "promote/pr/42");
        assert_eq!(
            api_path("/loadtester/gate/test/podinfo"),
            "loadtester/gate/test/podinfo"
        );
    }
}
