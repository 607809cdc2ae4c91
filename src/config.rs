//! Configuration: flags and environment variables (clap), secrets as `SecretString`.
//!
//! Every secret may also be given as a file: `GATEBOT_X_FILE=/path` reads `GATEBOT_X`
//! from that file (Kubernetes secret volumes, Docker secrets).
//!
//! Over 400 lines on purpose: every setting is declared here once, with its
//! flag, variable, default and help, so `--help`, `.env.example` and the docs
//! are checked against one place.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use secrecy::{ExposeSecret, SecretString};

use crate::gate::{GateKind, RepoName};

mod cidr;
mod limits;
pub(crate) mod sections;
pub use cidr::Cidr;
pub use limits::Limits;
pub use sections::Sections;

/// Environment variables that hold secrets (or their hashes) and may come
/// from `<NAME>_FILE`.
pub const SECRET_VARS: [&str; 17] = [
    "GATEBOT_ADMIN_TOKEN",
    "GATEBOT_API_TOKENS",
    "GATEBOT_PIPELINE_TOKEN",
    "GATEBOT_GITHUB_WEBHOOK_SECRET",
    "GATEBOT_GITHUB_TOKEN",
    "GATEBOT_GITHUB_APP_PRIVATE_KEY",
    "GATEBOT_SLACK_SIGNING_SECRET",
    "GATEBOT_SLACK_BOT_TOKEN",
    "GATEBOT_SLACK_APP_TOKEN",
    "GATEBOT_TEAMS_APP_PASSWORD",
    "GATEBOT_TEAMS_WORKFLOW_URL",
    "GATEBOT_DATABASE_URL",
    "GATEBOT_UI_SESSION_KEY",
    "GATEBOT_UI_GITHUB_CLIENT_SECRET",
    "GATEBOT_PROMETHEUS_PASSWORD",
    "GATEBOT_CHANGE_PASSWORD",
    "GATEBOT_CHANGE_WEBHOOK_SECRET",
];

/// The settings by what a person is setting up, in the order `.env.example`
/// (under `# --- <heading> ---`) and `check-config` list them.
pub const GROUPS: [(&str, &[&str]); 10] = [
    (
        "gatebot itself",
        &[
            "GATEBOT_LISTEN",
            "GATEBOT_DATABASE_URL",
            "GATEBOT_POLICY",
            "GATEBOT_APPROVAL_TTL",
            "GATEBOT_LOG_FORMAT",
        ],
    ),
    (
        "Who may call it",
        &[
            "GATEBOT_ADMIN_TOKEN",
            "GATEBOT_API_TOKENS",
            "GATEBOT_PIPELINE_TOKEN",
            "GATEBOT_FLAGGER_TOKENS",
        ],
    ),
    (
        "GitHub",
        &[
            "GATEBOT_GITHUB_WEBHOOK_SECRET",
            "GATEBOT_GITHUB_TOKEN",
            "GATEBOT_GITHUB_APP_ID",
            "GATEBOT_GITHUB_APP_PRIVATE_KEY",
            "GATEBOT_GITHUB_API_URL",
            "GATEBOT_GITHUB_REPOSITORY",
            "GATEBOT_GITHUB_ALLOWED_REPOSITORIES",
        ],
    ),
    (
        "Slack",
        &[
            "GATEBOT_SLACK_SIGNING_SECRET",
            "GATEBOT_SLACK_BOT_TOKEN",
            "GATEBOT_SLACK_APP_TOKEN",
            "GATEBOT_SLACK_CHANNEL",
            "GATEBOT_SLACK_API_URL",
        ],
    ),
    (
        "Microsoft Teams",
        &[
            "GATEBOT_TEAMS_APP_ID",
            "GATEBOT_TEAMS_TENANTS",
            "GATEBOT_TEAMS_OPENID_METADATA_URL",
            "GATEBOT_TEAMS_APP_PASSWORD",
            "GATEBOT_TEAMS_TENANT",
            "GATEBOT_TEAMS_LOGIN_URL",
            "GATEBOT_TEAMS_CHANNEL",
            "GATEBOT_TEAMS_WORKFLOW_URL",
        ],
    ),
    (
        "The web pages",
        &[
            "GATEBOT_PUBLIC_URL",
            "GATEBOT_UI",
            "GATEBOT_UI_SESSION_KEY",
            "GATEBOT_UI_GITHUB_CLIENT_ID",
            "GATEBOT_UI_GITHUB_CLIENT_SECRET",
        ],
    ),
    ("The CLI", &["GATEBOT_SERVER"]),
    (
        "Outbound calls and the cluster",
        &[
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "NO_PROXY",
            "GATEBOT_EXTRA_CA_FILE",
            "GATEBOT_KUBECONFIG",
        ],
    ),
    (
        "The canaries' numbers",
        &[
            "GATEBOT_PROMETHEUS_URL",
            "GATEBOT_PROMETHEUS_TOKEN_FILE",
            "GATEBOT_PROMETHEUS_PASSWORD",
        ],
    ),
    (
        "Change requests",
        &[
            "GATEBOT_CHANGE_USER",
            "GATEBOT_CHANGE_PASSWORD",
            "GATEBOT_CHANGE_WEBHOOK_SECRET",
        ],
    ),
];

/// Where a setting's value came from, as `check-config` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Flag,
    Environment,
    DotEnv,
    /// Read from the file that `<NAME>_FILE` names.
    SecretFile,
    Default,
    Unset,
}

impl Origin {
    /// Where a value was written, in a sentence: "(from the environment)".
    pub fn said(self) -> &'static str {
        match self {
            Self::Environment => "the environment",
            Self::SecretFile => "the file its _FILE names",
            other => other.as_str(),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Flag => "flag",
            Self::Environment => "environment",
            Self::DotEnv => ".env",
            Self::SecretFile => "file (<NAME>_FILE)",
            Self::Default => "default",
            Self::Unset => "unset",
        }
    }
}

/// Variables this process set itself (from `.env` or a `_FILE`), so that
/// `check-config` does not call them "environment".
static LOADED: Mutex<BTreeMap<String, Origin>> = Mutex::new(BTreeMap::new());

fn loaded(name: &str) -> Option<Origin> {
    LOADED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .copied()
}

fn mark_loaded(name: &str, origin: Origin) {
    LOADED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_string(), origin);
}

/// Reads `.env` in the working directory when there is one. Variables already
/// in the environment win. Call before [`load_secret_files`], so that a
/// `GATEBOT_X_FILE` written in `.env` works too, and before any thread starts.
pub fn load_dotenv() -> anyhow::Result<()> {
    let entries = match dotenvy::from_path_iter(".env") {
        Ok(entries) => entries,
        Err(e) if e.not_found() => return Ok(()),
        Err(e) => anyhow::bail!(".env: {e}"),
    };
    for entry in entries {
        let (name, value) = entry.map_err(|e| anyhow::anyhow!(".env: {e}"))?;
        if std::env::var_os(&name).is_none() {
            std::env::set_var(&name, value);
            mark_loaded(&name, Origin::DotEnv);
        }
    }
    Ok(())
}

/// Prepares the environment for parsing: an empty `GATEBOT_*` variable counts as
/// unset (as `.env.example` leaves them), and `<NAME>_FILE` is read into `<NAME>`
/// for every secret not set directly. Call before any thread starts: it changes
/// environment variables.
pub fn load_secret_files() -> anyhow::Result<()> {
    let empty: Vec<_> = std::env::vars_os()
        .filter(|(k, v)| k.to_string_lossy().starts_with("GATEBOT_") && v.is_empty())
        .map(|(k, _)| k)
        .collect();
    for k in empty {
        std::env::remove_var(k);
    }
    for name in SECRET_VARS {
        let file_var = format!("{name}_FILE");
        if std::env::var_os(name).is_some() {
            continue;
        }
        if let Some(path) = std::env::var_os(&file_var) {
            let value = std::fs::read_to_string(&path).map_err(|e| {
                anyhow::anyhow!(
                    "{file_var}: cannot read {}: {e}",
                    PathBuf::from(&path).display()
                )
            })?;
            std::env::set_var(name, value.trim_end_matches(['\n', '\r']));
            mark_loaded(name, Origin::SecretFile);
        }
    }
    Ok(())
}

/// One setting as `check-config` shows it. A secret's value is never kept.
#[derive(Debug, Clone)]
pub struct Setting {
    pub env: String,
    pub origin: Origin,
    /// The value as given, for settings that are not secrets.
    pub value: Option<String>,
    pub secret: bool,
    /// Given, but as an empty string (which means unset for most settings).
    pub empty: bool,
}

/// Every setting of a subcommand, with where its value came from.
pub fn settings(command: &clap::Command, matches: &clap::ArgMatches) -> Vec<Setting> {
    use clap::parser::ValueSource;
    command
        .get_arguments()
        .filter_map(|arg| {
            let env = arg.get_env()?.to_string_lossy().into_owned();
            let id = arg.get_id().as_str();
            let origin = match matches.value_source(id) {
                Some(ValueSource::CommandLine) => Origin::Flag,
                Some(ValueSource::EnvVariable) => loaded(&env).unwrap_or(Origin::Environment),
                Some(ValueSource::DefaultValue) => Origin::Default,
                _ => Origin::Unset,
            };
            let secret = arg.is_hide_env_values_set();
            let empty = matches
                .get_raw(id)
                .is_some_and(|mut raw| raw.all(|v| v.is_empty()));
            let value = match (secret, matches.get_raw(id)) {
                (false, Some(raw)) => Some(
                    raw.map(|v| v.to_string_lossy().into_owned())
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                _ => None,
            };
            Some(Setting {
                env,
                origin,
                value,
                secret,
                empty,
            })
        })
        .collect()
}

/// Variables that tests set for themselves (`GATEBOT_TEST_POSTGRES_URL`,
/// `GATEBOT_TEST_EXIT_WITH_PARENT`, …): not settings, never called unknown.
const TEST_PREFIX: &str = "GATEBOT_TEST_";

/// Variables read with `std::env` rather than through an argument.
const READ_DIRECTLY: [&str; 1] = ["GATEBOT_INBOX_START_DELAY"];

/// A `GATEBOT_*` variable that nothing reads: most often a misspelt setting,
/// which would otherwise leave its default in force without a word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    pub name: String,
    pub origin: Origin,
    /// The known name it is closest to, when one is close.
    pub closest: Option<String>,
    /// Where it went, when it was a setting of its own.
    pub moved: Option<String>,
}

/// Settings that became keys of the policy file: the variable, its table
/// and its key. Named with their new place rather than as unknown.
const MOVED: [(&str, &str, &str); 37] = [
    ("GATEBOT_SHUTDOWN_TIMEOUT", "limits", "shutdown_timeout"),
    ("GATEBOT_OUTBOX_BACKOFF", "limits", "outbox_backoff"),
    (
        "GATEBOT_OUTBOX_MAX_ATTEMPTS",
        "limits",
        "outbox_max_attempts",
    ),
    ("GATEBOT_OUTBOX_LEASE", "limits", "outbox_lease"),
    (
        "GATEBOT_HEADER_READ_TIMEOUT",
        "limits",
        "header_read_timeout",
    ),
    ("GATEBOT_IDLE_TIMEOUT", "limits", "idle_timeout"),
    ("GATEBOT_MAX_CONNECTIONS", "limits", "max_connections"),
    ("GATEBOT_BODY_READ_TIMEOUT", "limits", "body_read_timeout"),
    ("GATEBOT_REQUEST_TIMEOUT", "limits", "request_timeout"),
    ("GATEBOT_NOTIFY_BURST", "limits", "notify_burst"),
    ("GATEBOT_NAMED_GATES_LIVE", "limits", "named_gates_live"),
    (
        "GATEBOT_NAMED_GATES_PER_HOUR",
        "limits",
        "named_gates_per_hour",
    ),
    (
        "GATEBOT_NAMED_GATE_RETENTION",
        "limits",
        "named_gate_retention",
    ),
    ("GATEBOT_PROMETHEUS_TIMEOUT", "limits", "prometheus_timeout"),
    ("GATEBOT_EVIDENCE_REFRESH", "limits", "evidence_refresh"),
    ("GATEBOT_UI_SESSION_TTL", "limits", "ui_session_ttl"),
    ("GATEBOT_RETENTION_PAYLOADS", "limits", "retention_payloads"),
    (
        "GATEBOT_RETENTION_DELIVERIES",
        "limits",
        "retention_deliveries",
    ),
    ("GATEBOT_RETENTION_HISTORY", "limits", "retention_history"),
    ("GATEBOT_RETENTION_AUDIT", "limits", "retention_audit"),
    ("GATEBOT_RETENTION_INTERVAL", "limits", "retention_interval"),
    (
        "GATEBOT_KUBERNETES_LOOKUP_BACKOFF",
        "limits",
        "kubernetes_lookup_backoff",
    ),
    (
        "GATEBOT_LOADTESTER_OPEN_ACCESS",
        "loadtester",
        "open_access",
    ),
    ("GATEBOT_TEMPLATES_DIR", "templates", "dir"),
    ("GATEBOT_KUBERNETES_LOOKUP", "kubernetes", "lookup"),
    (
        "GATEBOT_COMMIT_ANNOTATION",
        "kubernetes",
        "commit_annotation",
    ),
    (
        "GATEBOT_REPOSITORY_ANNOTATION",
        "kubernetes",
        "repository_annotation",
    ),
    ("GATEBOT_KUBERNETES_CONTAINER", "kubernetes", "container"),
    ("GATEBOT_KUBERNETES_APP_SECRET", "kubernetes", "app_secret"),
    ("GATEBOT_UI_TRUSTED_PROXIES", "ui", "trusted_proxies"),
    ("GATEBOT_GITHUB_MIN_PERMISSION", "github", "min_permission"),
    ("GATEBOT_GITHUB_CHECK_RUNS", "github", "check_runs"),
    ("GATEBOT_GITHUB_DEPLOYMENTS", "github", "deployments"),
    ("GATEBOT_GITHUB_CLOSE_ON_PUSH", "github", "close_on_push"),
    ("GATEBOT_GITHUB_BOT_LOGIN", "github", "bot_login"),
    ("GATEBOT_SLACK_APPROVERS", "slack", "approvers"),
    ("GATEBOT_TEAMS_APPROVERS", "teams", "approvers"),
];

/// Settings that gatebot works out from others now.
const DERIVED: [(&str, &str); 2] = [
    ("GATEBOT_UI_GITHUB_OAUTH_URL", "GitHub's sign-in pages are found from GATEBOT_GITHUB_API_URL now (https://HOST/api/v3 signs in at https://HOST)"),
    ("GATEBOT_PROMETHEUS_USERNAME", "the user is the user part of GATEBOT_PROMETHEUS_URL now (http://gatebot@prometheus:9090)"),
];

/// Where a setting that is no longer read went, in a sentence.
fn moved(name: &str) -> Option<String> {
    if let Some((_, table, key)) = MOVED.iter().find(|(env, _, _)| *env == name) {
        let docs = match *table {
            "limits" => "docs/operations.md, \"Limits\"",
            _ => "docs/policy.md, \"Settings in the policy file\"",
        };
        return Some(format!(
            "it is `{key}` in the [{table}] table of the policy file now (GATEBOT_POLICY; {docs})"
        ));
    }
    DERIVED
        .iter()
        .find(|(env, _)| *env == name)
        .map(|(_, place)| place.to_string())
}

impl std::fmt::Display for UnknownName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(place) = &self.moved {
            return write!(
                f,
                "{} (from {}) is no longer read: {place}",
                self.name,
                self.origin.said()
            );
        }
        write!(
            f,
            "{} (from {}) is not a setting gatebot reads",
            self.name,
            self.origin.said()
        )?;
        match &self.closest {
            Some(closest) => match moved(closest) {
                Some(place) => write!(
                    f,
                    ": did you mean {closest}? That one is no longer read: {place}"
                ),
                None => write!(f, ": did you mean {closest}?"),
            },
            None => write!(f, " (the settings are listed in .env.example)"),
        }
    }
}

/// Every variable some argument of `command` or of its subcommands reads,
/// from clap's own list, so that a setting added or removed there needs no
/// change here; with `<NAME>_FILE` for each secret.
fn known_names(command: &clap::Command) -> std::collections::BTreeSet<String> {
    let mut out = setting_names(command);
    out.extend(SECRET_VARS.iter().map(|s| format!("{s}_FILE")));
    out.extend(READ_DIRECTLY.iter().map(|s| s.to_string()));
    out
}

/// The variable of every argument of `command` and of its subcommands: the
/// settings, as clap holds them.
fn setting_names(command: &clap::Command) -> std::collections::BTreeSet<String> {
    fn walk(command: &clap::Command, out: &mut std::collections::BTreeSet<String>) {
        for arg in command.get_arguments() {
            if let Some(env) = arg.get_env() {
                out.insert(env.to_string_lossy().into_owned());
            }
        }
        for sub in command.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(command, &mut out);
    out
}

/// The variables Kubernetes adds for a Service named `gatebot` when service
/// links are on (`GATEBOT_SERVICE_HOST`, `GATEBOT_PORT_8080_TCP_ADDR`, …):
/// not the user's mistakes.
fn service_link(name: &str, value: &str) -> bool {
    let Some(rest) = name.strip_prefix("GATEBOT_") else {
        return false;
    };
    if rest == "SERVICE_HOST" || rest.starts_with("SERVICE_PORT") {
        return true;
    }
    match rest.strip_prefix("PORT") {
        Some("") => value.contains("://"),
        Some(port) => port
            .strip_prefix('_')
            .and_then(|p| p.split('_').next())
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

/// Every `GATEBOT_*` variable in the environment (`.env`'s entries included:
/// they were loaded into it) that no argument of `command` reads, with the
/// closest known name. `GATEBOT_TEST_*` are left out.
pub fn unknown_names(command: &clap::Command) -> Vec<UnknownName> {
    let known = known_names(command);
    // A misspelt name of a setting that moved is pointed at that setting,
    // which then says where it went, not at an unrelated one still read.
    let mut known_or_moved = known.clone();
    let moved_names = MOVED
        .iter()
        .map(|(n, _, _)| n)
        .chain(DERIVED.iter().map(|(n, _)| n));
    known_or_moved.extend(moved_names.map(|n| n.to_string()));
    let mut out: Vec<UnknownName> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
        .filter(|(k, _)| k.starts_with("GATEBOT_") && !k.starts_with(TEST_PREFIX))
        .filter(|(k, v)| !known.contains(k) && !service_link(k, &v.to_string_lossy()))
        .map(|(name, _)| UnknownName {
            origin: loaded(&name).unwrap_or(Origin::Environment),
            moved: moved(&name),
            closest: closest_name(&name, &known_or_moved),
            name,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The known name most like `name`, compared without the common prefix
/// (which would make every pair look alike); none when nothing is close.
fn closest_name(name: &str, known: &std::collections::BTreeSet<String>) -> Option<String> {
    /// Close enough that the suggestion is likely what was meant.
    const CLOSE: f64 = 0.8;
    let tail = |n: &str| n.trim_start_matches("GATEBOT_").to_ascii_uppercase();
    let wanted = tail(name);
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(&wanted, &tail(k)), k))
        .filter(|(score, _)| *score >= CLOSE)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.clone())
}

/// A value clap refused, said in the words the user wrote: the variable (and
/// whether it came from the environment, `.env` or a file) when the value did
/// not come from the command line, as clap names only the flag. `None` when
/// the error is not about a value, or the value was a flag's.
pub fn value_error_in_user_terms(command: &clap::Command, error: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        error.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return None;
    }
    let context = |kind| match error.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    // `--approval-ttl <DURATION>`, as clap renders the argument.
    let flag = context(ContextKind::InvalidArg)?;
    let value = context(ContextKind::InvalidValue)?;
    let arg = find_arg(command, &|a: &clap::Arg| {
        a.get_long()
            .is_some_and(|long| flag.split(' ').next() == Some(&format!("--{long}")))
    })?;
    let env = arg.get_env()?.to_string_lossy().into_owned();
    let long = format!("--{}", arg.get_long()?);
    let on_command_line = std::env::args()
        .skip(1)
        .any(|a| a == long || a.starts_with(&format!("{long}=")));
    if on_command_line || std::env::var_os(&env).is_none() {
        return None;
    }
    let origin = loaded(&env).unwrap_or(Origin::Environment);
    let why = match (error.kind(), error.get(ContextKind::ValidValue)) {
        (ErrorKind::InvalidValue, Some(ContextValue::Strings(valid))) => {
            format!("write one of: {}", valid.join(", "))
        }
        (ErrorKind::InvalidValue, _) => "not a value it takes".to_string(),
        _ => std::error::Error::source(error)
            .map(|e| e.to_string())
            .unwrap_or_else(|| "not a value it takes".to_string()),
    };
    // A secret's value is never repeated, even a wrong one.
    Some(if arg.is_hide_env_values_set() {
        format!("{env} (from {}): {why}", origin.said())
    } else {
        format!("{env}={value} (from {}): {why}", origin.said())
    })
}

/// The first argument of `command` or of its subcommands that `wanted` accepts.
fn find_arg<'a>(
    command: &'a clap::Command,
    wanted: &dyn Fn(&clap::Arg) -> bool,
) -> Option<&'a clap::Arg> {
    command
        .get_arguments()
        .find(|a| wanted(a))
        .or_else(|| command.get_subcommands().find_map(|s| find_arg(s, wanted)))
}

/// What a missing setting means, for the settings whose absence changes behaviour.
pub fn unset_meaning(env: &str) -> Option<&'static str> {
    Some(match env {
        "GATEBOT_ADMIN_TOKEN" => {
            "the operator API is read-only (`gatebot gates open` and /api/v1 writes are refused)"
        }
        "GATEBOT_PIPELINE_TOKEN" => {
            "pipelines create named gates with GATEBOT_ADMIN_TOKEN, or not at all"
        }
        "GATEBOT_API_TOKENS" => {
            "the admin token is the only operator: everyone using it counts as one person, \"admin\""
        }
        "GATEBOT_GITHUB_REPOSITORY" => {
            "short keys like pr/42 are refused (write /gates/<kind>/<owner>/<repo>/pr/<n>)"
        }
        "GATEBOT_GITHUB_WEBHOOK_SECRET" => {
            "GitHub deliveries are refused: /promote comments open nothing"
        }
        "GATEBOT_GITHUB_TOKEN" => "and no GitHub App: nothing is posted on pull requests",
        "GATEBOT_SLACK_SIGNING_SECRET" => {
            "Slack's HTTP requests are refused (Socket Mode needs none)"
        }
        "GATEBOT_SLACK_APP_TOKEN" => {
            "no Socket Mode: Slack must reach /webhooks/slack/* over a public URL"
        }
        "GATEBOT_SLACK_BOT_TOKEN" => "nothing is posted to Slack",
        "GATEBOT_TEAMS_APP_ID" => "Microsoft Teams is off: /webhooks/teams answers 404",
        "GATEBOT_TEAMS_APP_PASSWORD" => "nothing is posted to Teams: commands are applied, unanswered",
        "GATEBOT_TEAMS_CHANNEL" => "no Teams cards for waiting gates (but where a Canary's teams_channel names one [[teams.channels]] binds to it)",
        "GATEBOT_TEAMS_WORKFLOW_URL" => "nothing is posted to a Teams Workflows webhook",
        _ => return None,
    })
}

/// check-config reads every setting `serve` reads; its help points there
/// instead of repeating each one.
const CHECK_CONFIG_HELP: &str =
    "It reads the settings `gatebot serve` reads, from the same flags, \
the environment and .env (see `gatebot serve --help`, or .env.example), prints each with where it \
came from, and exits non-zero when one is wrong or the store does not open.";

/// The command line, with check-config's copies of serve's settings left out
/// of its help (they still parse).
pub fn cli() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().mut_subcommand("check-config", |c| {
        c.mut_args(|a| {
            let own = a.get_id() == "probe";
            a.hide(!own)
        })
    })
}

/// `gatebot check-config [--probe]`, with serve's settings.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// Also try the credentials: one read-only call to each configured
    /// service (GitHub, Slack, Teams, Prometheus, Kubernetes; the store is
    /// always opened), with what it answered and how to fix a refusal.
    #[arg(long)]
    pub probe: bool,
    #[command(flatten)]
    pub config: Config,
}

#[derive(Debug, Parser)]
#[command(
    name = "gatebot",
    version,
    about = "ChatOps gates for Flagger canaries"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    Serve(Box<Config>),
    /// Read and change gates on a running server.
    Gates(GatesArgs),
    /// Check the configuration (and that the store opens) without serving.
    #[command(after_help = CHECK_CONFIG_HELP)]
    CheckConfig(Box<CheckConfigArgs>),
    /// Wait for a gate's decision: exits 0 when it opens, 1 when it is
    /// rejected, retired or the wait times out, 2 when gatebot cannot tell.
    Wait(WaitArgs),
    /// Freeze changes (start, promote and traffic gates answer closed), or list freezes.
    Freeze(FreezeArgs),
    /// Lift the freezes of a scope.
    Unfreeze(UnfreezeArgs),
}

/// Where the CLI's freeze verbs send their requests.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// gatebot server to talk to.
    #[arg(long, env = "GATEBOT_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,

    /// Admin token (sent as a bearer token).
    #[arg(long, env = "GATEBOT_ADMIN_TOKEN", value_parser = parse_secret, hide_env_values = true)]
    pub token: Option<SecretString>,

    #[command(flatten)]
    pub outbound: OutboundConfig,
}

#[derive(Debug, Args)]
pub struct FreezeArgs {
    /// all (the default), owner/repo or ns/<namespace>.
    #[arg(requires = "reason")]
    pub scope: Option<String>,

    /// Why, shown to whoever the freeze refuses and kept in the audit log;
    /// required to freeze. `gatebot freeze` alone lists the freezes in force.
    #[arg(long)]
    pub reason: Option<String>,

    /// End by itself after this long (e.g. 2h).
    // A freeze without its reason must not fall back to listing: that would
    // look like success during a change freeze.
    #[arg(long = "for", conflicts_with = "until", requires = "reason")]
    pub for_: Option<String>,

    /// End by itself then (RFC 3339, e.g. 2026-12-24T18:00:00Z).
    #[arg(long, requires = "reason")]
    pub until: Option<String>,

    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Args)]
pub struct UnfreezeArgs {
    /// all (the default), owner/repo or ns/<namespace>.
    pub scope: Option<String>,

    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The gate, e.g. /gates/promote/named/release-2026-12-01.
    pub gate: String,

    /// gatebot server to talk to.
    #[arg(long, env = "GATEBOT_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,

    /// Bearer token: GATEBOT_PIPELINE_TOKEN, else GATEBOT_ADMIN_TOKEN.
    #[arg(long, env = "GATEBOT_PIPELINE_TOKEN", value_parser = parse_secret, hide_env_values = true)]
    pub token: Option<SecretString>,

    /// Give up (exit 1) after this long.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub timeout: Duration,

    /// How often to ask.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub interval: Duration,

    #[command(flatten)]
    pub outbound: OutboundConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

fn parse_secret(s: &str) -> Result<SecretString, String> {
    Ok(SecretString::from(s.to_string()))
}

/// A setting read leniently: clap's own error would print the value (a
/// token pasted in place of its hash), so what does not read is kept as its
/// error and reported by [`Config::problems`], and the value is empty.
#[derive(Debug, Clone, Default)]
pub struct Lenient<T> {
    value: T,
    invalid: Option<String>,
}

impl<T> Lenient<T> {
    pub fn get(&self) -> &T {
        &self.value
    }
}

impl<T> From<T> for Lenient<T> {
    fn from(value: T) -> Self {
        Self {
            value,
            invalid: None,
        }
    }
}

fn lenient<T: std::str::FromStr<Err = String> + Default>(s: &str) -> Result<Lenient<T>, String> {
    Ok(match s.parse::<T>() {
        Ok(value) => Lenient::<T>::from(value),
        Err(e) => Lenient {
            value: T::default(),
            invalid: Some(e),
        },
    })
}

/// Named operator tokens (`GATEBOT_API_TOKENS`): each is one person, known
/// to the server only by the SHA-256 of its token, so the setting holds no
/// secret.
#[derive(Debug, Clone, Default)]
pub struct ApiTokens(crate::gate::tokens::HashedTokens);

impl std::str::FromStr for ApiTokens {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        crate::gate::tokens::HashedTokens::parse(s, operator_name).map(Self)
    }
}

impl ApiTokens {
    pub fn tokens(&self) -> &crate::gate::tokens::HashedTokens {
        &self.0
    }
}

/// Names the server gives identities of its own.
const RESERVED_NAMES: [&str; 3] = ["admin", "pipeline", "gatebot"];

/// Who acts with a named token: letters, digits and hyphens, like a GitHub
/// login, so that the token and the login of one person count once.
fn operator_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !valid {
        return Err("a name is 1 to 64 letters, digits or hyphens".into());
    }
    if RESERVED_NAMES.iter().any(|r| r.eq_ignore_ascii_case(name)) {
        return Err(format!(
            "`{name}` is a name gatebot uses itself: pick another"
        ));
    }
    Ok(())
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (write e.g. 30s, 15m, 24h)"))
}

fn parse_repo(s: &str) -> Result<RepoName, String> {
    s.parse().map_err(|e: crate::gate::KeyError| e.to_string())
}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    ValueEnum,
    serde::Deserialize,
    serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    Read,
    Triage,
    Write,
    Maintain,
    Admin,
}

#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "GATEBOT_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,

    /// sqlite://<path> (embedded, one replica) or postgres://… (several replicas).
    #[arg(
        long,
        env = "GATEBOT_DATABASE_URL",
        default_value = "sqlite://data/gatebot.db",
        hide_env_values = true
    )]
    pub database_url: String,

    /// Bearer token for /api/v1 and the CLI. Without it the write routes are disabled.
    #[arg(long, env = "GATEBOT_ADMIN_TOKEN", value_parser = parse_secret, hide_env_values = true)]
    pub admin_token: Option<SecretString>,

    /// Named operator tokens, one person each: `alice=<sha256 hex of her
    /// token>,bob=<…>`. Each acts as its name, with the admin token's rights.
    #[arg(long, env = "GATEBOT_API_TOKENS", value_parser = lenient::<ApiTokens>, default_value = "", hide_default_value = true, hide_env_values = true)]
    pub api_tokens: Lenient<ApiTokens>,

    /// A narrower token for pipelines: it may create, read, wait on and retire
    /// named gates (`POST /api/v1/gates`), and nothing else.
    #[arg(long, env = "GATEBOT_PIPELINE_TOKEN", value_parser = parse_secret, hide_env_values = true)]
    pub pipeline_token: Option<SecretString>,

    /// An approval expires this long after it is given, whether or not Flagger
    /// has used it (counted from the next opening of a release window when one
    /// applies). 0: approvals never expire.
    #[arg(long, env = "GATEBOT_APPROVAL_TTL", default_value = "24h", value_parser = parse_duration)]
    pub approval_ttl: Duration,

    /// Let anyone who can reach gatebot call the loadtester's /gate/open, /gate/close,
    /// /rollback/open and /rollback/close, as the loadtester does (drop-in migration).
    /// `[loadtester] open_access` in the policy file.
    #[arg(skip)]
    pub loadtester_open_access: bool,

    /// Flagger's checks and events must carry a cluster's token: comma-separated
    /// `<cluster>=<SHA-256 hex of its token>`. The gate URL carries the token
    /// (`/gates/t/<token>/promote/pr/42`, or `?token=<token>`). Empty: anyone
    /// who can reach the port can create waits.
    #[arg(long, env = "GATEBOT_FLAGGER_TOKENS", default_value = "", value_parser = lenient::<crate::gate::FlaggerTokens>, hide_default_value = true, hide_env_values = true)]
    pub flagger_tokens: Lenient<crate::gate::FlaggerTokens>,

    /// Log format.
    #[arg(long, env = "GATEBOT_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// Directory whose templates override the built-in ones (github/*.j2,
    /// slack/*.j2): `[templates] dir` in the policy file.
    #[arg(skip)]
    pub templates_dir: Option<PathBuf>,

    /// Policy file: finer rules for who may do what.
    #[arg(long, env = "GATEBOT_POLICY")]
    pub policy: Option<PathBuf>,

    /// Where people reach gatebot's pages (https://gatebot.example.com);
    /// messages link to a gate's page there when it is set.
    #[arg(long, env = "GATEBOT_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// The `[limits]` table of the policy file: tuning knobs with defaults.
    #[arg(skip)]
    pub limits: Limits,

    #[command(flatten)]
    pub github: GithubConfig,

    #[command(flatten)]
    pub slack: SlackConfig,

    #[command(flatten)]
    pub teams: TeamsConfig,

    #[command(flatten)]
    pub ui: UiConfig,

    #[command(flatten)]
    pub outbound: OutboundConfig,

    #[command(flatten)]
    pub kubernetes: KubernetesConfig,

    #[command(flatten)]
    pub prometheus: PrometheusConfig,

    #[command(flatten)]
    pub change: ChangeConfig,
}

/// Who gatebot is to the change system of the policy's `[change]`
/// (docs/change-management.md): basic auth, as ServiceNow's integration
/// users and Jira's API tokens sign in.
#[derive(Debug, Clone, Default, Args)]
pub struct ChangeConfig {
    /// ServiceNow: the integration user; Jira: the account's email.
    #[arg(id = "change_user", long = "change-user", env = "GATEBOT_CHANGE_USER")]
    pub user: Option<String>,
    /// ServiceNow: that user's password; Jira: an API token.
    #[arg(id = "change_password", long = "change-password", env = "GATEBOT_CHANGE_PASSWORD", value_parser = parse_secret, hide_env_values = true)]
    pub password: Option<SecretString>,
    /// What the change system sends to `/webhooks/change` (a bearer token
    /// or a basic auth password) to have gatebot read its changes at once.
    /// Unset: the route answers 404 and gatebot reads them every `poll`.
    #[arg(id = "change_webhook_secret", long = "change-webhook-secret", env = "GATEBOT_CHANGE_WEBHOOK_SECRET", value_parser = parse_secret, hide_env_values = true)]
    pub webhook_secret: Option<SecretString>,
}

impl ChangeConfig {
    /// Both halves of basic auth, when set (empty counts as unset).
    pub fn basic_auth(&self) -> Option<(String, SecretString)> {
        let user = self
            .user
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())?;
        let password = self
            .password
            .as_ref()
            .filter(|p| !p.expose_secret().is_empty())?;
        Some((user.to_string(), password.clone()))
    }
}

/// Where the canaries' numbers come from (docs/evidence.md): the Prometheus
/// Flagger's analysis queries. Unset: messages show Flagger's events only.
#[derive(Debug, Clone, Default, Args)]
pub struct PrometheusConfig {
    /// The Prometheus API's base URL (as Flagger's `metricsServer`), e.g.
    /// http://prometheus.istio-system:9090.
    #[arg(long = "prometheus-url", env = "GATEBOT_PROMETHEUS_URL")]
    pub url: Option<String>,
    /// A file holding a bearer token, read again at each refresh (projected
    /// service-account tokens rotate).
    #[arg(long = "prometheus-token-file", env = "GATEBOT_PROMETHEUS_TOKEN_FILE")]
    pub bearer_token_file: Option<PathBuf>,
    /// Basic auth's password; the user is the URL's user part
    /// (`http://gatebot@prometheus:9090`).
    #[arg(long = "prometheus-password", env = "GATEBOT_PROMETHEUS_PASSWORD", value_parser = parse_secret, hide_env_values = true)]
    pub password: Option<SecretString>,
}

impl PrometheusConfig {
    /// The URL as given, without a trailing slash; empty counts as unset.
    pub fn url(&self) -> Option<&str> {
        self.url
            .as_deref()
            .map(|u| u.trim().trim_end_matches('/'))
            .filter(|u| !u.is_empty())
    }

    /// The bearer token file; empty counts as unset.
    pub fn bearer_token_file(&self) -> Option<&std::path::Path> {
        self.bearer_token_file
            .as_deref()
            .filter(|p| !p.as_os_str().is_empty())
    }

    /// The URL requests go to: without its user part, which says who to
    /// sign in as, not where to go.
    pub fn base(&self) -> Option<String> {
        let mut url = reqwest::Url::parse(self.url()?).ok()?;
        url.set_username("").ok()?;
        url.set_password(None).ok()?;
        Some(url.as_str().trim_end_matches('/').to_string())
    }

    /// The URL's user part, decoded; empty counts as unset.
    fn user(&self) -> Option<String> {
        let url = reqwest::Url::parse(self.url()?).ok()?;
        let user = percent_encoding::percent_decode_str(url.username())
            .decode_utf8()
            .ok()?;
        Some(user.into_owned()).filter(|u| !u.is_empty())
    }

    /// Basic auth, when both halves are set (empty counts as unset).
    pub fn basic_auth(&self) -> Option<(String, &SecretString)> {
        let user = self.user()?;
        let password = self
            .password
            .as_ref()
            .filter(|p| !p.expose_secret().is_empty())?;
        Some((user, password))
    }

    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(url) = self.url() {
            if reqwest::Url::parse(url).map_or(true, |u| !matches!(u.scheme(), "http" | "https")) {
                out.push(format!(
                    "GATEBOT_PROMETHEUS_URL: `{}` is not an http(s) URL",
                    url_shown(url)
                ));
            }
        }
        let parsed = self.url().and_then(|u| reqwest::Url::parse(u).ok());
        if parsed.as_ref().is_some_and(|u| u.password().is_some()) {
            out.push("GATEBOT_PROMETHEUS_URL holds a password: write only the user in the URL (http://gatebot@prometheus:9090) and the password in GATEBOT_PROMETHEUS_PASSWORD".into());
        }
        if parsed.as_ref().is_some_and(|u| !u.username().is_empty()) && self.user().is_none() {
            out.push("GATEBOT_PROMETHEUS_URL: its user part is not UTF-8 once decoded".into());
        }
        // Basic auth joins user and password with `:`: a user holding one would
        // carry part of a password in the URL.
        if self
            .user()
            .is_some_and(|u| u.contains(':') || u.chars().any(char::is_control))
        {
            out.push("GATEBOT_PROMETHEUS_URL: its user part holds a `:` or a control character once decoded: write the password in GATEBOT_PROMETHEUS_PASSWORD".into());
        }
        let user = self.user().is_some();
        let password = self
            .password
            .as_ref()
            .is_some_and(|p| !p.expose_secret().is_empty());
        if user != password {
            out.push(
                "basic auth to Prometheus needs both a user in GATEBOT_PROMETHEUS_URL (http://gatebot@prometheus:9090) and GATEBOT_PROMETHEUS_PASSWORD".into(),
            );
        }
        if user && self.bearer_token_file().is_some() {
            out.push(
                "GATEBOT_PROMETHEUS_TOKEN_FILE and basic auth exclude each other: set one".into(),
            );
        }
        out
    }
}

/// A URL as gatebot shows it (check-config, its problems): as written, but
/// with whatever may be a secret replaced by `***`: the user part (a name
/// may be a token: `https://<token>@host`), every query value but those of
/// a few known settings (`sslmode=disable`), a query key given without a
/// value, and a fragment. Text that does not parse as a URL is not shown:
/// it may hold a password. The one function for every URL-valued setting.
pub fn url_shown(url: &str) -> String {
    /// Query keys whose values are settings, never secrets.
    const PLAIN: [&str; 6] = [
        "sslmode",
        "application_name",
        "connect_timeout",
        "target_session_attrs",
        "mode",
        "cache",
    ];
    let plain_value = |v: &str| {
        !v.is_empty()
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    let Ok(mut parsed) = reqwest::Url::parse(url) else {
        return "(set: not a URL, not shown)".to_string();
    };
    let password = parsed.password().is_some();
    let nothing_hidden = parsed.username().is_empty()
        && !password
        && parsed.query().is_none()
        && parsed.fragment().is_none();
    if nothing_hidden {
        return url.to_string();
    }
    if !parsed.username().is_empty() || password {
        let masked = parsed
            .set_username("***")
            .and_then(|()| parsed.set_password(password.then_some("***")));
        if masked.is_err() {
            return "(set, not shown: it holds a user part)".to_string();
        }
    }
    if parsed.query().is_some() {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| match (PLAIN.contains(&&*k), v.is_empty()) {
                (true, _) if plain_value(&v) => (k.into_owned(), v.into_owned()),
                (_, true) => ("***".to_string(), String::new()),
                _ => (k.into_owned(), "***".to_string()),
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    if parsed.fragment().is_some() {
        parsed.set_fragment(Some("***"));
    }
    parsed.to_string()
}

/// How outbound calls (GitHub, Slack, the CLI) leave the network: the usual
/// proxy variables, and one more CA to trust next to the OS roots.
#[derive(Debug, Clone, Default, Args)]
pub struct OutboundConfig {
    /// Proxy for https:// calls (also read as `https_proxy`). Its value is
    /// never printed: a proxy URL may carry a password (check-config shows it
    /// without one).
    #[arg(long = "https-proxy", env = "HTTPS_PROXY", hide_env_values = true)]
    pub https_proxy: Option<String>,

    /// Proxy for http:// calls (also read as `http_proxy`).
    #[arg(long = "http-proxy", env = "HTTP_PROXY", hide_env_values = true)]
    pub http_proxy: Option<String>,

    /// Hosts, domains (.example.com), IPs or CIDRs reached without the proxy,
    /// comma separated (also read as `no_proxy`).
    #[arg(long = "no-proxy", env = "NO_PROXY")]
    pub no_proxy: Option<String>,

    /// A PEM file of CA certificates trusted for outbound calls as well as the
    /// OS roots (a TLS-inspecting proxy's CA, GitHub Enterprise's own CA).
    #[arg(long = "extra-ca-file", env = "GATEBOT_EXTRA_CA_FILE")]
    pub extra_ca_file: Option<PathBuf>,
}

impl OutboundConfig {
    /// The settings from the environment alone (for clients built before any
    /// configuration is read).
    pub fn from_env() -> Self {
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            outbound: OutboundConfig,
        }
        // Every field is an optional string: parsing no flags cannot fail.
        Wrapper::try_parse_from(["gatebot"]).map_or_else(|_| Self::default(), |w| w.outbound)
    }

    /// A proxy variable, upper case first as curl reads them, then lower case;
    /// empty counts as unset.
    fn var(given: &Option<String>, lower: &str) -> Option<String> {
        let set = |v: &str| Some(v.trim().to_string()).filter(|v| !v.is_empty());
        given
            .as_deref()
            .and_then(set)
            .or_else(|| std::env::var(lower).ok().as_deref().and_then(set))
    }

    pub fn https_proxy(&self) -> Option<String> {
        Self::var(&self.https_proxy, "https_proxy")
    }

    pub fn http_proxy(&self) -> Option<String> {
        Self::var(&self.http_proxy, "http_proxy")
    }

    pub fn no_proxy(&self) -> Option<String> {
        Self::var(&self.no_proxy, "no_proxy")
    }

    /// Empty counts as unset (as `.env.example` leaves it).
    pub fn extra_ca_file(&self) -> Option<&std::path::Path> {
        self.extra_ca_file
            .as_deref()
            .filter(|p| !p.as_os_str().is_empty())
    }
}

/// Whether the pages under /ui are served, and whether they take actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UiMode {
    /// No pages: /ui answers 404.
    Off,
    /// Pages, sign-in, but no actions.
    ReadOnly,
    /// Pages, and actions for signed-in people allowed to act.
    On,
}

/// The web pages (docs/web.md).
#[derive(Debug, Clone, Args)]
pub struct UiConfig {
    /// off, read-only or on.
    #[arg(long = "ui", env = "GATEBOT_UI", value_enum, default_value = "on")]
    pub mode: UiMode,
    /// Signs session cookies (32 bytes or more). Unset: a random key per start,
    /// so sessions end at a restart and do not cross replicas.
    #[arg(long = "ui-session-key", env = "GATEBOT_UI_SESSION_KEY", value_parser = parse_secret, hide_env_values = true)]
    pub session_key: Option<SecretString>,
    /// "Sign in with GitHub": the GitHub App's or an OAuth App's client id.
    #[arg(long = "ui-github-client-id", env = "GATEBOT_UI_GITHUB_CLIENT_ID")]
    pub github_client_id: Option<String>,
    /// Its client secret.
    #[arg(long = "ui-github-client-secret", env = "GATEBOT_UI_GITHUB_CLIENT_SECRET", value_parser = parse_secret, hide_env_values = true)]
    pub github_client_secret: Option<SecretString>,
    /// Authenticating proxies (addresses or CIDRs) whose X-Forwarded-User /
    /// X-Forwarded-Email are believed: `[ui] trusted_proxies` in the policy
    /// file. Empty: none.
    #[arg(skip)]
    pub trusted_proxies: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct GithubConfig {
    /// Webhook secrets, comma-separated (the first signs nothing; any one verifies, for rotation).
    #[arg(long = "github-webhook-secret", env = "GATEBOT_GITHUB_WEBHOOK_SECRET", value_parser = parse_secret, hide_env_values = true)]
    pub webhook_secret: Option<SecretString>,

    /// Personal or fine-grained access token.
    #[arg(long = "github-token", env = "GATEBOT_GITHUB_TOKEN", value_parser = parse_secret, hide_env_values = true)]
    pub token: Option<SecretString>,

    /// GitHub App id (with GATEBOT_GITHUB_APP_PRIVATE_KEY).
    #[arg(long = "github-app-id", env = "GATEBOT_GITHUB_APP_ID")]
    pub app_id: Option<u64>,

    /// GitHub App private key (PEM).
    #[arg(long = "github-app-private-key", env = "GATEBOT_GITHUB_APP_PRIVATE_KEY", value_parser = parse_secret, hide_env_values = true)]
    pub app_private_key: Option<SecretString>,

    /// API base URL (GitHub Enterprise: https://HOST/api/v3).
    #[arg(
        id = "github_api_url",
        long = "github-api-url",
        env = "GATEBOT_GITHUB_API_URL",
        default_value = "https://api.github.com"
    )]
    pub api_url: String,

    /// Default repository (owner/repo) for short gate keys like /gates/promote/pr/42.
    #[arg(long = "github-repository", env = "GATEBOT_GITHUB_REPOSITORY", value_parser = parse_repo)]
    pub repository: Option<RepoName>,

    /// Only these repositories (owner/repo, comma-separated) are listened to; empty: all.
    #[arg(long = "github-allowed-repositories", env = "GATEBOT_GITHUB_ALLOWED_REPOSITORIES", value_delimiter = ',', value_parser = parse_repo)]
    pub allowed_repositories: Vec<RepoName>,

    /// Gate kinds a push of new commits to the PR closes (`[github]
    /// close_on_push` in the policy file).
    #[arg(skip = vec![GateKind::Start, GateKind::Promote, GateKind::Traffic])]
    pub close_on_push: Vec<GateKind>,

    /// The bot's own login, whose comments are never commands (`[github]
    /// bot_login`; found from the token when unset).
    #[arg(skip)]
    pub bot_login: Option<String>,

    /// A check run with buttons (Promote, Roll back, Hold) per waiting gate
    /// of a PR; needs a GitHub App (`[github] check_runs`).
    #[arg(skip)]
    pub check_runs: bool,

    /// A GitHub Deployment per canary revision of a PR, its statuses
    /// following Flagger's phases (`[github] deployments`).
    #[arg(skip)]
    pub deployments: bool,
}

impl GithubConfig {
    /// GitHub's web pages (sign-in, App set-up), found from the API's URL:
    /// https://api.github.com is https://github.com, https://api.X.ghe.com is
    /// https://X.ghe.com, and GitHub Enterprise Server's https://HOST/api/v3
    /// is https://HOST.
    ///
    /// Only the scheme, host, port and path are kept: a user part (which may
    /// be a token) or a query never reaches a page or a redirect.
    pub fn web_url(&self) -> String {
        let Ok(mut url) = reqwest::Url::parse(self.api_url.trim()) else {
            return "https://github.com".to_string();
        };
        if !matches!(url.scheme(), "http" | "https") {
            return "https://github.com".to_string();
        }
        let (_, _) = (url.set_username(""), url.set_password(None));
        url.set_query(None);
        url.set_fragment(None);
        let path = url.path().trim_end_matches('/').to_string();
        let lower = path.to_ascii_lowercase();
        if lower.ends_with("/api/v3") {
            url.set_path(&path[..path.len() - "/api/v3".len()]);
        } else if let Some(web) = url.host_str().and_then(|h| h.strip_prefix("api.")) {
            // The host is lower case once parsed.
            let web = web.to_string();
            if url.set_host(Some(&web)).is_err() {
                return "https://github.com".to_string();
            }
        }
        url.as_str().trim_end_matches('/').to_string()
    }

    /// Check runs are made: asked for, and a GitHub App to make them (they are App-only).
    pub fn check_runs_on(&self) -> bool {
        self.check_runs && self.token.is_none() && self.app_id.is_some()
    }
}

#[derive(Debug, Clone, Args)]
pub struct SlackConfig {
    /// Signing secret of the Slack app.
    #[arg(long = "slack-signing-secret", env = "GATEBOT_SLACK_SIGNING_SECRET", value_parser = parse_secret, hide_env_values = true)]
    pub signing_secret: Option<SecretString>,

    /// Bot token (xoxb-…).
    #[arg(long = "slack-bot-token", env = "GATEBOT_SLACK_BOT_TOKEN", value_parser = parse_secret, hide_env_values = true)]
    pub bot_token: Option<SecretString>,

    /// App-level token (xapp-…, scope connections:write): takes clicks and slash commands over Socket Mode, with no public URL.
    #[arg(long = "slack-app-token", env = "GATEBOT_SLACK_APP_TOKEN", value_parser = parse_secret, hide_env_values = true)]
    pub app_token: Option<SecretString>,

    /// Channel for waiting messages (id or #name); a Canary webhook's metadata `slack_channel` overrides it where `[[slack.channels]]` binds that channel.
    #[arg(long = "slack-channel", env = "GATEBOT_SLACK_CHANNEL")]
    pub channel: Option<String>,

    /// Web API base URL.
    #[arg(
        id = "slack_api_url",
        long = "slack-api-url",
        env = "GATEBOT_SLACK_API_URL",
        default_value = "https://slack.com/api"
    )]
    pub api_url: String,

    /// Who may act from Slack when the policy file's `[slack] approvers`
    /// names nobody: nobody, unless a test sets some.
    #[arg(skip)]
    pub approvers: Vec<String>,
}

impl SlackConfig {
    /// The app-level token when Socket Mode is on.
    pub fn socket_mode_token(&self) -> Option<&str> {
        self.app_token
            .as_ref()
            .map(|t| t.expose_secret())
            .filter(|t| !t.is_empty())
    }

    /// Whether Slack can reach gatebot at all: signed HTTP requests or Socket Mode.
    pub fn inbound(&self) -> bool {
        self.signing_secret.is_some() || self.socket_mode_token().is_some()
    }
}

impl Config {
    /// The gate kinds that a push closes.
    pub fn close_on_push(&self) -> &[GateKind] {
        &self.github.close_on_push
    }

    pub fn admin_token(&self) -> Option<&str> {
        self.admin_token
            .as_ref()
            .map(|t| t.expose_secret())
            .filter(|t| !t.is_empty())
    }

    pub fn pipeline_token(&self) -> Option<&str> {
        self.pipeline_token
            .as_ref()
            .map(|t| t.expose_secret())
            .filter(|t| !t.is_empty())
    }

    /// The named operator tokens (none when unset): name and SHA-256.
    pub fn api_tokens(&self) -> impl Iterator<Item = (&str, &[u8; 32])> {
        self.api_tokens.get().tokens().entries()
    }

    /// The clusters whose Flagger may ask gates, by token.
    pub fn flagger_tokens(&self) -> &crate::gate::FlaggerTokens {
        self.flagger_tokens.get()
    }

    /// Whether any operator token (the admin token or a named one) is set.
    pub fn has_operators(&self) -> bool {
        self.admin_token().is_some() || self.api_tokens().next().is_some()
    }

    /// A config for tests and tools: defaults, a given database, no integrations.
    pub fn with_database(url: &str) -> Self {
        let mut config = Self::try_parse_defaults();
        config.database_url = url.to_string();
        config
    }

    fn try_parse_defaults() -> Self {
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            config: Config,
        }
        // No flags: defaults, and whatever the environment sets.
        Wrapper::parse_from(["gatebot"]).config
    }

    /// Problems worth refusing to start for, each with what to do.
    pub fn problems(&self) -> Vec<String> {
        let mut out = self.out_of_range();
        if let Some(dir) = self.templates_dir.as_ref().filter(|d| !d.is_dir()) {
            out.push(format!(
                "[templates] dir: {:?} is not a directory: create it, or remove the table for the built-in templates",
                dir.display().to_string()
            ));
        }
        for proxy in self.ui.trusted_proxies.iter().map(|p| p.trim()) {
            if let Err(e) = proxy.parse::<Cidr>() {
                out.push(format!("[ui] trusted_proxies: {e}"));
            }
        }
        if !matches!(
            self.github.api_url.split_once("://"),
            Some(("http" | "https", _))
        ) {
            out.push(format!(
                "GATEBOT_GITHUB_API_URL: {} is not an http(s) URL",
                url_shown(&self.github.api_url)
            ));
        }
        for (name, invalid) in [
            ("GATEBOT_API_TOKENS", &self.api_tokens.invalid),
            ("GATEBOT_FLAGGER_TOKENS", &self.flagger_tokens.invalid),
        ] {
            if let Some(e) = invalid {
                out.push(format!("{name}: {e}"));
            }
        }
        out.extend(self.shared_tokens());
        out.extend(self.prometheus.problems());
        let gh = &self.github;
        if gh.app_id.is_some() != gh.app_private_key.is_some() {
            out.push(
                "a GitHub App needs both GATEBOT_GITHUB_APP_ID and GATEBOT_GITHUB_APP_PRIVATE_KEY"
                    .into(),
            );
        }
        if gh.token.is_some() && gh.app_id.is_some() {
            out.push("set either GATEBOT_GITHUB_TOKEN or a GitHub App, not both".into());
        }
        if (gh.token.is_some() || gh.app_id.is_some()) && gh.webhook_secret.is_none() {
            out.push("GitHub credentials without GATEBOT_GITHUB_WEBHOOK_SECRET: set the secret so /webhooks/github can verify deliveries".into());
        }
        out.extend(self.kubernetes_problems());
        let ui = &self.ui;
        if ui.github_client_id.is_some() != ui.github_client_secret.is_some() {
            out.push("Sign in with GitHub needs both GATEBOT_UI_GITHUB_CLIENT_ID and GATEBOT_UI_GITHUB_CLIENT_SECRET".into());
        }
        if ui
            .session_key
            .as_ref()
            .is_some_and(|k| k.expose_secret().len() < 32)
        {
            out.push("GATEBOT_UI_SESSION_KEY must be at least 32 characters".into());
        }
        let sl = &self.slack;
        if sl.inbound() != sl.bot_token.is_some() {
            out.push(
                "Slack needs GATEBOT_SLACK_BOT_TOKEN and GATEBOT_SLACK_SIGNING_SECRET (or GATEBOT_SLACK_APP_TOKEN for Socket Mode)".into(),
            );
        }
        if sl
            .socket_mode_token()
            .is_some_and(|t| !t.starts_with("xapp-"))
        {
            out.push("GATEBOT_SLACK_APP_TOKEN must be an app-level token (xapp-…) with the connections:write scope".into());
        }
        out.extend(self.teams.problems());
        out
    }
}

impl Config {
    /// A named token that is also the admin or the pipeline token would be
    /// two identities at once.
    fn shared_tokens(&self) -> Vec<String> {
        let others = [
            ("GATEBOT_ADMIN_TOKEN", self.admin_token()),
            ("GATEBOT_PIPELINE_TOKEN", self.pipeline_token()),
        ];
        let mut out = Vec::new();
        for (var, token) in others {
            let Some(token) = token else { continue };
            let hash = crate::gate::tokens::sha256(token);
            for (name, _) in self.api_tokens().filter(|(_, h)| **h == hash) {
                out.push(format!(
                    "GATEBOT_API_TOKENS: `{name}` has the same token as {var}: give each person a token of their own"
                ));
            }
        }
        out
    }
}

impl Config {
    /// Values outside what gatebot can work with, each naming its setting and range.
    fn out_of_range(&self) -> Vec<String> {
        const MINUTE: Duration = Duration::from_secs(60);
        const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
        let ttl = self.approval_ttl;
        if ttl.is_zero() || (MINUTE..=YEAR).contains(&ttl) {
            return Vec::new();
        }
        vec![format!(
            "GATEBOT_APPROVAL_TTL must be from 1m to 365d, or 0 for approvals that never expire, not {}",
            humantime::format_duration(ttl)
        )]
    }

    /// Settings that work but put gates at risk, each with why; logged at start
    /// and shown by `check-config`.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        // A warning, not a refusal: the card still says a gate waits.
        if self.teams.workflow_url().is_some() && self.public_url.is_none() {
            out.push("GATEBOT_TEAMS_WORKFLOW_URL without GATEBOT_PUBLIC_URL: the Workflows cards have no buttons, only a link to the gate's page, and without GATEBOT_PUBLIC_URL they have none: nobody can act from them; set GATEBOT_PUBLIC_URL to where people reach gatebot".into());
        }
        // Judged by what the entry covers, not how it is written: two /1
        // networks trust as much as one /0.
        for proxy in self.ui.trusted_proxies.iter().map(|p| p.trim()) {
            let wide = proxy.parse::<Cidr>().ok().filter(|c| c.span_bits() > 24);
            if let Some(cidr) = wide {
                let said = match cidr.span_bits() {
                    32 | 128 => "every address".to_string(),
                    bits => format!("2^{bits} addresses"),
                };
                out.push(format!(
                    "[ui] trusted_proxies: {proxy:?} trusts {said}: anyone who can reach gatebot from there can sign in to the pages as anyone by sending X-Forwarded-User; name only your authenticating proxy's addresses"
                ));
            }
        }
        let gh = &self.github;
        if gh.check_runs && !gh.check_runs_on() {
            out.push("[github] check_runs = true without a GitHub App (GATEBOT_GITHUB_APP_ID, and no GATEBOT_GITHUB_TOKEN): check runs are made by Apps only, so they are off".into());
        }
        if self.loadtester_open_access {
            out.push("[loadtester] open_access = true: anyone who can reach gatebot can open and close gates through /gate/open and /rollback/open, as with the loadtester".into());
        }
        out
    }
}

#[derive(Debug, Args)]
pub struct GatesArgs {
    /// gatebot server to talk to.
    #[arg(
        long,
        env = "GATEBOT_SERVER",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub server: String,

    /// Admin token (sent as a bearer token).
    #[arg(long, env = "GATEBOT_ADMIN_TOKEN", value_parser = parse_secret, hide_env_values = true, global = true)]
    pub token: Option<SecretString>,

    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(flatten)]
    pub outbound: OutboundConfig,

    #[command(subcommand)]
    pub action: GatesAction,
}

#[derive(Debug, Subcommand)]
pub enum GatesAction {
    /// List gates, their state and who waits at them.
    List,
    /// Show one gate: state, canaries, waits and history.
    Show {
        /// The gate's URL path, e.g. /gates/promote/pr/42 or promote/acme/shop/pr/42.
        gate: String,
    },
    /// Open (approve) a gate.
    Open {
        /// The gate's URL path, e.g. /gates/promote/pr/42 or promote/acme/shop/pr/42.
        gate: String,
        /// Why, kept in the audit log with the change.
        #[arg(long)]
        reason: Option<String>,
        /// With the policy's [[environments]]: the environment or cluster to open it in.
        #[arg(long)]
        env: Option<String>,
    },
    /// Close a gate.
    Close {
        /// The gate's URL path, e.g. /gates/promote/pr/42 or promote/acme/shop/pr/42.
        gate: String,
        /// Why, kept in the audit log with the change.
        #[arg(long)]
        reason: Option<String>,
        /// With the policy's [[environments]]: the environment or cluster to close it in.
        #[arg(long)]
        env: Option<String>,
    },
}

// --- Microsoft Teams (docs/teams.md) ---

#[derive(Debug, Clone, Args)]
pub struct TeamsConfig {
    /// The bot's Microsoft App ID (its Azure Bot resource): the audience of the Bot Framework's tokens. Unset: Teams is off.
    #[arg(
        id = "teams_app_id",
        long = "teams-app-id",
        env = "GATEBOT_TEAMS_APP_ID"
    )]
    pub app_id: Option<String>,

    /// Entra (Azure AD) tenant ids whose Teams may talk to the bot, comma-separated; others are refused.
    #[arg(
        id = "teams_tenants",
        long = "teams-tenants",
        env = "GATEBOT_TEAMS_TENANTS",
        value_delimiter = ','
    )]
    pub tenants: Vec<String>,

    /// The Bot Framework's OpenID metadata document, which names its signing keys.
    #[arg(
        id = "teams_openid_metadata_url",
        long = "teams-openid-metadata-url",
        env = "GATEBOT_TEAMS_OPENID_METADATA_URL",
        default_value = "https://login.botframework.com/v1/.well-known/openidconfiguration"
    )]
    pub openid_metadata_url: String,

    /// Who may act from Teams when the policy file's `[teams] approvers`
    /// names nobody: nobody, unless a test sets some.
    #[arg(skip)]
    pub approvers: Vec<String>,

    /// The bot's client secret (its app registration's "Certificates & secrets"): gatebot's answers are posted with a token it gets.
    #[arg(long = "teams-app-password", env = "GATEBOT_TEAMS_APP_PASSWORD", value_parser = parse_secret, hide_env_values = true)]
    pub app_password: Option<SecretString>,

    /// The bot's tenant, for a single-tenant bot; unset: a multi-tenant bot's tokens come from botframework.com.
    #[arg(long = "teams-tenant", env = "GATEBOT_TEAMS_TENANT")]
    pub tenant: Option<String>,

    /// The login service that issues the bot's tokens (tests point it at a fake).
    #[arg(
        id = "teams_login_url",
        long = "teams-login-url",
        env = "GATEBOT_TEAMS_LOGIN_URL",
        default_value = "https://login.microsoftonline.com"
    )]
    pub login_url: String,

    /// The conversation (a channel's id, `19:…@thread.tacv2`) that gets a card per waiting gate; the bot must have been added there. A Canary's `teams_channel` metadata names another where the policy's `[[teams.channels]]` binds it to that canary. Unset: no cards.
    #[arg(
        id = "teams_channel",
        long = "teams-channel",
        env = "GATEBOT_TEAMS_CHANNEL"
    )]
    pub channel: Option<String>,

    /// A Teams Workflows webhook: every waiting gate's card is posted there, with a link to its page instead of buttons. Needs no bot.
    #[arg(long = "teams-workflow-url", env = "GATEBOT_TEAMS_WORKFLOW_URL", value_parser = parse_secret, hide_env_values = true)]
    pub workflow_url: Option<SecretString>,
}

impl TeamsConfig {
    /// The client secret when answers are posted.
    pub fn app_password(&self) -> Option<&SecretString> {
        self.app_password
            .as_ref()
            .filter(|p| !p.expose_secret().is_empty())
    }

    /// The conversation that gets the cards, if any.
    pub fn channel(&self) -> Option<&str> {
        self.channel
            .as_deref()
            .map(str::trim)
            .filter(|c| !c.is_empty())
    }

    /// The Workflows webhook, if any.
    pub fn workflow_url(&self) -> Option<&SecretString> {
        self.workflow_url
            .as_ref()
            .filter(|u| !u.expose_secret().trim().is_empty())
    }

    /// The single tenant of the bot, if any.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
    }

    /// The app id when Teams is on.
    pub fn app_id(&self) -> Option<&str> {
        self.app_id
            .as_deref()
            .map(str::trim)
            .filter(|id| !id.is_empty())
    }

    /// The tenants listed, trimmed, none empty.
    pub fn tenants(&self) -> impl Iterator<Item = &str> {
        self.tenants
            .iter()
            .map(|t| t.trim())
            .filter(|t| !t.is_empty())
    }

    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.app_id().is_some() && self.tenants().next().is_none() {
            out.push("GATEBOT_TEAMS_APP_ID without GATEBOT_TEAMS_TENANTS: every request would be refused; list the tenant ids of your organisation".into());
        }
        out
    }
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` in hex digits, as Entra writes object ids.
pub(crate) fn is_guid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every setting is in one group, and `.env.example` lists the groups
    /// under their headings in the same order, each setting in its own.
    #[test]
    fn the_settings_are_grouped_alike_everywhere() {
        let names: Vec<String> = super::setting_names(&Cli::command()).into_iter().collect();
        let grouped: Vec<&str> = super::GROUPS
            .iter()
            .flat_map(|(_, n)| n.iter().copied())
            .collect();
        let mut sorted = grouped.clone();
        sorted.sort();
        assert_eq!(sorted, names, "each setting in exactly one group");
        let example = include_str!("../.env.example");
        let mut seen: Vec<(String, Vec<String>)> = Vec::new();
        for line in example.lines() {
            if let Some(heading) = line
                .strip_prefix("# --- ")
                .and_then(|l| l.strip_suffix(" ---"))
            {
                seen.push((heading.to_string(), Vec::new()));
            } else if let Some((name, _)) = line.split_once('=').filter(|_| !line.starts_with('#'))
            {
                if name != "RUST_LOG" {
                    seen.last_mut()
                        .expect("a heading first")
                        .1
                        .push(name.to_string());
                }
            }
        }
        let want: Vec<(String, Vec<String>)> = super::GROUPS
            .iter()
            .map(|(h, n)| (h.to_string(), n.iter().map(|s| s.to_string()).collect()))
            .collect();
        let headings: Vec<(String, Vec<String>)> = seen
            .into_iter()
            .map(|(h, n)| (h.split(" (").next().unwrap_or(&h).to_string(), n))
            .collect();
        assert_eq!(headings, want);
    }

    /// docs/operations.md says how many settings there are.
    #[test]
    fn the_docs_count_the_settings() {
        let count: usize = super::GROUPS
            .iter()
            .map(|(_, n)| n.iter().filter(|n| n.starts_with("GATEBOT_")).count())
            .sum();
        let docs = include_str!("../docs/operations.md");
        assert!(
            docs.contains(&format!("gatebot reads {count} `GATEBOT_*` settings")),
            "{count}"
        );
    }

    #[test]
    fn githubs_web_pages_are_found_from_its_api() {
        let web = |api: &str| {
            let mut config = super::Config::with_database("sqlite://unused.db");
            config.github.api_url = api.to_string();
            config.github.web_url()
        };
        assert_eq!(web("https://api.github.com"), "https://github.com");
        assert_eq!(web("https://api.github.com/"), "https://github.com");
        assert_eq!(
            web("https://ghe.example.com/api/v3"),
            "https://ghe.example.com"
        );
        assert_eq!(web("https://api.acme.ghe.com"), "https://acme.ghe.com");
        assert_eq!(web("http://127.0.0.1:9999"), "http://127.0.0.1:9999");
        assert_eq!(
            web("https://tok:secret@api.github.com"),
            "https://github.com"
        );
        assert_eq!(web("https://API.github.com"), "https://github.com");
        assert_eq!(
            web("https://ghe.example.com/API/V3/"),
            "https://ghe.example.com"
        );
        assert_eq!(
            web("https://gw.corp/proxy?to=https://api.github.com"),
            "https://gw.corp/proxy"
        );
        assert_eq!(web("javascript:alert(1)//api.x"), "https://github.com");
    }

    #[test]
    fn prometheus_basic_auth_takes_its_user_from_the_url() {
        let mut p = super::PrometheusConfig {
            url: Some("http://gate%20bot@prometheus:9090/".into()),
            password: Some("pw".to_string().into()),
            ..Default::default()
        };
        assert_eq!(p.base().as_deref(), Some("http://prometheus:9090"));
        assert_eq!(p.basic_auth().map(|(u, _)| u).as_deref(), Some("gate bot"));
        assert!(p.problems().is_empty(), "{:?}", p.problems());
        p.password = None;
        assert_eq!(p.problems().len(), 1, "a user without a password");
        p.url = Some("http://gatebot%3Asupersecret@prometheus:9090".into());
        p.password = Some("pw".to_string().into());
        assert!(
            p.problems().iter().any(|e| e.contains("holds a `:`")),
            "{:?}",
            p.problems()
        );
        p.url = Some("http://u:secret@prometheus:9090".into());
        assert!(p.problems().iter().any(|e| e.contains("holds a password")));
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    fn slack(secret: bool, bot: bool, app: Option<&str>) -> Vec<String> {
        let mut config = super::Config::with_database("sqlite://unused.db");
        let s = |v: &str| Some(v.to_string().into());
        config.slack.signing_secret = if secret { s("secret") } else { None };
        config.slack.bot_token = if bot { s("xoxb-1") } else { None };
        config.slack.app_token = app.and_then(s);
        config
            .problems()
            .into_iter()
            .filter(|p| p.contains("SLACK"))
            .collect()
    }

    #[test]
    fn check_runs_are_on_only_with_an_app_and_said_off_otherwise() {
        let mut config = super::Config::with_database("sqlite://unused.db");
        let off = |c: &super::Config| {
            c.warnings()
                .iter()
                .any(|w| w.contains("[github] check_runs"))
        };
        config.github.check_runs = true;
        config.github.token = Some("ghp_x".to_string().into());
        assert!(!config.github.check_runs_on() && off(&config), "a token");
        config.github.token = None;
        config.github.app_id = Some(1);
        assert!(config.github.check_runs_on() && !off(&config), "an App");
        config.github.check_runs = false;
        assert!(
            !config.github.check_runs_on() && !off(&config),
            "not asked for"
        );
    }

    #[test]
    fn slack_takes_a_signing_secret_or_an_app_token_with_the_bot_token() {
        assert!(slack(false, false, None).is_empty());
        assert!(slack(true, true, None).is_empty());
        assert!(slack(false, true, Some("xapp-1-A1-x")).is_empty());
        assert!(slack(true, true, Some("xapp-1-A1-x")).is_empty());
        let missing = slack(false, false, Some("xapp-1-A1-x"));
        assert!(
            missing[0].contains("GATEBOT_SLACK_BOT_TOKEN"),
            "{missing:?}"
        );
        assert_eq!(slack(false, true, None).len(), 1, "a bot token alone");
        let wrong = slack(false, true, Some("xoxb-not-an-app-token"));
        assert!(wrong[0].contains("xapp-"), "{wrong:?}");
        assert!(
            !wrong[0].contains("xoxb-not"),
            "the token itself is never shown"
        );
    }
}

/// Reading the cluster (docs/gitops.md, "The PR found from the cluster"):
/// a canary's own gate answered as the gate of the PR that brought the
/// canary's revision. Off unless the policy file's `[kubernetes] lookup`
/// is true; every field but the kubeconfig is that table's.
#[derive(Debug, Clone, Args)]
pub struct KubernetesConfig {
    /// Tie `/gates/<kind>` (a canary's own gate) to the pull request whose
    /// commit the canary's target runs, read from the cluster and GitHub.
    #[arg(skip)]
    pub lookup: bool,
    /// A kubeconfig file to read. Unset: `KUBECONFIG` or `~/.kube/config`,
    /// else the pod's service account (in-cluster).
    #[arg(long = "kubeconfig", env = "GATEBOT_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The annotation holding the commit, on the canary's target or its pod
    /// template. Without it the image tag of the container is used when it
    /// looks like a commit (7 to 40 hex digits).
    #[arg(skip = String::from("gatebot.dev/commit"))]
    pub commit_annotation: String,
    /// The annotation naming the repository (`owner/repo`), on the Canary or
    /// its target. Without it: GATEBOT_GITHUB_REPOSITORY.
    #[arg(skip = String::from("gatebot.dev/repository"))]
    pub repository_annotation: String,
    /// The container whose image tag is the commit. Unset: the first one.
    #[arg(skip)]
    pub container: Option<String>,
    /// A Secret of gatebot's own namespace that /ui/setup/github writes the
    /// new GitHub App's id, key and secrets into (gatebot needs `get` and
    /// `patch` on it). Unset: the page only shows them, once.
    #[arg(skip)]
    pub app_secret: Option<String>,
}

impl Config {
    fn kubernetes_problems(&self) -> Vec<String> {
        let gh = &self.github;
        let mut out = Vec::new();
        if self.kubernetes.lookup && gh.token.is_none() && gh.app_id.is_none() {
            out.push("[kubernetes] lookup needs GitHub credentials (GATEBOT_GITHUB_TOKEN or a GitHub App) to find the pull request of a commit".into());
        }
        out
    }
}
