//! Webhook signatures: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`.
//! Checked before anything reads the body. Several secrets may be configured
//! (comma-separated) so one can be rotated without dropping deliveries.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyError {
    /// No `X-Hub-Signature-256` header.
    Missing,
    /// Not `sha256=` followed by 64 hex digits (e.g. the old SHA-1 `sha1=` form).
    Malformed,
    /// Well-formed, but no configured secret produced it.
    Mismatch,
}

impl VerifyError {
    /// The label of `gatebot_rejected_requests_total`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Missing => "missing_signature",
            Self::Malformed | Self::Mismatch => "bad_signature",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Self::Missing => "missing X-Hub-Signature-256: set the webhook's secret in GitHub to GATEBOT_GITHUB_WEBHOOK_SECRET",
            Self::Malformed => "X-Hub-Signature-256 must be sha256=<64 hex digits>",
            Self::Mismatch => "X-Hub-Signature-256 does not match: the webhook's secret in GitHub differs from GATEBOT_GITHUB_WEBHOOK_SECRET",
        }
    }
}

/// Verifies `header` over `body` with any of the comma-separated `secrets`.
/// The comparison is constant-time (`verify_slice`).
pub fn verify(secrets: &str, header: Option<&str>, body: &[u8]) -> Result<(), VerifyError> {
    let header = header.ok_or(VerifyError::Missing)?.trim();
    let hex_sig = header
        .strip_prefix("sha256=")
        .ok_or(VerifyError::Malformed)?;
    let mut expected = [0u8; 32];
    hex::decode_to_slice(hex_sig, &mut expected).map_err(|_| VerifyError::Malformed)?;
    let mut matched = false;
    for secret in secrets.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Ok(mut mac) = HmacSha256::new_from_slice(secret.as_bytes()) else {
            continue;
        };
        mac.update(body);
        // Every secret is tried, so the time taken does not say which one matched.
        matched |= mac.verify_slice(&expected).is_ok();
    }
    if matched {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

/// The header value GitHub would send for `body` with `secret` (tests, tools).
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCS_SIG: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn githubs_documented_test_vector_verifies() {
        assert_eq!(
            verify(
                "It's a Secret to Everybody",
                Some(DOCS_SIG),
                b"Hello, World!"
            ),
            Ok(())
        );
        assert_eq!(
            sign("It's a Secret to Everybody", b"Hello, World!"),
            DOCS_SIG
        );
    }

    #[test]
    fn any_of_several_secrets_verifies() {
        let secrets = "old-secret, It's a Secret to Everybody";
        assert_eq!(verify(secrets, Some(DOCS_SIG), b"Hello, World!"), Ok(()));
        assert_eq!(
            verify("old-secret,,new", Some(DOCS_SIG), b"Hello, World!"),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn forged_missing_and_malformed_signatures_fail() {
        let s = "It's a Secret to Everybody";
        assert_eq!(
            verify(s, Some(DOCS_SIG), b"Hello, World?"),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(verify(s, None, b"x"), Err(VerifyError::Missing));
        let sha1 = DOCS_SIG.replace("sha256=", "sha1=");
        assert_eq!(verify(s, Some(&sha1), b"x"), Err(VerifyError::Malformed));
        assert_eq!(
            verify(s, Some("sha256=zz"), b"x"),
            Err(VerifyError::Malformed)
        );
        assert_eq!(
            verify(s, Some(&DOCS_SIG[..DOCS_SIG.len() - 2]), b"Hello, World!"),
            Err(VerifyError::Malformed)
        );
        assert_eq!(
            verify("", Some(DOCS_SIG), b"Hello, World!"),
            Err(VerifyError::Mismatch)
        );
    }
}
