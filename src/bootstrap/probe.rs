//! `gatebot check-config --probe`: one real, read-only call to each
//! configured service with the credentials given, what it answered, and how
//! to fix a refusal. check-config itself opens the store and asks Prometheus
//! (`vector(1)`); this adds GitHub, Slack, Teams and Kubernetes. Nothing is
//! written anywhere.

use std::sync::Arc;

use crate::api::cli::ConfigReport;
use crate::clock::{SharedClock, SystemClock};
use crate::config::Config;
use crate::github::client::ApiError;
use crate::metrics::Metrics;
use crate::notify::SendError;

/// Runs every probe, each adding its line (or its problem) to `report`.
pub(super) async fn probe(config: &Config, report: &mut ConfigReport) {
    let metrics = Metrics::new();
    let clock: SharedClock = Arc::new(SystemClock);
    let mut tried = 0;
    tried += github(config, &metrics, clock.clone(), report).await;
    tried += slack(config, &metrics, report).await;
    tried += teams(config, &metrics, clock, report).await;
    tried += kubernetes(config, report).await;
    tried += change(config, report).await;
    if tried == 0 {
        report.line("probe:           no GitHub, Slack, Teams or Kubernetes is configured to try");
    }
}

/// Signs in (`GET /user`, an App's `GET /app`), then reads the repository
/// (`GET /repos/{owner}/{repo}`, with the App's installation token).
async fn github(
    config: &Config,
    metrics: &Metrics,
    clock: SharedClock,
    report: &mut ConfigReport,
) -> usize {
    let client = match crate::github::client(config, metrics, clock) {
        Ok(Some(client)) => client,
        Ok(None) => return 0,
        Err(e) => {
            report.problem(scrub(&format!("github:          {e:#}"), config));
            return 1;
        }
    };
    let api = crate::config::url_shown(&config.github.api_url);
    let login = match client.own_login().await {
        Ok(login) => login,
        Err(e) => {
            let who = if config.github.app_id.is_some() {
                "GATEBOT_GITHUB_APP_ID and GATEBOT_GITHUB_APP_PRIVATE_KEY"
            } else {
                "GATEBOT_GITHUB_TOKEN"
            };
            report.problem(format_args!(
                "github:          {api} refused the sign-in: {e}: {}",
                github_fix(&e, who, &api)
            ));
            return 1;
        }
    };
    report.line(format_args!("github:          {api}: signed in as {login}"));
    if let Some(repo) = &config.github.repository {
        match client.can_read(repo).await {
            Ok(()) => report.line(format_args!("github:          can read {repo}")),
            Err(e) => {
                let fix = match &e {
                    ApiError::Status { status: 404, .. } => format!(
                        "{login} cannot see {repo}: give the token access to it, or install the App on it"
                    ),
                    other => github_fix(other, "GATEBOT_GITHUB_TOKEN", &api),
                };
                report.problem(scrub(
                    &format!("github:          reading {repo}: {e}: {fix}"),
                    config,
                ));
            }
        }
    }
    1
}

fn github_fix(e: &ApiError, who: &str, api: &str) -> String {
    match e {
        ApiError::Status { status: 401, .. } => format!(
            "the credentials are not accepted (a placeholder, expired or revoked): set {who} to valid ones"
        ),
        ApiError::Status { status: 403, .. } => {
            "the credentials lack a permission: docs/github.md lists what gatebot needs".to_string()
        }
        ApiError::Status { .. } => format!("GitHub answered an error: is GATEBOT_GITHUB_API_URL ({api}) GitHub's API?"),
        ApiError::Transport(_) => format!(
            "GitHub cannot be reached at {api}: check GATEBOT_GITHUB_API_URL and HTTPS_PROXY"
        ),
    }
}

/// `auth.test` with the bot token.
async fn slack(config: &Config, metrics: &Metrics, report: &mut ConfigReport) -> usize {
    let Some(token) = config
        .slack
        .bot_token
        .as_ref()
        .map(secrecy::ExposeSecret::expose_secret)
        .filter(|t| !t.is_empty())
    else {
        return 0;
    };
    let api = crate::config::url_shown(&config.slack.api_url);
    let client = match crate::slack::client::SlackApi::new(
        &config.slack.api_url,
        token,
        metrics.outbound("slack"),
    ) {
        Ok(client) => client,
        Err(e) => {
            report.problem(scrub(&format!("slack:           {e:#}"), config));
            return 1;
        }
    };
    match client.auth_test().await {
        Ok(who) => report.line(format_args!(
            "slack:           {api}: the bot token is {who}"
        )),
        Err(e) => report.problem(scrub(
            &format!(
                "slack:           {api}: auth.test: {}: {}",
                e.message(),
                slack_fix(&e, &api)
            ),
            config,
        )),
    }
    1
}

fn slack_fix(e: &SendError, api: &str) -> String {
    let said = e.message();
    if [
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "account_inactive",
        "token_expired",
    ]
    .iter()
    .any(|code| said.contains(code))
    {
        return "Slack does not accept GATEBOT_SLACK_BOT_TOKEN (a placeholder, revoked or from another workspace): copy the Bot User OAuth Token (xoxb-…) from the app's OAuth & Permissions page".to_string();
    }
    format!("Slack cannot be reached at {api}, or answered an error: check GATEBOT_SLACK_API_URL and HTTPS_PROXY")
}

/// A Bot Framework token for the app id, password and tenant.
async fn teams(
    config: &Config,
    metrics: &Metrics,
    clock: SharedClock,
    report: &mut ConfigReport,
) -> usize {
    let teams = &config.teams;
    let (Some(app_id), Some(password)) = (teams.app_id(), teams.app_password()) else {
        return 0;
    };
    let connector = crate::teams::client::Connector::new(
        &teams.login_url,
        app_id,
        password.clone(),
        teams.tenant().map(str::to_string),
        clock,
        metrics.outbound("teams"),
    );
    let login = crate::config::url_shown(&teams.login_url);
    match connector.probe().await {
        Ok(()) => report.line(format_args!("teams:           {login}: a token was issued for app {app_id}")),
        Err(e) => report.problem(scrub(
            &format!(
                "teams:           {login}: no token for app {app_id}: {}: check GATEBOT_TEAMS_APP_ID, GATEBOT_TEAMS_APP_PASSWORD (the client secret, not its id) and GATEBOT_TEAMS_TENANT (single-tenant bots)",
                e.message()
            ),
            config,
        )),
    }
    1
}

/// The lookup's (or the set-up page's) cluster: may gatebot read Canaries?
async fn kubernetes(config: &Config, report: &mut ConfigReport) -> usize {
    let k = &config.kubernetes;
    let used = k.lookup
        || k.app_secret
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty());
    if !used {
        return 0;
    }
    let cluster = match crate::kubernetes::Cluster::connect(k).await {
        Ok(cluster) => cluster,
        Err(e) => {
            report.problem(format_args!("kubernetes:      {e:#}"));
            return 1;
        }
    };
    match cluster.probe().await {
        Ok(what) => report.line(format_args!("kubernetes:      {what}")),
        Err(e) => report.problem(scrub(&format!("kubernetes:      {}", e.why), config)),
    }
    1
}

/// Reads a change that does not exist from the `[change]` system: signed in
/// when it answers that there is none.
async fn change(config: &Config, report: &mut ConfigReport) -> usize {
    let Ok(policy) = crate::policy::Policy::from_config(config) else {
        return 0;
    };
    let Some(site) = policy.change() else {
        return 0;
    };
    let client = match super::change_client(config, &policy) {
        Ok(Some(client)) => client,
        Ok(None) => return 0,
        Err(e) => {
            report.problem(format_args!("change:          {e:#}"));
            return 1;
        }
    };
    let name = site.rule.provider.name();
    match client.probe(site.rule.project.as_deref()).await {
        Ok(()) => report.line(format_args!(
            "change:          signed in to {name} as {} and read its changes",
            config.change.user.as_deref().unwrap_or_default()
        )),
        Err(e) => report.problem(scrub(&format!("change:          {name}: {e}"), config)),
    }
    1
}

/// `text` (an error a client made, an answer a service gave) without a
/// secret: every URL in it as `url_shown` shows URLs, and the configured
/// credentials replaced by `***` wherever they appear (a service may echo
/// the token it refused).
fn scrub(text: &str, config: &Config) -> String {
    use secrecy::ExposeSecret;
    let mut out: String = text
        .split_inclusive(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .map(|piece| {
            let end = piece
                .find(|c: char| c.is_whitespace() || c == '(' || c == ')')
                .unwrap_or(piece.len());
            let (word, rest) = piece.split_at(end);
            if word.contains("://") {
                format!("{}{rest}", crate::config::url_shown(word))
            } else {
                piece.to_string()
            }
        })
        .collect();
    let secrets = [
        config.github.token.as_ref(),
        config.slack.bot_token.as_ref(),
        config.teams.app_password(),
        config.change.password.as_ref(),
    ];
    for secret in secrets.into_iter().flatten() {
        let secret = secret.expose_secret();
        if secret.len() >= 4 {
            out = out.replace(secret, "***");
        }
    }
    out
}
