//! The `gatebot` binary's body, so that `main.rs` is one line and the
//! library's surface stays small.

use std::process::ExitCode;

use super::Gatebot;
use crate::config::{CheckConfigArgs, Cli, Command, Config, Setting, UnknownName};
use crate::telemetry;
use anyhow::Context;
use clap::FromArgMatches;

/// The `gatebot` command: every subcommand, its exit code, and its errors on stderr.
pub fn main() -> ExitCode {
    if let Err(e) = crate::config::load_dotenv().and_then(|()| crate::config::load_secret_files()) {
        eprintln!("gatebot: {e:#}");
        return ExitCode::from(2);
    }
    let command = crate::config::cli();
    let matches = match command.clone().try_get_matches() {
        Ok(matches) => matches,
        Err(e) => match crate::config::value_error_in_user_terms(&command, &e) {
            Some(said) => {
                eprintln!("gatebot: {said}");
                return ExitCode::from(2);
            }
            None => e.exit(),
        },
    };
    // Read before the runtime starts, as everything else from the environment.
    let unknown = crate::config::unknown_names(&command);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Where each setting came from, for check-config.
    let settings = match (
        command.find_subcommand("check-config"),
        matches.subcommand_matches("check-config"),
    ) {
        (Some(sub), Some(m)) => crate::config::settings(sub, m),
        _ => Vec::new(),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gatebot: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve(config) => serve(*config, &unknown).await.map(|()| ExitCode::SUCCESS),
            Command::Gates(args) => crate::api::cli::run(args).await.map(|()| ExitCode::SUCCESS),
            Command::CheckConfig(args) => check_config(*args, settings, &unknown)
                .await
                .map(|()| ExitCode::SUCCESS),
            Command::Wait(args) => Ok(wait(args).await),
            Command::Freeze(args) => crate::api::cli::freeze(args)
                .await
                .map(|()| ExitCode::SUCCESS),
            Command::Unfreeze(args) => crate::api::cli::unfreeze(args)
                .await
                .map(|()| ExitCode::SUCCESS),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gatebot: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// 0 approved, 1 rejected (or retired, or timed out), 2 cannot tell.
async fn wait(args: crate::config::WaitArgs) -> ExitCode {
    // The pipeline token is the one a pipeline has; the admin token also works.
    let token = args.token.clone().or_else(|| {
        std::env::var("GATEBOT_ADMIN_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .map(Into::into)
    });
    match crate::api::wait::run(&args, token).await {
        Ok(decided) => {
            println!("{}", decided.message);
            ExitCode::from(if decided.approved { 0 } else { 1 })
        }
        Err(e) => {
            eprintln!("gatebot: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn serve(config: Config, unknown: &[UnknownName]) -> anyhow::Result<()> {
    telemetry::init(config.log_format);
    // A warning, not a refusal: an environment may carry other GATEBOT_*
    // names, and a restart must not take a working gate down over one. But a
    // setting that moved to the policy file is refused: left where it was,
    // its value would be dropped without a word (a lower min_permission).
    let moved: Vec<String> = unknown
        .iter()
        .filter(|n| n.moved.is_some())
        .map(|n| n.to_string())
        .collect();
    if !moved.is_empty() {
        anyhow::bail!("{}", moved.join("; "));
    }
    for name in unknown {
        tracing::warn!("{name}");
    }
    // Registered before anything else: a SIGTERM during start-up (bounded: no
    // file is read without a limit) is kept, and gatebot stops as soon as it is up.
    let stop = shutdown_signal()?;
    // Held until the process ends.
    let _sqlite_lock = crate::store::lock_sqlite_file(&config.database_url)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let gatebot = Gatebot::start(config).await?;
    tracing::info!(
        addr = %listener.local_addr()?,
        store = gatebot.state.store.backend().as_str(),
        "gatebot listening"
    );
    gatebot.serve(listener, stop).await
}

async fn check_config(
    args: CheckConfigArgs,
    settings: Vec<Setting>,
    unknown: &[UnknownName],
) -> anyhow::Result<()> {
    let CheckConfigArgs { probe, mut config } = args;
    // As `serve` does; a policy file that does not read is check-config's problem to say.
    if let Ok(policy) = crate::policy::Policy::from_config(&config) {
        policy.settle(&mut config);
    }
    let probed = probe.then(|| config.clone());
    let mut report = crate::api::cli::check_config(config, &settings, unknown).await;
    if let Some(config) = probed {
        super::probe::probe(&config, &mut report).await;
    }
    report.end();
    print!("{}", report.text);
    if report.ok {
        Ok(())
    } else {
        anyhow::bail!("the configuration has problems (see above)")
    }
}

fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    Ok(async move {
        #[cfg(unix)]
        let term = term.recv();
        #[cfg(not(unix))]
        let term = std::future::pending::<Option<()>>();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term => {},
            () = orphaned() => {},
        }
    })
}

/// For tests only (undocumented in --help): with
/// `GATEBOT_TEST_EXIT_WITH_PARENT=true`, ends when the process that started
/// this one is gone (it is adopted by another), so a test killed by a signal,
/// whose guards never ran, leaves no server behind.
async fn orphaned() {
    #[cfg(unix)]
    if std::env::var("GATEBOT_TEST_EXIT_WITH_PARENT").is_ok_and(|v| v.trim() == "true") {
        let parent = std::os::unix::process::parent_id();
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            if std::os::unix::process::parent_id() != parent {
                tracing::warn!(parent, "the process that started gatebot is gone: stopping");
                return;
            }
        }
    }
    std::future::pending::<()>().await
}
