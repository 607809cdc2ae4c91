//! Webhook signatures: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`.
//! Checked before anything reads the body. Several secrets may be configured
//! (comma-separated) so one can be rotated without dropping deliveries.

pub use crate::http::signature::SignatureError as VerifyError;
use crate::http::signature::{from_hex, hmac_sha256, same};

/// What GitHub's webhook sender is told, naming where the fix goes.
pub fn message(e: VerifyError) -> &'static str {
    match e {
        VerifyError::Missing => "missing X-Hub-Signature-256: set the webhook's secret in GitHub to GATEBOT_GITHUB_WEBHOOK_SECRET",
        VerifyError::Malformed | VerifyError::BadTimestamp | VerifyError::Stale(_) => {
            "X-Hub-Signature-256 must be sha256=<64 hex digits>"
        }
        VerifyError::Mismatch => "X-Hub-Signature-256 does not match: the webhook's secret in GitHub differs from GATEBOT_GITHUB_WEBHOOK_SECRET",
    }
}

/// The signature `header` carries, if it has GitHub's form: what can be
/// checked before the body is read.
pub fn signature(header: Option<&str>) -> Result<[u8; 32], VerifyError> {
    let header = header.ok_or(VerifyError::Missing)?.trim();
    let hex_sig = header
        .strip_prefix("sha256=")
        .ok_or(VerifyError::Malformed)?;
    from_hex(hex_sig)
}

/// Verifies `header` over `body` with any of the comma-separated `secrets`,
/// in constant time.
pub fn verify(secrets: &str, header: Option<&str>, body: &[u8]) -> Result<(), VerifyError> {
    let given = signature(header)?;
    let mut matched = false;
    for secret in secrets.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        // Every secret is tried, so the time taken does not say which one matched.
        matched |= same(&hmac_sha256(secret.as_bytes(), &[body]), &given);
    }
    if matched {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

/// The header value GitHub would send for `body` with `secret` (tests, tools).
pub fn sign(secret: &str, body: &[u8]) -> String {
    format!(
        "sha256={}",
        hex::encode(hmac_sha256(secret.as_bytes(), &[body]))
    )
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
