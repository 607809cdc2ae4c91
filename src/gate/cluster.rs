//! Clusters: where a Flagger runs. A cluster is named by the Flagger token
//! its checks carry (`GATEBOT_FLAGGER_TOKENS`), so the name is the operator's
//! word, never the caller's.

use std::fmt;
use std::str::FromStr;

use super::tokens::HashedTokens;

/// A cluster's name: a DNS label (lower-case letters, digits and `-`, at
/// most 63), as Kubernetes names its contexts and namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct ClusterName(String);

/// Read back as written, and checked as when it was configured.
impl<'de> serde::Deserialize<'de> for ClusterName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl ClusterName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ClusterName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if super::label::valid_k8s_label(s) {
            return Ok(Self(s.to_string()));
        }
        Err(format!(
            "cluster name `{}`: write a DNS label (a-z, 0-9 and -, at most 63, e.g. prod-eu)",
            super::label::printable(s)
        ))
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The Flagger tokens a server takes: each cluster's name and the SHA-256
/// of its token (`GATEBOT_FLAGGER_TOKENS=prod-eu=<hex>,staging=<hex>`).
/// Empty: Flagger's side is open.
#[derive(Clone, Default)]
pub struct FlaggerTokens {
    tokens: HashedTokens,
    /// The same names, as cluster names.
    clusters: Vec<ClusterName>,
}

impl FlaggerTokens {
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn clusters(&self) -> impl Iterator<Item = &ClusterName> {
        self.clusters.iter()
    }

    /// The cluster `token` belongs to (compared in constant time).
    pub fn cluster_of(&self, token: &str) -> Option<&ClusterName> {
        let name = self.tokens.holder(token)?;
        self.clusters.iter().find(|c| c.as_str() == name)
    }
}

impl fmt::Debug for FlaggerTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.tokens.fmt(f)
    }
}

impl FromStr for FlaggerTokens {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let tokens = HashedTokens::parse(s, |name| name.parse::<ClusterName>().map(drop))?;
        let clusters = tokens
            .entries()
            .map(|(name, _)| name.parse())
            .collect::<Result<_, _>>()?;
        Ok(Self { tokens, clusters })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flagger_token_names_its_cluster() {
        let setting = format!(
            "prod-eu={}",
            hex::encode(super::super::tokens::sha256("t1"))
        );
        let tokens: FlaggerTokens = setting.parse().unwrap();
        assert_eq!(
            tokens.cluster_of("t1").map(ClusterName::as_str),
            Some("prod-eu")
        );
        assert!(tokens.cluster_of("t2").is_none());
        let bad = format!("Prod={}", hex::encode(super::super::tokens::sha256("t1")));
        let err = bad.parse::<FlaggerTokens>().unwrap_err();
        assert!(
            err.contains("entry 1: cluster name `Prod`: write a DNS label"),
            "{err}"
        );
    }

    #[test]
    fn names_are_dns_labels() {
        for good in ["prod-eu", "staging", "c1", &"a".repeat(63)] {
            assert_eq!(good.parse::<ClusterName>().unwrap().as_str(), good);
        }
        for bad in [
            "",
            "Prod",
            "-eu",
            "eu-",
            "prod_eu",
            "a b",
            "<!channel>",
            &"a".repeat(64),
        ] {
            assert!(bad.parse::<ClusterName>().is_err(), "{bad}");
        }
    }
}
