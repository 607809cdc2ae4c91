//! Environments: the policy's ordered groups of clusters
//! (`[[environments]] name = "production" clusters = ["prod-eu", "prod-us"]
//! after = "staging" soak = "30m"`), what `/promote production` or
//! `/promote prod-eu` names, and the order a revision keeps between them.
//! No I/O.

use std::fmt::{self, Write as _};
use std::time::Duration;

use super::change::Millis;
use super::cluster::ClusterName;
use super::state::Rfc3339;

/// One environment: its clusters, the one it comes after and how long a
/// revision soaks there first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// A DNS label, as a cluster's (and never one of theirs).
    pub name: ClusterName,
    pub clusters: Vec<ClusterName>,
    pub after: Option<ClusterName>,
    pub soak: Duration,
}

/// What a command names: a whole environment, or one of its clusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Environment(ClusterName),
    Cluster(ClusterName),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Environment(name) | Self::Cluster(name) => f.write_str(name.as_str()),
        }
    }
}

/// The policy's environments, in their order; empty when it names none
/// (then a gate is one for every cluster, as before there were environments).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environments {
    list: Vec<Environment>,
    /// The cluster of a check that names none (`default_cluster`).
    default_cluster: Option<ClusterName>,
}

impl Environments {
    /// Checks that names are unique (environments and clusters alike), that
    /// each cluster is in one environment, that `after` names an environment
    /// listed before (so the order has no cycle), that a soak has an `after`,
    /// and that the default cluster is in an environment.
    pub fn new(
        list: Vec<Environment>,
        default_cluster: Option<ClusterName>,
    ) -> Result<Self, String> {
        let mut seen: Vec<&ClusterName> = Vec::new();
        for (n, env) in list.iter().enumerate() {
            if env.clusters.is_empty() {
                return Err(format!("environment `{}` names no cluster", env.name));
            }
            for name in std::iter::once(&env.name).chain(&env.clusters) {
                if seen.contains(&name) && !(name == &env.name && env.clusters.contains(name)) {
                    return Err(format!("`{name}` is named twice in [[environments]]"));
                }
                seen.push(name);
            }
            match &env.after {
                Some(after) if !list[..n].iter().any(|e| &e.name == after) => {
                    return Err(format!(
                        "environment `{}` comes after `{after}`, which is not an environment listed before it",
                        env.name
                    ))
                }
                None if !env.soak.is_zero() => {
                    return Err(format!(
                        "environment `{}` has a soak but no `after`: a soak is how long the environment before it runs a revision",
                        env.name
                    ))
                }
                _ => {}
            }
        }
        let envs = Self {
            list,
            default_cluster,
        };
        if let Some(c) = &envs.default_cluster {
            if envs.of_cluster(c).is_none() {
                return Err(format!("default_cluster `{c}` is in no environment"));
            }
        }
        Ok(envs)
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn all(&self) -> &[Environment] {
        &self.list
    }

    pub fn default_cluster(&self) -> Option<&ClusterName> {
        self.default_cluster.as_ref()
    }

    /// The environment `cluster` belongs to.
    pub fn of_cluster(&self, cluster: &ClusterName) -> Option<&Environment> {
        self.list.iter().find(|e| e.clusters.contains(cluster))
    }

    pub fn named(&self, name: &ClusterName) -> Option<&Environment> {
        self.list.iter().find(|e| &e.name == name)
    }

    /// What `word` names, if it names an environment or one of their
    /// clusters (an environment first, where the two share a name).
    pub fn target(&self, word: &str) -> Option<Target> {
        let name: ClusterName = word.parse().ok()?;
        if self.named(&name).is_some() {
            return Some(Target::Environment(name));
        }
        self.of_cluster(&name).map(|_| Target::Cluster(name))
    }

    /// What a word a person wrote names (`Production,`, full-width
    /// `ｐｒｏｄｕｃｔｉｏｎ` and `PRODUCTİON` as `production`): the one reading of a place, for
    /// placing a command's gates, for telling a reason from the place before
    /// it, and for break glass after it.
    pub fn target_of_word(&self, word: &str) -> Option<Target> {
        let folded = fold(word);
        let bare = folded.trim_matches(|c: char| !c.is_alphanumeric());
        self.target(bare)
    }

    /// The clusters a target stands for.
    pub fn clusters_of(&self, target: &Target) -> Vec<ClusterName> {
        match target {
            Target::Environment(name) => self
                .named(name)
                .map(|e| e.clusters.clone())
                .unwrap_or_default(),
            Target::Cluster(c) => vec![c.clone()],
        }
    }

    /// Every cluster, in the environments' order.
    pub fn clusters(&self) -> impl Iterator<Item = &ClusterName> {
        self.list.iter().flat_map(|e| e.clusters.iter())
    }
}

/// Where a revision stands on its way to one environment: when may it go?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Order {
    /// First in line, or the environment before it promoted this commit a
    /// soak ago.
    Free,
    /// Not yet: the closed answer's line.
    Waiting(String),
}

/// The commit of a passage whose revision's commit gatebot could not tell
/// (no `commit` metadata, no lookup): a cluster promoted something, and no
/// later environment may go on the strength of it.
pub const UNKNOWN_COMMIT: &str = "";

/// Whether `env` may go for `commit`: every cluster of the environment it
/// comes after must have promoted the same commit, the last of them at
/// least the soak ago. `promoted` says when a cluster promoted a commit
/// ([`UNKNOWN_COMMIT`]: a revision of a commit gatebot could not tell).
pub fn order(
    envs: &Environments,
    env: &Environment,
    commit: Option<&str>,
    promoted: impl Fn(&ClusterName, &str) -> Option<Millis>,
    now: Millis,
) -> Order {
    let Some(before) = env.after.as_ref().and_then(|a| envs.named(a)) else {
        return Order::Free;
    };
    let Some(commit) = commit.filter(|c| *c != UNKNOWN_COMMIT) else {
        return Order::Waiting(format!(
            "waiting: {} comes after {before}, and gatebot can't tell which commit this revision was built from: set `commit` in the canary's webhook metadata (or let gatebot look the revision up in the cluster)",
            env.name,
            before = before.name
        ));
    };
    let short = short_commit(commit);
    let mut last = 0;
    let mut missing = Vec::new();
    for cluster in &before.clusters {
        match promoted(cluster, commit) {
            Some(at) => last = last.max(at),
            None => missing.push(cluster),
        }
    }
    let untold: Vec<&str> = missing
        .iter()
        .filter(|c| promoted(c, UNKNOWN_COMMIT).is_some())
        .map(|c| c.as_str())
        .collect();
    if !untold.is_empty() {
        return Order::Waiting(format!(
            "waiting: can't tell which commit {before} promoted: set the canary's `commit` metadata in {} (or let gatebot look the revision up in the cluster), then promote {short} there; {} goes after it",
            untold.join(" and "),
            env.name,
            before = before.name,
        ));
    }
    let missing: Vec<&str> = missing.iter().map(|c| c.as_str()).collect();
    if !missing.is_empty() {
        let mut line = format!("waiting: {} has not promoted {short}", before.name);
        if before.clusters.len() > 1 {
            let _ = write!(line, " in {}", missing.join(" and "));
        }
        let _ = write!(line, "; {} goes after it", env.name);
        if !env.soak.is_zero() {
            let _ = write!(line, " (soak {})", Soak(env.soak));
        }
        return Order::Waiting(line);
    }
    let soak_ms = env.soak.as_millis() as Millis;
    let may_go = last.saturating_add(soak_ms);
    if now >= may_go {
        return Order::Free;
    }
    Order::Waiting(format!(
        "waiting: {} promoted {short} {} ago; {} may go at {} (soak {})",
        before.name,
        Elapsed(Duration::from_millis(now.saturating_sub(last).max(0) as u64)),
        env.name,
        Rfc3339(may_go),
        Soak(env.soak),
    ))
}

/// The first 7 characters, as GitHub shows a commit.
pub fn short_commit(commit: &str) -> &str {
    commit.get(..7).unwrap_or(commit)
}

/// Whether text is a commit as gatebot keeps one: 7 to 64 hex digits.
pub fn valid_commit(text: &str) -> bool {
    (7..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A soak as a policy gives it, to the second: `20 s`, `30 min`, `1h`,
/// `1h 5 min`, `2 min 30 s` (a soak under a minute is not "0 min").
struct Soak(Duration);

impl fmt::Display for Soak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.0.as_secs();
        let (h, m, s) = (total / 3600, total / 60 % 60, total % 60);
        let mut parts = Vec::with_capacity(3);
        if h > 0 {
            parts.push(format!("{h}h"));
        }
        if m > 0 {
            parts.push(format!("{m} min"));
        }
        if s > 0 || total == 0 {
            parts.push(format!("{s} s"));
        }
        f.write_str(&parts.join(" "))
    }
}

/// Time since something happened: seconds under a minute, else as [`Soak`]
/// without the seconds (`12 min ago`, not `12 min 3 s ago`).
struct Elapsed(Duration);

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs();
        let shown = if secs < 60 { secs } else { secs - secs % 60 };
        Soak(Duration::from_secs(shown)).fmt(f)
    }
}

/// A word as the policy's names are written: compatibility forms as their
/// plain letters (NFKD), accents and dots dropped (`İ` is `i`), any dash as
/// `-`, lower case. Names are ASCII, so nothing folds onto another name that
/// a person would not read as it.
fn fold(word: &str) -> String {
    use unicode_normalization::char::is_combining_mark;
    use unicode_normalization::UnicodeNormalization;
    let dash = |c: char| {
        matches!(
            c,
            '\u{2010}'..='\u{2015}' | '\u{2212}' | '\u{fe63}' | '\u{ff0d}'
        )
    };
    word.nfkd()
        .filter(|c| !is_combining_mark(*c))
        .map(|c| if dash(c) { '-' } else { c })
        .collect::<String>()
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> ClusterName {
        s.parse().unwrap()
    }

    fn env(n: &str, clusters: &[&str], after: Option<&str>, soak_min: u64) -> Environment {
        Environment {
            name: name(n),
            clusters: clusters.iter().map(|c| name(c)).collect(),
            after: after.map(name),
            soak: Duration::from_secs(soak_min * 60),
        }
    }

    fn path() -> Environments {
        Environments::new(
            vec![
                env("staging", &["staging-eu"], None, 0),
                env("production", &["prod-eu", "prod-us"], Some("staging"), 30),
            ],
            None,
        )
        .unwrap()
    }

    #[test]
    fn words_name_environments_then_clusters() {
        let envs = path();
        assert_eq!(
            envs.target("production"),
            Some(Target::Environment(name("production")))
        );
        assert_eq!(
            envs.target("prod-eu"),
            Some(Target::Cluster(name("prod-eu")))
        );
        assert_eq!(envs.target("please"), None);
        for written in [
            "Production,",
            "ｐｒｏｄｕｃｔｉｏｎ",
            "\"production\"",
            "PROD-EU:",
            "PRODUCTİON",
            "prod\u{2010}eu",
        ] {
            assert!(envs.target_of_word(written).is_some(), "{written}");
        }
        for written in ["prod\u{200b}-eu", "@", "because", "productions"] {
            assert_eq!(envs.target_of_word(written), None, "{written}");
        }
        assert_eq!(envs.target("<!here>"), None);
        assert_eq!(
            envs.clusters_of(&Target::Environment(name("production"))),
            vec![name("prod-eu"), name("prod-us")]
        );
    }

    #[test]
    fn the_order_is_checked_when_the_policy_is_read() {
        let twice = Environments::new(
            vec![
                env("staging", &["eu"], None, 0),
                env("production", &["eu"], Some("staging"), 0),
            ],
            None,
        );
        assert!(twice.unwrap_err().contains("`eu` is named twice"));
        let later = Environments::new(
            vec![
                env("production", &["prod-eu"], Some("staging"), 0),
                env("staging", &["staging-eu"], None, 0),
            ],
            None,
        );
        assert!(later
            .unwrap_err()
            .contains("not an environment listed before"));
        let soak = Environments::new(vec![env("staging", &["s"], None, 5)], None);
        assert!(soak.unwrap_err().contains("has a soak but no `after`"));
        let default = Environments::new(vec![env("staging", &["s"], None, 0)], Some(name("x")));
        assert!(default.unwrap_err().contains("default_cluster `x`"));
        // An environment of one cluster may share its name.
        assert!(Environments::new(vec![env("staging", &["staging"], None, 0)], None).is_ok());
    }

    #[test]
    fn a_soak_is_shown_to_the_second() {
        let table = [
            (0, "0 s"),
            (20, "20 s"),
            (60, "1 min"),
            (150, "2 min 30 s"),
            (30 * 60, "30 min"),
            (3600, "1h"),
            (3900, "1h 5 min"),
            (3620, "1h 20 s"),
        ];
        for (secs, shown) in table {
            assert_eq!(Soak(Duration::from_secs(secs)).to_string(), shown);
        }
        assert_eq!(Elapsed(Duration::from_secs(45)).to_string(), "45 s");
        assert_eq!(
            Elapsed(Duration::from_secs(12 * 60 + 3)).to_string(),
            "12 min"
        );

        // A policy's soak of 20 s, while production waits for it.
        let mut envs = vec![
            env("staging", &["staging-eu"], None, 0),
            env("production", &["prod-eu"], Some("staging"), 0),
        ];
        envs[1].soak = Duration::from_secs(20);
        let envs = Environments::new(envs, None).unwrap();
        let prod = envs.named(&name("production")).unwrap();
        let t0 = 1_800_000_000_000;
        let promoted = |c: &ClusterName, _: &str| (c.as_str() == "staging-eu").then_some(t0);
        let Order::Waiting(line) = order(&envs, prod, Some("85d557f"), promoted, t0 + 5_000) else {
            panic!()
        };
        assert!(line.contains("promoted 85d557f 5 s ago"), "{line}");
        assert!(line.ends_with("(soak 20 s)"), "{line}");
    }

    #[test]
    fn production_waits_for_stagings_commit_and_its_soak() {
        let envs = path();
        let prod = envs.named(&name("production")).unwrap();
        let staging = envs.named(&name("staging")).unwrap();
        let commit = "85d557f0a1b2c3d4e5f60718293a4b5c6d7e8f90";
        let t0 = 1_800_000_000_000;
        assert_eq!(order(&envs, staging, None, |_, _| None, t0), Order::Free);
        let Order::Waiting(none) = order(&envs, prod, Some(commit), |_, _| None, t0) else {
            panic!()
        };
        assert_eq!(
            none,
            "waiting: staging has not promoted 85d557f; production goes after it (soak 30 min)"
        );
        let promoted =
            |c: &ClusterName, at: &str| (c.as_str() == "staging-eu" && at == commit).then_some(t0);
        let Order::Waiting(soaking) = order(&envs, prod, Some(commit), promoted, t0 + 12 * 60_000)
        else {
            panic!()
        };
        assert_eq!(
            soaking,
            "waiting: staging promoted 85d557f 12 min ago; production may go at 2027-01-15T08:30:00Z (soak 30 min)"
        );
        assert_eq!(
            order(&envs, prod, Some(commit), promoted, t0 + 30 * 60_000),
            Order::Free
        );
        let Order::Waiting(unknown) = order(&envs, prod, None, promoted, t0) else {
            panic!()
        };
        assert!(unknown.contains("can't tell which commit"), "{unknown}");
        // Staging promoted a revision whose commit was not told: no commit
        // may go on the strength of it.
        let untold = |c: &ClusterName, at: &str| {
            (c.as_str() == "staging-eu" && at == UNKNOWN_COMMIT).then_some(t0)
        };
        let Order::Waiting(line) = order(&envs, prod, Some(commit), untold, t0 + 60 * 60_000)
        else {
            panic!()
        };
        assert_eq!(
            line,
            "waiting: can't tell which commit staging promoted: set the canary's `commit` metadata in staging-eu (or let gatebot look the revision up in the cluster), then promote 85d557f there; production goes after it"
        );
    }
}
