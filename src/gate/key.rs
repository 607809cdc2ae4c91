//! Gate keys: what a gate URL names. Parsing and printing only, no I/O.

use std::fmt;
use std::str::FromStr;

use super::cluster::ClusterName;
pub(crate) use super::label::{printable, valid_k8s_label};

use serde::{Deserialize, Serialize};

/// Which Flagger hook a gate answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateKind {
    /// `confirm-rollout`
    Start,
    /// `confirm-promotion`
    Promote,
    /// `confirm-traffic-increase`
    Traffic,
    /// `rollback`: 200 means "roll back now".
    Rollback,
    /// The loadtester's `/gate/check`: one key per canary, never pinned.
    LegacyGate,
    /// The loadtester's `/rollback/check`.
    LegacyRollback,
}

impl GateKind {
    /// The kinds that `/gates/{kind}/…` accepts.
    pub const ROUTABLE: [GateKind; 4] = [Self::Start, Self::Promote, Self::Traffic, Self::Rollback];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Promote => "promote",
            Self::Traffic => "traffic",
            Self::Rollback => "rollback",
            Self::LegacyGate => "gate",
            Self::LegacyRollback => "rollback-legacy",
        }
    }

    /// Parses the `{kind}` segment of `/gates/{kind}/…`.
    pub fn from_route(s: &str) -> Option<Self> {
        Self::ROUTABLE
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
    }

    /// Approvals of pinned kinds hold for one revision per canary and expire;
    /// the loadtester's gates keep its semantics (open until closed).
    pub fn pinned(self) -> bool {
        !self.is_legacy()
    }

    pub fn is_legacy(self) -> bool {
        matches!(self, Self::LegacyGate | Self::LegacyRollback)
    }

    pub fn is_rollback(self) -> bool {
        matches!(self, Self::Rollback | Self::LegacyRollback)
    }

    /// A closed rollback gate is the normal, safe state, not something anyone waits for.
    pub fn has_waits(self) -> bool {
        !self.is_rollback()
    }

    /// The PR comment that opens this gate.
    pub fn command(self) -> &'static str {
        match self {
            Self::Start => "/start",
            Self::Promote | Self::LegacyGate => "/promote",
            Self::Traffic => "/traffic",
            Self::Rollback | Self::LegacyRollback => "/rollback",
        }
    }

    /// The Flagger webhook type this gate is meant for.
    pub fn flagger_hook(self) -> &'static str {
        match self {
            Self::Start => "confirm-rollout",
            Self::Promote => "confirm-promotion",
            Self::Traffic => "confirm-traffic-increase",
            Self::Rollback | Self::LegacyRollback => "rollback",
            Self::LegacyGate => "confirm-*",
        }
    }
}

impl fmt::Display for GateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `owner/name` of a GitHub repository.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoName {
    owner: String,
    name: String,
}

impl RepoName {
    pub fn new(owner: &str, name: &str) -> Result<Self, KeyError> {
        if !valid_segment(owner) || !valid_segment(name) {
            return Err(KeyError::BadRepository(format!("{owner}/{name}")));
        }
        Ok(Self {
            owner: owner.to_ascii_lowercase(),
            name: name.to_ascii_lowercase(),
        })
    }
    pub fn owner(&self) -> &str {
        &self.owner
    }
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl FromStr for RepoName {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        match s.split_once('/') {
            Some((owner, name)) => Self::new(owner, name),
            None => Err(KeyError::BadRepository(s.to_string())),
        }
    }
}

impl fmt::Display for RepoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

impl Serialize for RepoName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RepoName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A pull request number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PrNumber(pub u64);

impl fmt::Display for PrNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for PrNumber {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        match s.parse::<u64>() {
            Ok(n) if n > 0 && !s.starts_with('+') && !s.starts_with('0') => Ok(Self(n)),
            _ => Err(KeyError::BadPr(s.to_string())),
        }
    }
}

/// A Flagger Canary: `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CanaryRef {
    pub namespace: String,
    pub name: String,
}

impl CanaryRef {
    pub fn new(namespace: &str, name: &str) -> Result<Self, KeyError> {
        if !valid_k8s_name(namespace) || !valid_k8s_name(name) {
            return Err(KeyError::BadCanary(format!("{namespace}/{name}")));
        }
        Ok(Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    /// Whether `text` is this canary as `namespace/name`, without building that.
    pub fn is(&self, text: &str) -> bool {
        text.split_once('/')
            .is_some_and(|(ns, name)| ns == self.namespace && name == self.name)
    }
}

impl fmt::Display for CanaryRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Kubernetes namespace: an RFC 1123 label, as Kubernetes validates it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(String);

impl Namespace {
    pub fn new(s: &str) -> Result<Self, KeyError> {
        if !valid_k8s_label(s) {
            return Err(KeyError::BadNamespace(printable(s)));
        }
        Ok(Self(s.to_string()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The name of a gate that a pipeline created (`POST /api/v1/gates`):
/// 1 to 100 ASCII letters, digits, `-`, `_` and `.`, starting with a letter
/// or digit, never `..`. Matched exactly, case included.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GateName(String);

impl GateName {
    pub const MAX_LEN: usize = 100;

    pub fn new(s: &str) -> Result<Self, KeyError> {
        let ok = !s.is_empty()
            && s.len() <= Self::MAX_LEN
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && !s.contains("..")
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !ok {
            return Err(KeyError::BadName(printable(s)));
        }
        Ok(Self(s.to_string()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GateName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `namespace/name`, as rows and notices store it.
impl FromStr for CanaryRef {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        match s.split_once('/') {
            Some((namespace, name)) => Self::new(namespace, name),
            None => Err(KeyError::BadCanary(s.to_string())),
        }
    }
}

/// What a gate belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    Pr {
        repo: RepoName,
        number: PrNumber,
    },
    Canary(CanaryRef),
    /// Every canary of a namespace; pinned per canary.
    Namespace(Namespace),
    /// A gate a pipeline created by name.
    Named(GateName),
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Pr { repo, number } => write!(f, "{repo}/pr/{number}"),
            Scope::Canary(c) => write!(f, "canary/{}/{}", c.namespace, c.name),
            Scope::Namespace(ns) => write!(f, "{ns}"),
            Scope::Named(name) => write!(f, "named/{name}"),
        }
    }
}

/// A gate: a kind plus a scope. Written as its URL path, which is also its
/// storage key: `/gates/promote/acme/shop/pr/42`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GateKey {
    pub kind: GateKind,
    pub scope: Scope,
    /// With `[[environments]]`, each cluster's gate is its own: written
    /// after the scope, `/gates/promote/acme/shop/pr/42@prod-eu`.
    pub cluster: Option<ClusterName>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("unknown gate kind `{0}`: use start, promote, traffic or rollback")]
    UnknownKind(String),
    #[error("`{0}` is not a gate: write /gates/<kind>/pr/<n>, /gates/<kind>/<owner>/<repo>/pr/<n>, /gates/<kind>/canary/<namespace>/<name>, /gates/<kind>/<namespace> or /gates/<kind>/named/<name>")]
    BadPath(String),
    #[error("`{0}` is not a Kubernetes namespace: up to 63 lowercase letters, digits and `-`, starting and ending with a letter or digit")]
    BadNamespace(String),
    #[error("`{0}` is not a gate name: 1 to 100 ASCII letters, digits, `-`, `_` and `.`, starting with a letter or digit, without `..`")]
    BadName(String),
    #[error("`{0}` is not a repository: write owner/name")]
    BadRepository(String),
    #[error("`{0}` is not a pull request number")]
    BadPr(String),
    #[error("`{0}` is not a canary: write namespace/name")]
    BadCanary(String),
    #[error("short gate keys like pr/{0} need GATEBOT_GITHUB_REPOSITORY (owner/repo); or write <owner>/<repo>/pr/{0}")]
    NoDefaultRepository(u64),
}

impl GateKey {
    pub fn new(kind: GateKind, scope: Scope) -> Self {
        Self {
            kind,
            scope,
            cluster: None,
        }
    }

    /// The same gate in `cluster`.
    pub fn at(mut self, cluster: Option<ClusterName>) -> Self {
        self.cluster = cluster;
        self
    }

    /// The gate of another kind with the same scope, in the same cluster.
    pub fn sibling(&self, kind: GateKind) -> Self {
        Self::new(kind, self.scope.clone()).at(self.cluster.clone())
    }

    pub fn pr(&self) -> Option<(&RepoName, PrNumber)> {
        match &self.scope {
            Scope::Pr { repo, number } => Some((repo, *number)),
            _ => None,
        }
    }

    /// Parses the scope segments that follow `/gates/{kind}/`.
    pub fn from_scope_segments(
        kind: GateKind,
        segments: &[&str],
        default_repo: Option<&RepoName>,
    ) -> Result<Self, KeyError> {
        let scope = match segments {
            ["pr", n] => {
                let number: PrNumber = n.parse()?;
                let repo = default_repo.ok_or(KeyError::NoDefaultRepository(number.0))?;
                Scope::Pr {
                    repo: repo.clone(),
                    number,
                }
            }
            [owner, repo, "pr", n] => Scope::Pr {
                repo: RepoName::new(owner, repo)?,
                number: n.parse()?,
            },
            ["canary", ns, name] => Scope::Canary(CanaryRef::new(ns, name)?),
            ["named", name] => Scope::Named(GateName::new(name)?),
            // One segment names a namespace; every other form has two or more.
            [ns] => Scope::Namespace(Namespace::new(ns)?),
            _ => return Err(KeyError::BadPath(printable(&segments.join("/")))),
        };
        Ok(Self::new(kind, scope))
    }

    /// Parses a key as operators write it: `/gates/promote/pr/42`, `promote/pr/42`,
    /// `/gates/start/acme/shop/pr/7`, `/gates/traffic/canary/test/podinfo`, or a
    /// loadtester gate `/loadtester/gate/test/podinfo`, `/loadtester/rollback/test/podinfo`.
    pub fn parse(text: &str, default_repo: Option<&RepoName>) -> Result<Self, KeyError> {
        let trimmed = text.trim().trim_matches('/');
        // No scope segment may hold `@`, so the last one starts a cluster.
        if let Some((rest, cluster)) = trimmed.rsplit_once('@') {
            let cluster = cluster
                .parse()
                .map_err(|_| KeyError::BadPath(printable(text)))?;
            if rest.contains('@') {
                return Err(KeyError::BadPath(printable(text)));
            }
            return Ok(Self::parse(rest, default_repo)?.at(Some(cluster)));
        }
        let segments: Vec<&str> = trimmed.split('/').collect();
        if segments.first() == Some(&"loadtester") {
            let kind = match segments.get(1) {
                Some(&"gate") => GateKind::LegacyGate,
                Some(&"rollback") => GateKind::LegacyRollback,
                _ => return Err(KeyError::BadPath(text.to_string())),
            };
            return match &segments[2..] {
                [ns, name] => Ok(Self::new(kind, Scope::Canary(CanaryRef::new(ns, name)?))),
                _ => Err(KeyError::BadPath(text.to_string())),
            };
        }
        let rest = match segments.first() {
            Some(&"gates") => &segments[1..],
            _ => &segments[..],
        };
        let Some((kind, scope)) = rest.split_first() else {
            return Err(KeyError::BadPath(text.to_string()));
        };
        let kind =
            GateKind::from_route(kind).ok_or_else(|| KeyError::UnknownKind(kind.to_string()))?;
        Self::from_scope_segments(kind, scope, default_repo)
    }

    /// How a person names the thing this gate belongs to: `acme/shop#42`.
    pub fn subject(&self) -> String {
        match &self.scope {
            Scope::Pr { repo, number } => format!("{repo}#{number}"),
            Scope::Canary(c) => format!("canary {c}"),
            Scope::Namespace(ns) => format!("namespace {ns}"),
            Scope::Named(name) => format!("gate {name}"),
        }
    }

    /// Whether `canary` may ask at this gate: a namespace gate answers only
    /// the canaries of its namespace.
    pub fn admits(&self, canary: &CanaryRef) -> bool {
        match &self.scope {
            Scope::Namespace(ns) => canary.namespace == ns.0,
            _ => true,
        }
    }
}

impl fmt::Display for GateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind, &self.scope) {
            (GateKind::LegacyGate, Scope::Canary(c)) => write!(f, "/loadtester/gate/{c}")?,
            (GateKind::LegacyRollback, Scope::Canary(c)) => write!(f, "/loadtester/rollback/{c}")?,
            (kind, scope) => write!(f, "/gates/{kind}/{scope}")?,
        }
        match &self.cluster {
            Some(cluster) => write!(f, "@{cluster}"),
            None => Ok(()),
        }
    }
}

impl Serialize for GateKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Stored keys are written whole (`Display`), so they read back without a default repository.
impl<'de> Deserialize<'de> for GateKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s, None).map_err(serde::de::Error::custom)
    }
}

/// GitHub logins and repository names: letters, digits, `-`, `_`, `.`.
pub(crate) fn valid_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Kubernetes names (RFC 1123 subdomain, loosely).
fn valid_k8s_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'))
}

/// GitHub logins: letters, digits and hyphens (and nothing a cookie or a
/// page would need to escape).
pub fn is_login(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> RepoName {
        "acme/shop".parse().unwrap()
    }

    #[test]
    fn short_and_long_pr_forms_name_one_gate() {
        let short = GateKey::parse("/gates/promote/pr/42", Some(&repo())).unwrap();
        let long = GateKey::parse("/gates/promote/acme/shop/pr/42", None).unwrap();
        assert_eq!(short, long);
        assert_eq!(short.to_string(), "/gates/promote/acme/shop/pr/42");
    }

    #[test]
    fn leading_gates_is_optional() {
        let a = GateKey::parse("promote/acme/shop/pr/42", None).unwrap();
        let b = GateKey::parse("/gates/promote/acme/shop/pr/42/", None).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn repository_names_are_case_insensitive() {
        let a = GateKey::parse("/gates/start/Acme/Shop/pr/1", None).unwrap();
        assert_eq!(a.to_string(), "/gates/start/acme/shop/pr/1");
    }

    #[test]
    fn short_form_without_default_repository_says_what_to_set() {
        let err = GateKey::parse("/gates/promote/pr/42", None).unwrap_err();
        assert_eq!(err, KeyError::NoDefaultRepository(42));
        assert!(err.to_string().contains("GATEBOT_GITHUB_REPOSITORY"));
    }

    #[test]
    fn canary_scope_round_trips() {
        let k = GateKey::parse("/gates/traffic/canary/test/podinfo", None).unwrap();
        assert_eq!(
            k.scope,
            Scope::Canary(CanaryRef::new("test", "podinfo").unwrap())
        );
        assert_eq!(GateKey::parse(&k.to_string(), None).unwrap(), k);
    }

    #[test]
    fn legacy_keys_round_trip() {
        for text in [
            "/loadtester/gate/test/podinfo",
            "/loadtester/rollback/test/podinfo",
        ] {
            let k = GateKey::parse(text, None).unwrap();
            assert!(k.kind.is_legacy());
            assert_eq!(k.to_string(), text);
        }
    }

    #[test]
    fn bad_keys_are_refused() {
        for text in [
            "",
            "/gates",
            "/gates/deploy/pr/1",
            "/gates/promote/pr/0",
            "/gates/promote/pr/-1",
            "/gates/promote/pr/01",
            "/gates/promote/pr/abc",
            "/gates/promote/a/b/c/pr/1",
            "/gates/promote/../x/pr/1",
            "/gates/promote/canary/Test/x",
            "/gates/promote/canary/a",
            "/loadtester/gate/a",
            "/loadtester/check/a/b",
        ] {
            assert!(GateKey::parse(text, Some(&repo())).is_err(), "{text}");
        }
    }

    #[test]
    fn one_segment_names_a_namespace() {
        let k = GateKey::parse("/gates/start/test", Some(&repo())).unwrap();
        assert_eq!(k.scope, Scope::Namespace(Namespace::new("test").unwrap()));
        assert_eq!(k.to_string(), "/gates/start/test");
        assert_eq!(k.subject(), "namespace test");
        assert!(k.admits(&CanaryRef::new("test", "podinfo").unwrap()));
        assert!(!k.admits(&CanaryRef::new("prod", "podinfo").unwrap()));
        assert_eq!(GateKey::parse(&k.to_string(), None).unwrap(), k);
    }

    #[test]
    fn named_gates_round_trip() {
        let k = GateKey::parse("/gates/promote/named/release-2026-12-01", None).unwrap();
        assert_eq!(
            k.scope,
            Scope::Named(GateName::new("release-2026-12-01").unwrap())
        );
        assert_eq!(k.to_string(), "/gates/promote/named/release-2026-12-01");
        assert_eq!(GateKey::parse(&k.to_string(), None).unwrap(), k);
    }

    #[test]
    fn bad_namespaces_and_names_are_refused_with_what_is_allowed() {
        let long = "a".repeat(64);
        for ns in ["", "Test", "-a", "a-", "a.b", "a_b", "é", long.as_str()] {
            assert!(Namespace::new(ns).is_err(), "{ns:?}");
        }
        let long = "a".repeat(101);
        for name in [
            "",
            "a/b",
            "..",
            "a..b",
            ".a",
            "-a",
            "naïve",
            "a b",
            long.as_str(),
        ] {
            let err = GateName::new(name).unwrap_err();
            assert!(err.to_string().contains("1 to 100"), "{name:?}: {err}");
        }
        assert!(GateName::new(&"a".repeat(100)).is_ok());
        assert!(GateName::new("Release_1.2").is_ok());
        assert!(GateKey::parse("/gates/promote/named/a/b", None).is_err());
        assert!(GateKey::parse("/gates/promote/named/..", None).is_err());
        let shown = GateName::new(&"\u{202e}".repeat(200))
            .unwrap_err()
            .to_string();
        assert!(
            shown.len() < 1000,
            "echoed input is bounded: {}",
            shown.len()
        );
    }

    #[test]
    fn rollback_gate_of_a_canary_is_not_the_loadtester_one() {
        let k = GateKey::parse("rollback/canary/test/podinfo", None).unwrap();
        assert_eq!(k.kind, GateKind::Rollback);
    }

    #[test]
    fn kinds_route_by_name() {
        for k in GateKind::ROUTABLE {
            assert_eq!(GateKind::from_route(k.as_str()), Some(k));
        }
        assert_eq!(GateKind::from_route("gate"), None);
    }
}
