//! Admission: the one place where what Flagger's side says may choose where
//! something goes.
//!
//! A gate check's checksum, phase and metadata, and a Flagger event's, come
//! from an unauthenticated caller: they are a [`Claim`] from the moment they
//! are parsed. A claim is data. It is stored and shown as what it is
//! ([`Claim::recorded`], [`Claim::shown`]), and it routes nothing: a
//! cluster's gate, a PR told of events, a Kubernetes read, a commit a passage
//! is written for each take an [`Admitted`] value, and only [`Admit`] makes
//! one, by configuration (the policy's environments, the default repository)
//! or by verification (a Flagger token, the Kubernetes lookup).
//!
//! The compiler keeps it so (the inner values are private to this module);
//! tests/layering.rs keeps the few readers of [`Claim::recorded`] to the
//! record-keepers it lists.

use std::collections::BTreeMap;
use std::fmt;

use super::{CheckInput, EngineSettings};
use crate::gate::environment::{valid_commit, Environments};
use crate::gate::state::one_line;
use crate::gate::{ClusterName, Scope, Verdict};

/// A value from Flagger's side, not yet admitted to route anything.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Claim<T>(T);

/// The metadata a Canary's webhook carries.
pub type Metadata = BTreeMap<String, String>;

impl<T> Claim<T> {
    /// Anyone may make a claim: holding one lets nothing happen.
    pub fn new(value: T) -> Self {
        Self(value)
    }

    /// The claim as data, to store and compare as the caller sent it. Never
    /// to choose a channel, an environment, a URL, a query or a read: those
    /// take an [`Admitted`] value. Its callers are listed in tests/layering.rs.
    pub(crate) fn recorded(&self) -> &T {
        &self.0
    }
}

impl Claim<String> {
    /// For a log line or a reply: on one line, and marked as claimed.
    pub fn shown(&self) -> String {
        format!("{:?}", one_line(&self.0))
    }
}

impl Claim<Metadata> {
    /// One metadata value, for a log line or a reply (see [`Claim::shown`]).
    pub fn shown(&self, key: &str) -> Option<String> {
        self.0.get(key).map(|v| format!("{:?}", one_line(v)))
    }
}

impl<T> fmt::Debug for Claim<T> {
    // A claim's text is the caller's: debug output never prints it raw.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Claim(…)")
    }
}

/// A value [`Admit`] decided may route a side effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted<T>(T);

impl<T> Admitted<T> {
    pub fn get(&self) -> &T {
        &self.0
    }

    pub fn into_inner(self) -> T {
        self.0
    }
}

/// Decides, by configuration or by verification, what a claim may route.
pub(crate) struct Admit<'a> {
    settings: &'a EngineSettings,
}

impl<'a> Admit<'a> {
    pub(super) fn new(settings: &'a EngineSettings) -> Self {
        Self { settings }
    }

    fn environments(&self) -> &Environments {
        &self.settings.environments
    }

    /// The cluster a check or an event is from: verified by its Flagger
    /// token, else claimed by its `cluster` metadata (placed only where the
    /// policy has that cluster, see [`Admit::placement`]), else the
    /// policy's default. A record of where it says it is, not a route.
    pub(super) fn cluster_named(&self, input: &CheckInput) -> Option<ClusterName> {
        input
            .cluster
            .clone()
            .or_else(|| input.metadata.0.get("cluster")?.parse().ok())
            .or_else(|| self.environments().default_cluster().cloned())
    }

    /// The cluster whose gate a check asks at, by configuration: one of the
    /// policy's environments. Any other is answered closed.
    pub(super) fn placement(&self, input: &CheckInput) -> Result<Admitted<ClusterName>, Verdict> {
        let envs = self.environments();
        let Some(cluster) = self.cluster_named(input) else {
            return Err(Verdict::closed(format!(
                "closed: which cluster is this? The policy has environments: give this cluster's Flagger its token, or set `cluster` in the canary's webhook metadata (one of {})",
                cluster_list(envs)
            )));
        };
        if envs.of_cluster(&cluster).is_none() {
            return Err(Verdict::closed(format!(
                "closed: cluster {cluster} is in no environment of the policy (one of {})",
                cluster_list(envs)
            )));
        }
        Ok(Admitted(cluster))
    }

    /// The commit the checked revision was built from: its `commit`
    /// metadata when it is a commit's name, else the commit the Kubernetes
    /// lookup found for its checksum (verified). Never the PR's head: a
    /// cluster may still run a revision of an earlier commit.
    pub(super) fn commit(input: &CheckInput) -> Option<Admitted<String>> {
        if let Some(c) = input.metadata.0.get("commit").filter(|c| valid_commit(c)) {
            return Some(Admitted(c.to_ascii_lowercase()));
        }
        input.found_commit.clone()
    }

    /// The commit the Kubernetes lookup found: verified by the cluster.
    pub(super) fn found_commit(commit: String) -> Admitted<String> {
        Admitted(commit)
    }

    /// The PR an event's metadata names (`pr: "42"`, optionally
    /// `repository: owner/name`; else the configured default repository),
    /// told of the canary's milestones.
    pub(super) fn event_pr(&self, metadata: &Claim<Metadata>) -> Option<Admitted<Scope>> {
        let metadata = &metadata.0;
        let number = metadata
            .get("pr")?
            .trim()
            .trim_start_matches('#')
            .parse()
            .ok()?;
        let repo = match metadata.get("repository").or_else(|| metadata.get("repo")) {
            Some(r) => r.parse().ok()?,
            None => self.settings.default_repo.clone()?,
        };
        Some(Admitted(Scope::Pr { repo, number }))
    }

    /// A claimed revision, admitted to be read from the cluster because the
    /// read verifies it: the Kubernetes lookup counts a target only if the
    /// cluster says so, within its own bounds.
    pub(super) fn to_verify(checksum: &Claim<String>) -> Admitted<&str> {
        Admitted(&checksum.0)
    }
}

pub(super) fn cluster_list(envs: &Environments) -> String {
    let names: Vec<&str> = envs.clusters().map(ClusterName::as_str).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_shown_on_one_line_and_never_debug_printed_raw() {
        let c = Claim::new("a\nb\u{7}".to_string());
        assert_eq!(c.shown(), "\"a b\\u{7}\"");
        assert_eq!(format!("{c:?}"), "Claim(…)");
    }
}
