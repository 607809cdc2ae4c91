//! HMAC-SHA256 request signatures, as GitHub and Slack send them (each in its
//! own format), checked in constant time, with one error type for both.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Why a signed request was refused. Each channel words the message (it names
/// the channel's headers and settings); the metrics label is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureError {
    /// A signature or timestamp header is absent.
    Missing,
    /// The signature header is not in the sender's format.
    Malformed,
    /// The signed timestamp is not a Unix time.
    BadTimestamp,
    /// The signed timestamp is this many seconds away from now.
    Stale(i64),
    /// Well-formed, but no configured secret produced it.
    Mismatch,
}

impl SignatureError {
    /// The label of `gatebot_rejected_requests_total`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Missing => "missing_signature",
            Self::BadTimestamp | Self::Stale(_) => "stale_timestamp",
            Self::Malformed | Self::Mismatch => "bad_signature",
        }
    }
}

/// HMAC-SHA256 of the concatenated `parts` under `secret`.
pub fn hmac_sha256(secret: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Whether `given` is `expected`, taking the same time wherever they differ.
pub fn same(expected: &[u8; 32], given: &[u8; 32]) -> bool {
    expected.ct_eq(given).into()
}

/// 64 hex digits as 32 bytes; `Malformed` otherwise.
pub fn from_hex(hex_sig: &str) -> Result<[u8; 32], SignatureError> {
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(hex_sig, &mut bytes).map_err(|_| SignatureError::Malformed)?;
    Ok(bytes)
}
