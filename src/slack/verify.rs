//! Slack request signing: `v0=hex(hmac_sha256(secret, "v0:<ts>:<body>"))`.
//! https://api.slack.com/authentication/verifying-requests-from-slack

pub use crate::http::signature::SignatureError as VerifyError;
use crate::http::signature::{from_hex, hmac_sha256, same};

/// Slack's window: older (or newer) requests may be replays.
pub const MAX_SKEW_SECS: i64 = 5 * 60;

/// What Slack's sender is told, naming where the fix goes.
pub fn message(e: VerifyError) -> String {
    match e {
        VerifyError::Missing => {
            "missing X-Slack-Request-Timestamp or X-Slack-Signature header".into()
        }
        VerifyError::BadTimestamp => "X-Slack-Request-Timestamp is not a Unix time".into(),
        VerifyError::Stale(skew) => format!("X-Slack-Request-Timestamp is {skew} s away from now (more than 5 minutes): refusing a possible replay; check the server clock"),
        VerifyError::Malformed | VerifyError::Mismatch => {
            "X-Slack-Signature does not match: check GATEBOT_SLACK_SIGNING_SECRET".into()
        }
    }
}

fn mac(secret: &[u8], timestamp: &str, body: &[u8]) -> [u8; 32] {
    hmac_sha256(secret, &[b"v0:", timestamp.as_bytes(), b":", body])
}

/// The signature Slack would send for this timestamp and body.
pub fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    format!("v0={}", hex::encode(mac(secret, timestamp, body)))
}

/// Checks the timestamp window first (cheap), then the signature in constant
/// time. Returns the signed timestamp (Unix seconds).
pub fn verify(
    secret: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_secs: i64,
) -> Result<i64, VerifyError> {
    let (ts, given) = plausible(timestamp, signature, now_secs)?;
    let timestamp = timestamp.unwrap_or_default().trim();
    if same(&mac(secret, timestamp, body), &given) {
        Ok(ts)
    } else {
        Err(VerifyError::Mismatch)
    }
}

/// What can be checked before the body is read: both headers there, the
/// timestamp within the window, the signature of Slack's form. Returns the
/// timestamp and the signature's bytes.
pub fn plausible(
    timestamp: Option<&str>,
    signature: Option<&str>,
    now_secs: i64,
) -> Result<(i64, [u8; 32]), VerifyError> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err(VerifyError::Missing);
    };
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::BadTimestamp)?;
    let skew = now_secs.saturating_sub(ts);
    if skew.abs() > MAX_SKEW_SECS {
        return Err(VerifyError::Stale(skew));
    }
    // A signature in another format cannot match: the same answer as a wrong one.
    let given = signature
        .trim()
        .strip_prefix("v0=")
        .and_then(|hex_sig| from_hex(hex_sig).ok())
        .ok_or(VerifyError::Mismatch)?;
    Ok((ts, given))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    #[test]
    fn slack_documented_example_verifies() {
        assert_eq!(sign(SECRET, "1531420618", BODY.as_bytes()), SIG);
        assert_eq!(
            verify(
                SECRET,
                Some("1531420618"),
                Some(SIG),
                BODY.as_bytes(),
                1531420618 + 30
            ),
            Ok(1531420618)
        );
    }

    #[test]
    fn stale_forged_and_missing_are_refused() {
        let b = BODY.as_bytes();
        assert!(matches!(
            verify(SECRET, Some("1531420618"), Some(SIG), b, 1531420618 + 301),
            Err(VerifyError::Stale(301))
        ));
        assert!(matches!(
            verify(SECRET, Some("1531420618"), Some(SIG), b, 1531420618 - 301),
            Err(VerifyError::Stale(_))
        ));
        assert_eq!(
            verify(b"other", Some("1531420618"), Some(SIG), b, 1531420618),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(SECRET, Some("1531420618"), Some(SIG), b"x", 1531420618),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(SECRET, None, Some(SIG), b, 1531420618),
            Err(VerifyError::Missing)
        );
        assert_eq!(
            verify(SECRET, Some("soon"), Some(SIG), b, 1531420618),
            Err(VerifyError::BadTimestamp)
        );
    }
}
