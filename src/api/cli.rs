//! `gatebot gates …`: the operator API from a terminal.

use anyhow::{bail, Context};
use secrecy::ExposeSecret;
use serde_json::{json, Value};

use crate::config::{GatesAction, GatesArgs, Setting};
use crate::gate::state::rfc3339;

pub async fn run(args: GatesArgs) -> anyhow::Result<()> {
    let base = args.server.trim_end_matches('/').to_string();
    let client = crate::outbound::client(&args.outbound, std::time::Duration::from_secs(15))?;
    let auth = |req: reqwest::RequestBuilder| {
        let req = req
            .header("x-gatebot-source", "cli")
            .header("x-gatebot-actor", local_user());
        match &args.token {
            Some(t) => req.bearer_auth(t.expose_secret()),
            None => req,
        }
    };
    let (req, what) = match &args.action {
        GatesAction::List => {
            let gates = list_all(&base, args.token.is_some(), |url| auth(client.get(url))).await?;
            let value = json!({ "gates": gates });
            if args.json {
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                print_list(&value);
            }
            return Ok(());
        }
        GatesAction::Show { gate } => (
            client.get(format!("{base}/api/v1/gates/{}", api_path(gate))),
            "show the gate",
        ),
        GatesAction::Open { gate, reason } => (
            client
                .post(format!("{base}/api/v1/gates/open"))
                .json(&json!({ "gate": gate, "reason": reason })),
            "open the gate",
        ),
        GatesAction::Close { gate, reason } => (
            client
                .post(format!("{base}/api/v1/gates/close"))
                .json(&json!({ "gate": gate, "reason": reason })),
            "close the gate",
        ),
    };
    let has_token = args.token.is_some();
    let value = call(auth(req), &base, what)
        .await
        .map_err(|e| token_hint(e, has_token))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    match &args.action {
        GatesAction::List => print_list(&value),
        GatesAction::Show { .. } => print_detail(&value),
        GatesAction::Open { .. } | GatesAction::Close { .. } => {
            println!(
                "{} is {}",
                value["key"].as_str().unwrap_or("?"),
                value["state"].as_str().unwrap_or("?")
            );
        }
    }
    Ok(())
}

/// Sends one request and returns its JSON answer, or says what went wrong.
async fn call(req: reqwest::RequestBuilder, base: &str, what: &str) -> anyhow::Result<Value> {
    let response = req.send().await.map_err(|e| {
        anyhow::anyhow!(
            "cannot reach gatebot at {base} ({}): is it running? Set --server or GATEBOT_SERVER",
            crate::outbound::why(&e)
        )
    })?;
    let status = response.status();
    let body = response
        .text()
        .await
        .context("the server's answer was cut off")?;
    if !status.is_success() {
        return Err(Refused {
            what: what.to_string(),
            status: status.as_u16(),
            body: body.trim().to_string(),
        }
        .into());
    }
    serde_json::from_str(&body).context("the server did not answer JSON")
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
fn token_hint(e: anyhow::Error, has_token: bool) -> anyhow::Error {
    let Some(refused) = e.downcast_ref::<Refused>() else {
        return e;
    };
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
async fn list_all(
    base: &str,
    has_token: bool,
    get: impl Fn(String) -> reqwest::RequestBuilder,
) -> anyhow::Result<Vec<Value>> {
    let mut gates = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{base}/api/v1/gates?limit={}", super::MAX_PAGE);
        if let Some(c) = &cursor {
            url.push_str("&cursor=");
            url.extend(form_urlencoded::byte_serialize(c.as_bytes()));
        }
        let mut page = call(get(url), base, "list gates")
            .await
            .map_err(|e| token_hint(e, has_token))?;
        if let Some(list) = page["gates"].as_array_mut() {
            gates.append(list);
        }
        match page["next"].as_str() {
            // A cursor that does not move would loop forever.
            Some(next) if cursor.as_deref() == Some(next) => {
                bail!("the server's gate list repeats the page after {next}")
            }
            Some(next) => cursor = Some(next.to_string()),
            None => return Ok(gates),
        }
    }
}

/// `/gates/promote/pr/42`, `gates/promote/pr/42` and `promote/pr/42` all name one gate.
fn api_path(gate: &str) -> String {
    let g = gate.trim().trim_matches('/');
    g.strip_prefix("gates/").unwrap_or(g).to_string()
}

fn local_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "cli".into())
}

fn print_list(value: &Value) {
    let gates = value["gates"].as_array().cloned().unwrap_or_default();
    if gates.is_empty() {
        println!("no gates yet: point a Flagger webhook at /gates/<kind>/pr/<n>");
        return;
    }
    println!("{:<48} {:<7} {:<24} CANARIES", "GATE", "STATE", "BY");
    for g in gates {
        let by = g["by"]["name"]
            .as_str()
            .map(|n| format!("{n} ({})", g["by"]["source"].as_str().unwrap_or("")));
        let canaries: Vec<String> = g["canaries"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        let waiting = if c["waiting_since"].is_null() {
                            ""
                        } else {
                            " waiting"
                        };
                        format!(
                            "{}@{}{waiting}",
                            c["canary"].as_str().unwrap_or("?"),
                            c["checksum"].as_str().unwrap_or("?")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        println!(
            "{:<48} {:<7} {:<24} {}",
            g["gate"].as_str().unwrap_or("?"),
            g["state"].as_str().unwrap_or("?"),
            by.unwrap_or_else(|| "-".into()),
            canaries.join(", ")
        );
    }
}

fn print_detail(value: &Value) {
    println!("gate:  {}", value["key"].as_str().unwrap_or("?"));
    println!("state: {}", state_line(value));
    if let Some(by) = value["change"]["by"]["name"]
        .as_str()
        .or(value["by"]["name"].as_str())
    {
        println!("by:    {by}");
    }
    for o in value["observations"].as_array().into_iter().flatten() {
        println!(
            "canary {} revision {} phase {}: {} ({})",
            o["canary"].as_str().unwrap_or("?"),
            o["checksum"].as_str().unwrap_or("?"),
            o["phase"].as_str().unwrap_or("?"),
            o["answer"].as_str().unwrap_or("?"),
            o["reason"].as_str().unwrap_or("")
        );
    }
    println!("history:");
    for a in value["audit"].as_array().into_iter().flatten() {
        println!(
            "  {} {:<7} {} via {}{}",
            a["at"].as_i64().map(rfc3339).unwrap_or_default(),
            a["action"].as_str().unwrap_or("?"),
            a["actor"]["name"].as_str().unwrap_or("?"),
            a["actor"]["source"].as_str().unwrap_or("?"),
            a["reason"]
                .as_str()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        );
    }
}

/// The gate's state, and when it is open but some canary is answered closed
/// (pinned to another revision, a freeze…), which and why, in the same line.
fn state_line(value: &Value) -> String {
    let state = value["state"].as_str().unwrap_or("?");
    let closed: Vec<String> = value["observations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| state == "open" && o["answer"].as_str() == Some("closed"))
        .map(|o| {
            let canary = o["canary"].as_str().unwrap_or("?");
            let at = o["checksum"].as_str().unwrap_or("?");
            match value["pins"][canary].as_str() {
                Some(pinned) if pinned != at => format!(
                    "{canary}: it is at revision {at}, and the approval is pinned to its revision {pinned}"
                ),
                _ => format!("{canary}: {}", o["reason"].as_str().unwrap_or("?")),
            }
        })
        .collect();
    if closed.is_empty() {
        return state.to_string();
    }
    format!("open, but closed for {}", closed.join("; "))
}

pub struct ConfigReport {
    pub ok: bool,
    pub text: String,
}

/// `gatebot check-config`: what is configured, what is wrong, and whether the store opens.
pub async fn check_config(
    config: crate::Config,
    settings: &[crate::config::Setting],
) -> ConfigReport {
    use std::fmt::Write;
    let mut text = String::new();
    let mut ok = true;
    // Each setting, where it came from; never a secret's value.
    let width = settings.iter().map(|s| s.env.len()).max().unwrap_or(0);
    for s in settings {
        let value = setting_value(s, &config);
        let _ = writeln!(text, "{:<width$} {:<12} {value}", s.env, s.origin.as_str());
    }
    for s in settings
        .iter()
        .filter(|s| s.origin == crate::config::Origin::Unset)
        // A GitHub App stands in for the token.
        .filter(|s| !(s.env == "GATEBOT_GITHUB_TOKEN" && config.github.app_id.is_some()))
    {
        if let Some(meaning) = crate::config::unset_meaning(&s.env) {
            let _ = writeln!(text, "{} unset: {meaning}", s.env);
        }
    }
    let gh = &config.github;
    let sl = &config.slack;
    let _ = writeln!(text, "listen:          {}", config.listen);
    let _ = writeln!(text, "approval TTL:    {}", approval_ttl(&config, settings));
    let _ = writeln!(text, "operator API:    {}", operators(&config));
    let github = match (&gh.token, gh.app_id) {
        (Some(_), _) => "token",
        (None, Some(_)) => "GitHub App",
        (None, None) => "off",
    };
    let _ = writeln!(text, "github:          {github} (API {})", gh.api_url);
    if let Some(repo) = &gh.repository {
        let _ = writeln!(text, "default repo:    {repo}");
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
    let _ = writeln!(
        text,
        "slack:           {slack} (API {}), {} approver(s)",
        sl.api_url,
        sl.approvers.len()
    );
    let _ = writeln!(
        text,
        "outbound:        {}",
        crate::outbound::describe(&config.outbound)
    );
    if let Err(e) = crate::outbound::builder(&config.outbound) {
        ok = false;
        let _ = writeln!(text, "problem:         {e:#}");
    }
    for problem in config.problems() {
        ok = false;
        let _ = writeln!(text, "problem:         {problem}");
    }
    for warning in config.warnings() {
        let _ = writeln!(text, "warning:         {warning}");
    }
    if let Err(e) = crate::templates::Templates::new(config.templates_dir.clone()) {
        ok = false;
        let _ = writeln!(text, "problem:         {e:#}");
    }
    let _ = writeln!(
        text,
        "flagger:         {}",
        flagger_door(config.flagger_tokens())
    );
    match crate::policy::Policy::from_config(&config) {
        Ok(policy) => {
            if let Some(path) = &config.policy {
                let _ = writeln!(
                    text,
                    "policy:          {} ({} deadline rule(s))",
                    path.display(),
                    policy.deadlines().len()
                );
            }
            for warning in policy.door_warnings(config.flagger_tokens()) {
                let _ = writeln!(text, "warning:         {warning}");
            }
        }
        Err(e) => {
            ok = false;
            let _ = writeln!(text, "problem:         {e:#}");
        }
    }
    match crate::store::Store::connect(&config.database_url).await {
        Ok(store) => {
            let _ = writeln!(
                text,
                "store:           {} (reachable, migrated)",
                store.backend().as_str()
            );
            store.close().await;
        }
        Err(e) => {
            ok = false;
            let _ = writeln!(text, "problem:         {e:#}");
        }
    }
    let _ = writeln!(
        text,
        "{}",
        if ok {
            "configuration OK"
        } else {
            "configuration has problems"
        }
    );
    ConfigReport { ok, text }
}

/// What check-config shows for a setting: never a secret, but the store's URL
/// without its password, and "(empty)" rather than a mark for an empty value.
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
        _ if s.env == "GATEBOT_DATABASE_URL" => without_password(&config.database_url),
        Setting { secret: true, .. } => "(secret, set)".to_string(),
        Setting { value, .. } => value.clone().unwrap_or_default(),
    }
}

/// A database URL with its password (in the user part or the query) replaced.
fn without_password(url: &str) -> String {
    let Ok(mut parsed) = reqwest::Url::parse(url) else {
        return "(secret, set: not a URL)".to_string();
    };
    if parsed.password().is_some() && parsed.set_password(Some("***")).is_err() {
        return "(secret, set)".to_string();
    }
    if parsed.query().is_some_and(|q| q.contains("password")) {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let secret = k.contains("password");
                (
                    k.into_owned(),
                    if secret { "***".into() } else { v.into_owned() },
                )
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string()
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

fn client_for(server: &crate::config::ServerArgs) -> anyhow::Result<(String, reqwest::Client)> {
    let base = server.server.trim_end_matches('/').to_string();
    let client = crate::outbound::client(&server.outbound, std::time::Duration::from_secs(15))?;
    Ok((base, client))
}

fn authed(
    server: &crate::config::ServerArgs,
    req: reqwest::RequestBuilder,
) -> reqwest::RequestBuilder {
    let req = req
        .header("x-gatebot-source", "cli")
        .header("x-gatebot-actor", local_user());
    match &server.token {
        Some(t) => req.bearer_auth(t.expose_secret()),
        None => req,
    }
}

/// `gatebot freeze [scope] --reason … [--for 2h | --until …]`, or the list.
pub async fn freeze(args: crate::config::FreezeArgs) -> anyhow::Result<()> {
    let (base, client) = client_for(&args.server)?;
    let has_token = args.server.token.is_some();
    let Some(reason) = args.reason else {
        let value = call(
            authed(&args.server, client.get(format!("{base}/api/v1/freezes"))),
            &base,
            "list freezes",
        )
        .await
        .map_err(|e| token_hint(e, has_token))?;
        let freezes = value["freezes"]
            .as_array()
            .cloned()
            .context("the server's answer has no list of freezes")?;
        if freezes.is_empty() {
            println!("nothing is frozen");
        }
        for f in freezes {
            println!("{}", f["line"].as_str().unwrap_or("?"));
        }
        return Ok(());
    };
    let body = json!({
        "scope": args.scope.as_deref().unwrap_or("all"), "reason": reason,
        "for": args.for_, "until": args.until,
    });
    let value = call(
        authed(
            &args.server,
            client.post(format!("{base}/api/v1/freezes")).json(&body),
        ),
        &base,
        "freeze",
    )
    .await
    .map_err(|e| token_hint(e, has_token))?;
    println!("{}", value["line"].as_str().unwrap_or("frozen"));
    Ok(())
}

/// `gatebot unfreeze [scope]`.
pub async fn unfreeze(args: crate::config::UnfreezeArgs) -> anyhow::Result<()> {
    let (base, client) = client_for(&args.server)?;
    let has_token = args.server.token.is_some();
    let scope = args.scope.as_deref().unwrap_or("all");
    let url = format!(
        "{base}/api/v1/freezes?scope={}",
        form_urlencoded::byte_serialize(scope.as_bytes()).collect::<String>()
    );
    let value = call(authed(&args.server, client.delete(url)), &base, "unfreeze")
        .await
        .map_err(|e| token_hint(e, has_token))?;
    let lifted = value["lifted"].as_array().map_or(0, Vec::len);
    if lifted == 0 {
        println!("nothing was frozen in {scope}");
    } else {
        println!("lifted {lifted} freeze(s) of {scope}");
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
