//! Settings that name tokens by their SHA-256, `name=<64 hex digits>,…`
//! (`GATEBOT_API_TOKENS`, `GATEBOT_FLAGGER_TOKENS`), so that the setting
//! itself holds no secret; and who holds a token, found in constant time.
//! An error never repeats what follows `=`: a token pasted in place of its
//! hash must not reach a log.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A token's SHA-256, as the settings hold it.
pub fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Names and the SHA-256 of each one's token, in the setting's order.
#[derive(Clone, Default)]
pub struct HashedTokens(Vec<(String, [u8; 32])>);

impl HashedTokens {
    /// Reads `name=<sha256 hex>,…`; `check_name` says what is wrong with a name.
    pub fn parse(s: &str, check_name: impl Fn(&str) -> Result<(), String>) -> Result<Self, String> {
        let mut tokens: Vec<(String, [u8; 32])> = Vec::new();
        let entries = s.split(',').map(str::trim).filter(|e| !e.is_empty());
        for (n, entry) in entries.enumerate() {
            let (name, hex) = entry
                .split_once('=')
                .ok_or_else(|| format!("entry {} is not name=<sha256 hex of the token>", n + 1))?;
            let name = name.trim();
            check_name(name).map_err(|e| format!("entry {}: {e}", n + 1))?;
            let mut hash = [0u8; 32];
            hex::decode_to_slice(hex.trim(), &mut hash).map_err(|_| {
                format!("`{name}`: the value must be the token's SHA-256 in 64 hex digits (`printf %s \"$TOKEN\" | sha256sum`), not the token")
            })?;
            if tokens.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                return Err(format!("`{name}` is named twice: one name, one token"));
            }
            if let Some((other, _)) = tokens.iter().find(|(_, h)| *h == hash) {
                return Err(format!(
                    "`{name}` and `{other}` have the same token: give each its own"
                ));
            }
            tokens.push((name.to_string(), hash));
        }
        Ok(Self(tokens))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each name with its token's SHA-256.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &[u8; 32])> {
        self.0.iter().map(|(name, hash)| (name.as_str(), hash))
    }

    /// Who holds `token`. Every entry is compared, in constant time, so the
    /// answer's time tells nothing of which one matched.
    pub fn holder(&self, token: &str) -> Option<&str> {
        let digest = sha256(token);
        let mut found = None;
        for (name, hash) in &self.0 {
            if bool::from(digest.ct_eq(hash)) && found.is_none() {
                found = Some(name.as_str());
            }
        }
        found
    }
}

/// Names only: the hashes are not secrets, but nobody needs them in a log.
impl std::fmt::Debug for HashedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(n, _)| n))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(_: &str) -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn a_token_names_its_holder_and_nothing_else_does() {
        let setting = format!(
            "prod-eu={}, staging={}",
            hex::encode(sha256("s3cret-eu")),
            hex::encode(sha256("s3cret-st"))
        );
        let tokens = HashedTokens::parse(&setting, any).unwrap();
        assert_eq!(tokens.holder("s3cret-eu"), Some("prod-eu"));
        assert_eq!(tokens.holder("s3cret-st"), Some("staging"));
        let hash = hex::encode(sha256("s3cret-eu"));
        for wrong in ["", "s3cret", "S3CRET-EU", hash.as_str()] {
            assert_eq!(tokens.holder(wrong), None, "{wrong}");
        }
        assert_eq!(format!("{tokens:?}"), r#"["prod-eu", "staging"]"#);
        assert!(HashedTokens::parse(" , ", any).unwrap().is_empty());
    }

    #[test]
    fn a_bad_setting_says_what_to_write_and_never_echoes_a_token() {
        let h = hex::encode(sha256("x"));
        let no_caps = |n: &str| {
            if n.chars().any(|c| c.is_ascii_uppercase()) {
                Err("lower case only".to_string())
            } else {
                Ok(())
            }
        };
        let table = [
            (
                "hunter2".to_string(),
                "entry 1 is not name=<sha256 hex of the token>",
            ),
            (
                "a=hunter2".to_string(),
                "64 hex digits (`printf %s \"$TOKEN\" | sha256sum`), not the token",
            ),
            (format!("Prod={h}"), "entry 1: lower case only"),
            (
                format!("a={h},a={}", hex::encode(sha256("y"))),
                "named twice",
            ),
            (format!("a={h},b={h}"), "`b` and `a` have the same token"),
        ];
        for (setting, says) in table {
            let err = HashedTokens::parse(&setting, no_caps).unwrap_err();
            assert!(err.contains(says), "{setting}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }
}
