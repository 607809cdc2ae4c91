//! The HTTP clients for outbound calls (GitHub, Slack): one `reqwest::Client`
//! per service for the whole process, so connections and TLS sessions are
//! reused. rustls, trusting the OS roots as well as the bundled webpki ones.

use std::sync::OnceLock;
use std::time::Duration;

/// How long connecting may take; each call is also bounded as a whole.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A service's client, built on first use and shared after that.
pub struct Shared(OnceLock<reqwest::Client>);

impl Shared {
    pub const fn new() -> Self {
        Self(OnceLock::new())
    }

    /// The client, built once; `timeout` bounds each call from sending to the
    /// answer's last byte.
    pub fn get(&self, timeout: Duration) -> anyhow::Result<reqwest::Client> {
        if let Some(client) = self.0.get() {
            return Ok(client.clone());
        }
        let client = reqwest::Client::builder()
            .user_agent(concat!("gatebot/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(timeout)
            .build()
            .map_err(|e| anyhow::anyhow!("cannot set up the HTTP client: {e}"))?;
        Ok(self.0.get_or_init(|| client).clone())
    }
}

impl Default for Shared {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads a body of at most `limit` bytes, so a misbehaving server cannot make
/// gatebot buffer without bound.
pub async fn body(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if out.len() + chunk.len() > limit {
            return Err(format!("answer larger than {limit} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}
