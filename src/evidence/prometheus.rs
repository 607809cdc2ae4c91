//! The Prometheus HTTP API as Flagger reads it: `GET /api/v1/query`, the
//! first sample's value of a vector, `NaN` or no sample as "no values".
//! Bearer token (a file read at each call, as projected tokens rotate) or
//! basic auth; the process's proxies and extra CA (`outbound`).

use std::time::{Duration, Instant};

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use crate::config::PrometheusConfig;
use crate::metrics::OutboundCalls;
use crate::outbound;

/// The largest answer read: one canary's vector is a few hundred bytes.
const BODY_LIMIT: usize = 256 * 1024;

static HTTP: outbound::Shared = outbound::Shared::new();

/// Why there is no number; its `reason` labels the count and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unavailable {
    Timeout,
    Unreachable,
    /// Prometheus answered with an error (its `errorType`, or the status).
    Refused(String),
    /// An empty vector or `NaN`: nothing to compare yet.
    NoData,
    /// Not the answer the API documents (a matrix, unreadable JSON).
    BadAnswer,
    /// The canary's names or interval would not make a safe query.
    BadQuery,
}

impl Unavailable {
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Unreachable => "unreachable",
            Self::Refused(_) => "error",
            Self::NoData => "no_data",
            Self::BadAnswer => "bad_answer",
            Self::BadQuery => "bad_query",
        }
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => f.write_str("Prometheus did not answer in time"),
            Self::Unreachable => f.write_str("Prometheus is unreachable"),
            Self::Refused(what) => write!(f, "Prometheus answered {what}"),
            Self::NoData => f.write_str("no samples yet"),
            Self::BadAnswer => f.write_str("Prometheus's answer did not read"),
            Self::BadQuery => f.write_str("the canary's names do not make a safe query"),
        }
    }
}

enum Auth {
    None,
    BearerFile(std::path::PathBuf),
    Basic(String, SecretString),
}

pub(crate) struct Prometheus {
    http: reqwest::Client,
    base: String,
    auth: Auth,
    timeout: Duration,
    calls: OutboundCalls,
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    /// A `Data` on success; Prometheus's errors may put anything here.
    #[serde(default)]
    data: Option<serde_json::Value>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(default)]
    result: Vec<Sample>,
}

#[derive(Deserialize)]
struct Sample {
    #[serde(default)]
    value: Option<(serde_json::Value, serde_json::Value)>,
    #[serde(default)]
    values: Option<serde_json::Value>,
}

/// One point of a range query: seconds since the epoch, and the value.
pub(crate) type Point = (f64, f64);

impl Prometheus {
    /// None when GATEBOT_PROMETHEUS_URL is unset.
    pub(crate) fn from_config(
        config: &PrometheusConfig,
        timeout: Duration,
        calls: OutboundCalls,
    ) -> anyhow::Result<Option<Self>> {
        let Some(base) = config.base() else {
            return Ok(None);
        };
        let auth = match (config.bearer_token_file(), config.basic_auth()) {
            (Some(file), _) => Auth::BearerFile(file.to_path_buf()),
            (None, Some((user, password))) => Auth::Basic(user, password.clone()),
            (None, None) => Auth::None,
        };
        Ok(Some(Self {
            http: HTTP.get(timeout)?,
            base,
            auth,
            timeout,
            calls,
        }))
    }

    /// The value of an instant query, as Flagger reads it.
    pub(crate) async fn instant(&self, query: &str) -> Result<f64, Unavailable> {
        let started = Instant::now();
        let result = self.ask(query).await;
        self.calls
            .observe("query", label_of(&result), started.elapsed());
        result
    }

    /// The points of a range query's first series (`NaN` points left out).
    pub(crate) async fn range(
        &self,
        query: &str,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Vec<Point>, Unavailable> {
        let started = Instant::now();
        let params = [
            ("query", query.to_string()),
            ("start", start.to_string()),
            ("end", end.to_string()),
            ("step", step.to_string()),
        ];
        let result = match self.get("query_range", &params).await {
            Ok((status, body)) => read_range(status, &body),
            Err(e) => Err(e),
        };
        self.calls
            .observe("query_range", label_of(&result), started.elapsed());
        result
    }

    async fn ask(&self, query: &str) -> Result<f64, Unavailable> {
        let (status, body) = self.get("query", &[("query", query.to_string())]).await?;
        read_answer(status, &body)
    }

    /// `GET /api/v1/<path>`: the status and body, within the timeout.
    async fn get(
        &self,
        path: &str,
        params: &[(&str, String)],
    ) -> Result<(u16, Vec<u8>), Unavailable> {
        let mut request = self
            .http
            .get(format!("{}/api/v1/{path}", self.base))
            .query(params);
        request = match &self.auth {
            Auth::None => request,
            Auth::BearerFile(file) => {
                let token = std::fs::read_to_string(file).map_err(|_| {
                    Unavailable::Refused("nothing: the bearer token file does not read".into())
                })?;
                request.bearer_auth(token.trim())
            }
            Auth::Basic(user, password) => request.basic_auth(user, Some(password.expose_secret())),
        };
        let answered = tokio::time::timeout(self.timeout, async {
            let response = request.send().await.map_err(|e| {
                if e.is_timeout() {
                    Unavailable::Timeout
                } else {
                    Unavailable::Unreachable
                }
            })?;
            let status = response.status().as_u16();
            let body = outbound::body(response, BODY_LIMIT)
                .await
                .map_err(|_| Unavailable::BadAnswer)?;
            Ok::<_, Unavailable>((status, body))
        })
        .await
        .map_err(|_| Unavailable::Timeout)?;
        answered
    }
}

/// The `result` label of a call in `gatebot_outbound_requests_total`.
fn label_of<T>(result: &Result<T, Unavailable>) -> &'static str {
    match result {
        Ok(_) | Err(Unavailable::NoData) => "ok",
        Err(Unavailable::Timeout) => "timeout",
        Err(Unavailable::Unreachable) => "transport",
        Err(_) => "error",
    }
}

/// Reads a range query's answer: the first series of a matrix.
pub(crate) fn read_range(status: u16, body: &[u8]) -> Result<Vec<Point>, Unavailable> {
    let data = data_of(status, body)?;
    let Some(first) = data.result.into_iter().next() else {
        return Err(Unavailable::NoData);
    };
    let values: Vec<(serde_json::Value, String)> = first
        .values
        .map(serde_json::from_value)
        .transpose()
        .map_err(|_| Unavailable::BadAnswer)?
        .ok_or(Unavailable::BadAnswer)?;
    let points: Vec<Point> = values
        .into_iter()
        .filter_map(|(t, v)| Some((t.as_f64()?, v.parse::<f64>().ok()?)))
        .filter(|(_, v)| v.is_finite())
        .collect();
    if points.is_empty() {
        return Err(Unavailable::NoData);
    }
    Ok(points)
}

/// The `data` of a successful answer, or why there is none.
fn data_of(status: u16, body: &[u8]) -> Result<Data, Unavailable> {
    let answer: Answer = match serde_json::from_slice(body) {
        Ok(answer) => answer,
        Err(_) if status >= 400 => return Err(Unavailable::Refused(format!("HTTP {status}"))),
        Err(_) => return Err(Unavailable::BadAnswer),
    };
    if answer.status != "success" || status >= 400 {
        // The error text is Prometheus's and may echo the query: not shown.
        let kind = answer
            .error_type
            .unwrap_or_else(|| format!("HTTP {status}"));
        let kind: String = kind
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ' ')
            .take(40)
            .collect();
        return Err(Unavailable::Refused(kind));
    }
    match answer.data {
        Some(data) => serde_json::from_value(data).map_err(|_| Unavailable::BadAnswer),
        None => Err(Unavailable::BadAnswer),
    }
}

/// Reads an answer as Flagger's `RunQuery` does.
pub(crate) fn read_answer(status: u16, body: &[u8]) -> Result<f64, Unavailable> {
    let data = data_of(status, body)?;
    let mut value = None;
    for sample in data.result {
        if sample.values.is_some() {
            return Err(Unavailable::BadAnswer);
        }
        if let Some((_, serde_json::Value::String(v))) = sample.value {
            value = Some(v.parse::<f64>().map_err(|_| Unavailable::BadAnswer)?);
        }
    }
    match value {
        Some(v) if !v.is_nan() => Ok(v),
        _ => Err(Unavailable::NoData),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/tests/fixtures/prometheus/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(path).expect("fixture")
    }

    #[test]
    fn answers_read_as_flagger_reads_them() {
        assert_eq!(
            read_answer(200, &fixture("query.vector.single-value.flagger-test.json")),
            Ok(100.0)
        );
        // Flagger keeps the last sample of a vector.
        assert_eq!(
            read_answer(200, &fixture("query.vector.api-docs.json")),
            Ok(0.0)
        );
        for empty in [
            "query.vector.empty.flagger-test.json",
            "query.vector.empty.promtool-test.json",
            "query.vector.nan.flagger-test.json",
        ] {
            assert_eq!(
                read_answer(200, &fixture(empty)),
                Err(Unavailable::NoData),
                "{empty}"
            );
        }
        assert_eq!(
            read_answer(200, &fixture("query.matrix.nan-values.flagger-test.json")),
            Err(Unavailable::BadAnswer),
            "a matrix is not an instant value"
        );
        assert_eq!(
            read_answer(503, &fixture("error.timeout.respondError-test.json")),
            Err(Unavailable::Refused("timeout".into()))
        );
        assert_eq!(
            read_answer(502, b"<html>bad gateway</html>"),
            Err(Unavailable::Refused("HTTP 502".into()))
        );
        assert_eq!(read_answer(200, b"{"), Err(Unavailable::BadAnswer));
    }

    #[test]
    fn ranges_read_their_first_series() {
        assert_eq!(
            read_range(200, &fixture("query_range.matrix.api-docs.json")),
            Ok(vec![
                (1435781430.781, 1.0),
                (1435781445.781, 1.0),
                (1435781460.781, 1.0)
            ])
        );
        assert_eq!(
            read_range(200, &fixture("query_range.matrix.empty.promtool-test.json")),
            Err(Unavailable::NoData)
        );
        assert_eq!(
            read_range(200, &fixture("query.matrix.nan-values.flagger-test.json")),
            Err(Unavailable::NoData),
            "NaN points are no points"
        );
        assert_eq!(
            read_range(200, &fixture("query.vector.single-value.flagger-test.json")),
            Err(Unavailable::BadAnswer),
            "a vector is not a range"
        );
    }
}
