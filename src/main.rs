use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use gatebot::config::{Cli, Command, Config};
use gatebot::{telemetry, Gatebot};

fn main() -> ExitCode {
    if let Err(e) = gatebot::config::load_secret_files() {
        eprintln!("gatebot: {e:#}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gatebot: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve(config) => serve(*config).await,
            Command::Gates(args) => gatebot::cli::run(args).await,
            Command::CheckConfig(config) => check_config(*config).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gatebot: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    telemetry::init(config.log_format);
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let gatebot = Gatebot::start(config).await?;
    tracing::info!(
        addr = %listener.local_addr()?,
        store = gatebot.state.store.backend().as_str(),
        "gatebot listening"
    );
    gatebot.serve(listener, shutdown_signal()).await
}

async fn check_config(config: Config) -> anyhow::Result<()> {
    let report = gatebot::cli::check_config(config).await;
    print!("{}", report.text);
    if report.ok {
        Ok(())
    } else {
        anyhow::bail!("the configuration has problems (see above)")
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
