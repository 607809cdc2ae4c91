//! Build metadata for `gatebot_build_info`, and the cfgs of tests that need services.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rustc-env=GATEBOT_BUILD_COMMIT={}", commit());
    println!("cargo:rustc-env=GATEBOT_BUILD_RUSTC={}", rustc());
    test_services();
}

/// Tests that need a PostgreSQL server (`gatebot_test_postgres`) or clusters
/// of their own (`gatebot_test_pg_ctl`) are marked ignored when the setting is
/// missing at build time, so the summary counts them as not run.
fn test_services() {
    for (var, cfg) in [
        ("GATEBOT_TEST_POSTGRES_URL", "gatebot_test_postgres"),
        ("GATEBOT_TEST_PG_CTL", "gatebot_test_pg_ctl"),
    ] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        println!("cargo:rerun-if-env-changed={var}");
        if std::env::var(var).is_ok_and(|v| !v.is_empty()) {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
}

/// `GATEBOT_BUILD_COMMIT` when set (image builds, whose context has no .git), else
/// the checkout's HEAD, else `unknown` (a source archive).
fn commit() -> String {
    println!("cargo:rerun-if-env-changed=GATEBOT_BUILD_COMMIT");
    if let Some(given) = std::env::var("GATEBOT_BUILD_COMMIT")
        .ok()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
    {
        return given;
    }
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    // Rebuild when HEAD moves: HEAD itself (a branch switch), the branch's ref,
    // packed refs. Only files that exist: cargo reruns every time for a missing one.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watched.into_iter().flatten() {
        if Path::new(&path).is_file() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    head
}

/// The compiler's version, e.g. `1.89.0`.
fn rustc() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
