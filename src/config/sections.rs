//! Tables of the policy file that set what were settings of their own:
//! `[loadtester]`, `[templates]`, `[kubernetes]` and `[ui]` (docs/policy.md,
//! "Settings in the policy file"). What differs per deployment (addresses,
//! secrets, channels on or off) stays in the environment; how gatebot runs
//! is written once, beside the rules.

use std::path::PathBuf;

use serde::Deserialize;

use super::Config;

/// `[loadtester]`: the loadtester's open door, kept for a drop-in migration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Loadtester {
    /// Anyone who reaches gatebot may call /gate/open, /gate/close,
    /// /rollback/open and /rollback/close, as the loadtester lets them.
    #[serde(default)]
    pub open_access: bool,
}

/// `[templates]`: where message templates that override the built-in ones are.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Templates {
    /// A directory (relative to the working directory, as GATEBOT_POLICY is).
    pub dir: PathBuf,
}

/// `[kubernetes]`: reading the cluster (docs/gitops.md) and the Secret the
/// GitHub App set-up writes into (docs/github.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kubernetes {
    /// Tie a canary's own gate to the pull request of its revision.
    #[serde(default)]
    pub lookup: bool,
    pub commit_annotation: Option<String>,
    pub repository_annotation: Option<String>,
    pub container: Option<String>,
    pub app_secret: Option<String>,
}

/// `[ui]`: the authenticating proxies whose X-Forwarded-User is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ui {
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
}

/// The tables above as one file holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sections {
    pub loadtester: Option<Loadtester>,
    pub templates: Option<Templates>,
    pub kubernetes: Option<Kubernetes>,
    pub ui: Option<Ui>,
}

impl Sections {
    /// Each value that is not a name Kubernetes takes, said with its key.
    pub fn problems(&self) -> Vec<String> {
        let Some(k) = &self.kubernetes else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, value) in [
            ("commit_annotation", &k.commit_annotation),
            ("repository_annotation", &k.repository_annotation),
        ] {
            if let Some(v) = value.as_deref().filter(|v| !annotation_key(v)) {
                out.push(format!(
                    "[kubernetes] {key} = {v:?} is not an annotation key (`example.com/name`)"
                ));
            }
        }
        if let Some(v) = k.container.as_deref().filter(|v| !dns_label(v)) {
            out.push(format!(
                "[kubernetes] container = {v:?} is not a container name"
            ));
        }
        if let Some(v) = k.app_secret.as_deref().filter(|v| !dns_subdomain(v)) {
            out.push(format!(
                "[kubernetes] app_secret = {v:?} is not a Secret's name (lower case letters, digits, `-` and `.`)"
            ));
        }
        out
    }

    /// Sets what the file names over what `config` holds (the built-in
    /// defaults, or what a test set).
    pub fn apply(&self, config: &mut Config) {
        if let Some(l) = &self.loadtester {
            config.loadtester_open_access = l.open_access;
        }
        if let Some(t) = &self.templates {
            config.templates_dir = Some(t.dir.clone());
        }
        if let Some(ui) = &self.ui {
            config.ui.trusted_proxies = ui.trusted_proxies.clone();
        }
        if let Some(k) = &self.kubernetes {
            let to = &mut config.kubernetes;
            to.lookup = k.lookup;
            if let Some(v) = &k.commit_annotation {
                to.commit_annotation = v.clone();
            }
            if let Some(v) = &k.repository_annotation {
                to.repository_annotation = v.clone();
            }
            to.container = k.container.clone();
            to.app_secret = k.app_secret.clone();
        }
    }
}

/// `[prefix/]name`: the prefix a DNS subdomain, the name 1 to 63 characters
/// of letters, digits, `-`, `_` and `.` that begin and end alphanumeric.
fn annotation_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    name_ok && prefix.is_none_or(dns_subdomain)
}

/// RFC 1123 subdomain, as Kubernetes names most objects.
fn dns_subdomain(name: &str) -> bool {
    (1..=253).contains(&name.len()) && name.split('.').all(dns_label)
}

/// RFC 1123 label: 1 to 63 lower case letters, digits and `-`, alphanumeric at both ends.
fn dns_label(label: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&label.len())
        && label.starts_with(alnum)
        && label.ends_with(alnum)
        && label.chars().all(|c| alnum(c) || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_kubernetes_refuses_are_refused() {
        assert!(annotation_key("gatebot.dev/commit"));
        assert!(annotation_key("commit"));
        for bad in [
            "",
            "/commit",
            "gatebot.dev/",
            "a/b/c",
            "Gatebot.dev/x",
            "x\0y",
            "-x",
        ] {
            assert!(!annotation_key(bad), "{bad:?}");
        }
        assert!(dns_subdomain("gatebot-github-app"));
        for bad in ["", "../../kube-system/x", "UPPER", "a..b", "-a"] {
            assert!(!dns_subdomain(bad), "{bad:?}");
        }
        let sections = Sections {
            kubernetes: Some(Kubernetes {
                commit_annotation: Some(String::new()),
                app_secret: Some("../../kube-system/x".into()),
                container: Some("App".into()),
                ..Kubernetes::default()
            }),
            ..Sections::default()
        };
        assert_eq!(sections.problems().len(), 3, "{:?}", sections.problems());
    }
}
