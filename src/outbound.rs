//! The HTTP clients for outbound calls (GitHub, Slack, the CLI): one
//! `reqwest::Client` per service for the whole process, so connections and TLS
//! sessions are reused. rustls, trusting the OS roots (never bundled ones) and
//! the optional extra CA file; through the proxies that
//! `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` name.

use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context;

use crate::config::OutboundConfig;

/// How long connecting may take; each call is also bounded as a whole.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The settings every client of this process is built with; set once at
/// start, read from the environment when nothing set them.
static SETTINGS: OnceLock<OutboundConfig> = OnceLock::new();

/// Sets how this process's clients reach the outside, after checking that the
/// proxies parse and the extra CA file reads. The first call wins (a process
/// runs one configuration).
pub fn configure(config: &OutboundConfig) -> anyhow::Result<()> {
    builder(config).map(drop)?;
    let _ = SETTINGS.set(config.clone());
    Ok(())
}

fn settings() -> &'static OutboundConfig {
    SETTINGS.get_or_init(OutboundConfig::from_env)
}

/// A client builder with the proxies and roots of `config`, nothing else.
pub fn builder(config: &OutboundConfig) -> anyhow::Result<reqwest::ClientBuilder> {
    // The proxies are set explicitly, so what reqwest would read from the
    // environment on its own never differs from what check-config shows.
    let mut builder = reqwest::Client::builder().no_proxy();
    let no_proxy = config
        .no_proxy()
        .and_then(|list| reqwest::NoProxy::from_string(&list));
    if let Some(url) = config.https_proxy() {
        let proxy = reqwest::Proxy::https(&url)
            .context("HTTPS_PROXY is not a proxy URL (write http://host:port)")?;
        builder = builder.proxy(proxy.no_proxy(no_proxy.clone()));
    }
    if let Some(url) = config.http_proxy() {
        let proxy = reqwest::Proxy::http(&url)
            .context("HTTP_PROXY is not a proxy URL (write http://host:port)")?;
        builder = builder.proxy(proxy.no_proxy(no_proxy));
    }
    if let Some(path) = config.extra_ca_file() {
        for cert in extra_roots(path)? {
            builder = builder.add_root_certificate(cert);
        }
    }
    Ok(builder)
}

/// The certificates of a PEM bundle; a file without any is refused rather
/// than trusting nothing more in silence.
fn extra_roots(path: &std::path::Path) -> anyhow::Result<Vec<reqwest::Certificate>> {
    let what = || format!("GATEBOT_EXTRA_CA_FILE {}", path.display());
    let pem = std::fs::read(path).with_context(|| format!("cannot read {}", what()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .with_context(|| format!("{} is not a PEM bundle", what()))?;
    if certs.is_empty() {
        anyhow::bail!("{} holds no PEM certificate", what());
    }
    Ok(certs)
}

/// One line for check-config: the proxies without their credentials.
pub fn describe(config: &OutboundConfig) -> String {
    let shown = |url: Option<String>| {
        url.map_or_else(
            || "none".to_string(),
            |url| match reqwest::Url::parse(&url) {
                Ok(mut parsed) => {
                    // A proxy URL may carry user:password; never print them.
                    let _ = parsed.set_username("");
                    let _ = parsed.set_password(None);
                    parsed.to_string()
                }
                Err(_) => "(not a URL)".to_string(),
            },
        )
    };
    format!(
        "https proxy {}, http proxy {}, no proxy for {}; trusts the OS roots{}",
        shown(config.https_proxy()),
        shown(config.http_proxy()),
        config.no_proxy().unwrap_or_else(|| "-".to_string()),
        config
            .extra_ca_file()
            .map_or_else(String::new, |p| format!(" and {}", p.display()))
    )
}

/// A client for the CLI: `config`'s proxies and roots, `timeout` per call.
pub fn client(config: &OutboundConfig, timeout: Duration) -> anyhow::Result<reqwest::Client> {
    builder(config)?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(timeout)
        .build()
        .map_err(|e| anyhow::anyhow!("cannot set up the HTTP client: {e}"))
}

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
        let client = builder(settings())?
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

/// A transport error with its causes: reqwest's own message does not say
/// why ("error sending request"); the chain does (a certificate from an
/// unknown issuer, a refused proxy connection).
pub fn why(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(e) = cause {
        let part = e.to_string();
        // hyper and reqwest repeat their inner error's text; say it once.
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
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

/// The `Retry-After` a service answered, in seconds as every service gatebot
/// calls writes it; None without one. Callers hold it to their own bound.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}
