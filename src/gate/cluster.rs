//! Clusters: where a Flagger runs. A cluster is named by the Flagger token
//! its checks carry (`GATEBOT_FLAGGER_TOKENS`), so the name is the operator's
//! word, never the caller's.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A cluster's name: a DNS label (lower-case letters, digits and `-`, at
/// most 63), as Kubernetes names its contexts and namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct ClusterName(String);

impl ClusterName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ClusterName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if super::key::valid_k8s_label(s) {
            return Ok(Self(s.to_string()));
        }
        Err(format!(
            "cluster name `{}`: write a DNS label (a-z, 0-9 and -, at most 63, e.g. prod-eu)",
            super::key::printable(s)
        ))
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The Flagger tokens a server takes: each cluster's name and the SHA-256
/// of its token (`GATEBOT_FLAGGER_TOKENS=prod-eu=<hex>,staging=<hex>`), so
/// that the setting holds no secret. Empty: Flagger's side is open.
#[derive(Clone, Default)]
pub struct FlaggerTokens(Vec<(ClusterName, [u8; 32])>);

impl FlaggerTokens {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn clusters(&self) -> impl Iterator<Item = &ClusterName> {
        self.0.iter().map(|(name, _)| name)
    }

    /// The cluster `token` belongs to. Every entry is compared, in constant
    /// time, so the answer's time tells nothing of which one matched.
    pub fn cluster_of(&self, token: &str) -> Option<&ClusterName> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (name, hash) in &self.0 {
            if bool::from(digest.ct_eq(hash)) {
                found = Some(name);
            }
        }
        found
    }
}

/// Names the clusters only: the hashes are not secrets, but nobody needs them in a log.
impl fmt::Debug for FlaggerTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.clusters()).finish()
    }
}

impl FromStr for FlaggerTokens {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut tokens = Vec::new();
        for (n, pair) in s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .enumerate()
        {
            let at = n + 1;
            let (name, hex) = pair.split_once('=').ok_or_else(|| {
                format!("entry {at}: write <cluster>=<sha256 hex of its token>, e.g. prod-eu=$(printf %s \"$TOKEN\" | sha256sum | cut -d' ' -f1)")
            })?;
            let name: ClusterName = name
                .trim()
                .parse()
                .map_err(|e| format!("entry {at}: {e}"))?;
            let hash = hex::decode(hex.trim())
                .ok()
                .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
                .ok_or_else(|| format!("entry {at} ({name}): the token's SHA-256 is 64 hex digits, not the token itself"))?;
            if tokens.iter().any(|(n, _): &(ClusterName, _)| *n == name) {
                return Err(format!("entry {at}: cluster {name} is named twice"));
            }
            if tokens.iter().any(|(_, h)| *h == hash) {
                return Err(format!("entry {at} ({name}): the same token as another cluster: give each cluster its own"));
            }
            tokens.push((name, hash));
        }
        Ok(Self(tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha256(token: &str) -> String {
        hex::encode(Sha256::digest(token.as_bytes()))
    }

    #[test]
    fn a_token_names_its_cluster_and_nothing_else_does() {
        let setting = format!(
            "prod-eu={}, staging={}",
            sha256("s3cret-eu"),
            sha256("s3cret-st")
        );
        let tokens: FlaggerTokens = setting.parse().unwrap();
        assert_eq!(tokens.cluster_of("s3cret-eu").unwrap().as_str(), "prod-eu");
        assert_eq!(tokens.cluster_of("s3cret-st").unwrap().as_str(), "staging");
        for wrong in ["", "s3cret", "S3CRET-EU", &sha256("s3cret-eu")] {
            assert!(tokens.cluster_of(wrong).is_none(), "{wrong}");
        }
        assert_eq!(
            format!("{tokens:?}"),
            "[ClusterName(\"prod-eu\"), ClusterName(\"staging\")]"
        );
        assert!("".parse::<FlaggerTokens>().unwrap().is_empty());
    }

    #[test]
    fn a_bad_setting_says_what_to_write_and_never_echoes_a_token() {
        let h = sha256("x");
        let table = [
            ("prod-eu".to_string(), "write <cluster>="),
            (
                "prod-eu=hunter2".to_string(),
                "64 hex digits, not the token itself",
            ),
            (format!("Prod={h}"), "DNS label"),
            (format!("a={h},a={}", sha256("y")), "named twice"),
            (format!("a={h},b={h}"), "its own"),
        ];
        for (setting, says) in table {
            let err = setting.parse::<FlaggerTokens>().unwrap_err();
            assert!(err.contains(says), "{setting}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
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
