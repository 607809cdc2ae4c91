//! Message templates (minijinja). Built-in copies of `templates/` are compiled
//! in; a file of the same name under `GATEBOT_TEMPLATES_DIR` overrides one.

use std::path::PathBuf;
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
        "github/reminder.md.j2",
        include_str!("../templates/github/reminder.md.j2"),
    ),
    ("slack/wait.j2", include_str!("../templates/slack/wait.j2")),
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
                Some(dir) if dir.join(name).is_file() => std::fs::read_to_string(dir.join(name))
                    .with_context(|| {
                        format!("cannot read template {}", dir.join(name).display())
                    })?,
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
