//! Message templates (minijinja). Built-in copies of `templates/` are compiled
//! in; a file of the same name under `[templates] dir` overrides one. A
//! file there that overrides nothing (a typo, an old name) is refused at start,
//! since it would otherwise be ignored without a word.

pub mod escape;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use minijinja::Environment;
use serde::Serialize;

/// (name under templates/, source) of every built-in template.
const BUILTIN: &[(&str, &str)] = &[
    (
        "github/status.md.j2",
        include_str!("../templates/github/status.md.j2"),
    ),
    (
        "github/reply.md.j2",
        include_str!("../templates/github/reply.md.j2"),
    ),
    (
        "github/help.md.j2",
        include_str!("../templates/github/help.md.j2"),
    ),
    (
        "slack/reminder.j2",
        include_str!("../templates/slack/reminder.j2"),
    ),
    (
        "github/check_run.md.j2",
        include_str!("../templates/github/check_run.md.j2"),
    ),
    (
        "github/reminder.md.j2",
        include_str!("../templates/github/reminder.md.j2"),
    ),
    (
        "github/failure.md.j2",
        include_str!("../templates/github/failure.md.j2"),
    ),
    ("slack/wait.j2", include_str!("../templates/slack/wait.j2")),
    (
        "slack/failure.j2",
        include_str!("../templates/slack/failure.j2"),
    ),
    (
        "slack/status.j2",
        include_str!("../templates/slack/status.j2"),
    ),
    (
        "slack/event.j2",
        include_str!("../templates/slack/event.j2"),
    ),
    (
        "slack/reply.j2",
        include_str!("../templates/slack/reply.j2"),
    ),
    ("slack/help.j2", include_str!("../templates/slack/help.j2")),
    (
        "slack/status_reply.j2",
        include_str!("../templates/slack/status_reply.j2"),
    ),
    (
        "slack/digest.j2",
        include_str!("../templates/slack/digest.j2"),
    ),
    // The web pages: HTML-escaped everywhere (by the `.html` in their names).
    (
        "web/base.html.j2",
        include_str!("../templates/web/base.html.j2"),
    ),
    (
        "web/macros.html.j2",
        include_str!("../templates/web/macros.html.j2"),
    ),
    (
        "web/waiting.html.j2",
        include_str!("../templates/web/waiting.html.j2"),
    ),
    (
        "web/gate.html.j2",
        include_str!("../templates/web/gate.html.j2"),
    ),
    (
        "web/audit_rows.html.j2",
        include_str!("../templates/web/audit_rows.html.j2"),
    ),
    (
        "web/pr.html.j2",
        include_str!("../templates/web/pr.html.j2"),
    ),
    (
        "web/audit.html.j2",
        include_str!("../templates/web/audit.html.j2"),
    ),
    (
        "web/health.html.j2",
        include_str!("../templates/web/health.html.j2"),
    ),
    (
        "web/signin.html.j2",
        include_str!("../templates/web/signin.html.j2"),
    ),
    (
        "web/confirm.html.j2",
        include_str!("../templates/web/confirm.html.j2"),
    ),
    (
        "web/setup_github.html.j2",
        include_str!("../templates/web/setup_github.html.j2"),
    ),
    (
        "web/setup_github_confirm.html.j2",
        include_str!("../templates/web/setup_github_confirm.html.j2"),
    ),
    (
        "web/setup_github_done.html.j2",
        include_str!("../templates/web/setup_github_done.html.j2"),
    ),
];

fn builtin() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    BUILTIN.iter()
}

#[derive(Clone)]
pub struct Templates {
    env: Arc<Environment<'static>>,
}

impl Templates {
    pub fn new(dir: Option<PathBuf>) -> anyhow::Result<Self> {
        Self::with_links(dir, None)
    }

    /// Like [`Templates::new`]; with `public_url` (GATEBOT_PUBLIC_URL) set,
    /// templates get it as `public_url` and link to the gate pages there.
    pub fn with_links(dir: Option<PathBuf>, public_url: Option<&str>) -> anyhow::Result<Self> {
        if let Some(dir) = &dir {
            refuse_unknown(dir)?;
        }
        let mut env = Environment::new();
        if let Some(url) = public_url.map(|u| u.trim().trim_end_matches('/')) {
            if !url.is_empty() {
                env.add_global("public_url", url.to_string());
            }
        }
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Lenient);
        env.add_filter("time", |ms: i64| crate::gate::state::rfc3339(ms));
        // Text from outside (a pipeline's title) cannot form Slack links or mentions.
        env.add_filter("mrkdwn", |s: String| {
            s.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        });
        for (name, source) in builtin() {
            let source = match &dir {
                Some(dir) if dir.join(name).is_file() => read_override(&dir.join(name))?,
                _ => source.to_string(),
            };
            env.add_template_owned(name.to_string(), source)
                .with_context(|| format!("template {name} does not parse"))?;
        }
        Ok(Self { env: Arc::new(env) })
    }

    pub fn render(&self, name: &str, ctx: impl Serialize) -> anyhow::Result<String> {
        let template = self
            .env
            .get_template(name)
            .with_context(|| format!("no template {name}"))?;
        template
            .render(ctx)
            .with_context(|| format!("template {name} failed to render"))
    }

    pub fn names(&self) -> Vec<&'static str> {
        builtin().map(|(n, _)| *n).collect()
    }
}

/// The most a template override may be: templates are a few KB.
const OVERRIDE_LIMIT: u64 = 256 * 1024;
/// The most entries an override directory may hold before it is refused:
/// there are a few dozen templates, and a directory named by mistake (`/`)
/// must not be walked whole.
const DIR_ENTRIES: usize = 1000;

/// An override, when it is a regular file of at most [`OVERRIDE_LIMIT`].
fn read_override(path: &Path) -> anyhow::Result<String> {
    let cannot = || format!("cannot read template {:?}", path.display().to_string());
    let meta = std::fs::metadata(path).with_context(cannot)?;
    if !meta.is_file() || meta.len() > OVERRIDE_LIMIT {
        anyhow::bail!(
            "template {:?} is not a regular file of at most {} KB",
            path.display().to_string(),
            OVERRIDE_LIMIT / 1024
        );
    }
    let mut text = String::new();
    std::io::Read::take(
        std::fs::File::open(path).with_context(cannot)?,
        OVERRIDE_LIMIT,
    )
    .read_to_string(&mut text)
    .with_context(cannot)?;
    Ok(text)
}

/// Fails when a file under `dir` is not the name of a built-in template, and
/// lists the names that are. Names starting with `.` are skipped: hidden files,
/// and the `..data` links Kubernetes puts in a mounted ConfigMap (whose
/// folders are links too, so links are followed). Template names are one
/// folder deep (`slack/wait.j2`), so nothing deeper is walked, and a
/// directory of more than [`DIR_ENTRIES`] entries is refused.
fn refuse_unknown(dir: &Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    let mut unknown = Vec::new();
    let mut seen = 0usize;
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, prefix)) = pending.pop() {
        let entries = std::fs::read_dir(&path)
            .with_context(|| format!("cannot read the templates directory {}", path.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| {
                format!("cannot read the templates directory {}", path.display())
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            seen += 1;
            if seen > DIR_ENTRIES {
                anyhow::bail!(
                    "[templates] dir {:?} holds more than {DIR_ENTRIES} entries: name a directory that holds only template overrides",
                    dir.display().to_string()
                );
            }
            let relative = format!("{prefix}{name}");
            let full = entry.path();
            if full.is_dir() && prefix.is_empty() {
                pending.push((full, format!("{relative}/")));
            } else if !builtin().any(|(n, _)| *n == relative) {
                unknown.push(relative);
            }
        }
    }
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort();
    let valid: Vec<&str> = builtin().map(|(n, _)| *n).collect();
    anyhow::bail!(
        "{} no template: {} ([templates] dir {:?}); the templates are: {}",
        if unknown.len() == 1 {
            "this file overrides"
        } else {
            "these files override"
        },
        unknown.join(", "),
        dir.display().to_string(),
        valid.join(", ")
    )
}
