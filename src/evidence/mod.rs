//! The canary's numbers beside the buttons (docs/evidence.md): Flagger's
//! own built-in queries for the canary's mesh or ingress provider, run for
//! the canary and for its primary, and the policy's `[[evidence.queries]]`.
//!
//! Fetched in the background (`core::evidence`) and kept here, one line per
//! waiting canary; the surfaces only read the line. Nothing here is on the
//! gate check's path.

pub(crate) mod chart;
pub(crate) mod prometheus;
pub(crate) mod queries;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use self::chart::Chart;
use self::prometheus::{Prometheus, Unavailable};
use self::queries::{Builtin, Model, Provider, Side};
use crate::gate::{CanaryRef, Millis};
use crate::metrics::ReasonLabels;
use crate::policy::{EvidenceQuery, EvidenceRules};

/// The most canaries whose numbers are kept; waits beyond it show none.
const MOST: usize = 10_000;

/// What a canary's message shows of its numbers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shown {
    pub line: String,
    /// When the numbers were read.
    pub at: Millis,
}

/// One metric, canary against primary.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reading {
    pub name: String,
    pub unit: String,
    pub canary: f64,
    pub primary: Option<f64>,
    /// Which way is better, when the metric says.
    pub better: Better,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    Higher,
    Lower,
    Unknown,
}

impl Reading {
    /// Worse than the primary by more than noise: a point of success rate,
    /// a fifth more latency (and 5 ms, so 1 ms against 2 ms is not).
    pub(crate) fn worse(&self) -> bool {
        let Some(primary) = self.primary else {
            return false;
        };
        match self.better {
            Better::Higher if self.unit == "%" => self.canary < primary - 1.0,
            Better::Higher => self.canary < primary * 0.95,
            Better::Lower => self.canary > primary * 1.2 && self.canary > primary + 5.0,
            Better::Unknown => false,
        }
    }

    fn text(&self) -> String {
        let mark = if self.worse() { "⚠ " } else { "" };
        let primary = self.primary.map_or_else(String::new, |p| {
            format!(" (primary {})", number(p, &self.unit))
        });
        format!(
            "{mark}{} {}{primary}",
            self.name,
            number(self.canary, &self.unit)
        )
    }
}

/// A number as people read it: a tenth for percentages and small values.
fn number(value: f64, unit: &str) -> String {
    let digits = if unit != "%" && value.abs() >= 10.0 {
        0
    } else {
        1
    };
    let sep = if unit.is_empty() { "" } else { " " };
    format!("{value:.digits$}{sep}{unit}")
}

/// The line of numbers: `success 99.2 % (primary 99.8 %) · p99 120 ms …`.
pub(crate) fn line(readings: &[Reading], window: &str) -> String {
    let mut parts: Vec<String> = readings.iter().map(Reading::text).collect();
    parts.push(format!("last {window}"));
    parts.join(" · ")
}

/// The string members of a wait's stored hook metadata.
pub(crate) fn strings(metadata: &serde_json::Value) -> BTreeMap<String, String> {
    let Some(map) = metadata.as_object() else {
        return BTreeMap::new();
    };
    map.iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// Checks `[evidence]` at start and in check-config: the window is a
/// Prometheus duration and each query renders with Flagger's variables.
pub(crate) fn check_rules(rules: &EvidenceRules) -> anyhow::Result<()> {
    let window = rules.interval.as_deref().unwrap_or("1m");
    let model = Model::canary("podinfo", "test", "podinfo", window);
    let builtin = queries::query(Provider::Istio, Builtin::SuccessRate, Side::Canary, &model);
    if builtin.is_err() {
        anyhow::bail!("interval `{window}`: write a Prometheus duration such as 1m or 30s");
    }
    for custom in &rules.queries {
        if let Err(e) = queries::render(&custom.query, &model) {
            anyhow::bail!("query `{}`: {e}", custom.name);
        }
    }
    Ok(())
}

/// The numbers of the waiting canaries, and how to fetch them.
pub struct Evidence {
    prometheus: Option<Prometheus>,
    rules: EvidenceRules,
    shown: Mutex<HashMap<CanaryRef, Shown>>,
    /// The last 30 minutes of the built-in metrics, for the gate's page.
    charts: Mutex<HashMap<CanaryRef, Vec<Chart>>>,
    unavailable: Family<ReasonLabels, Counter>,
}

impl Evidence {
    pub(crate) fn new(
        prometheus: Option<Prometheus>,
        rules: EvidenceRules,
        unavailable: Family<ReasonLabels, Counter>,
    ) -> Self {
        Self {
            prometheus,
            rules,
            shown: Mutex::new(HashMap::new()),
            charts: Mutex::new(HashMap::new()),
            unavailable,
        }
    }

    /// No Prometheus: nothing is fetched or shown.
    pub fn off() -> Self {
        Self::new(None, EvidenceRules::default(), Family::default())
    }

    pub(crate) fn is_on(&self) -> bool {
        self.prometheus.is_some()
    }

    /// The line a message shows for `canary`, if its numbers were read.
    pub(crate) fn line_of(&self, canary: &CanaryRef) -> Option<String> {
        let shown = self.shown.lock().ok()?;
        shown.get(canary).map(|s| s.line.clone())
    }

    /// The provider whose queries `canary` gets: its hook metadata's
    /// `provider`, else the policy's, else Flagger's default.
    pub(crate) fn provider_of(&self, metadata: &BTreeMap<String, String>) -> Provider {
        let named = metadata.get("provider").map(String::as_str);
        Provider::from_flagger(named.or(self.rules.provider.as_deref()).unwrap_or(""))
    }

    /// Reads `canary`'s numbers now and keeps the line. Returns whether the
    /// line changed.
    pub(crate) async fn fetch(
        &self,
        canary: &CanaryRef,
        metadata: &BTreeMap<String, String>,
        now: Millis,
    ) -> bool {
        let Some(prometheus) = &self.prometheus else {
            return false;
        };
        let window = self.window_of(metadata);
        let line = match self.readings(prometheus, canary, metadata, &window).await {
            Ok(readings) => {
                self.read_charts(prometheus, canary, metadata, &window, now)
                    .await;
                line(&readings, &window)
            }
            Err(why) => {
                self.unavailable
                    .get_or_create(&ReasonLabels {
                        reason: why.reason(),
                    })
                    .inc();
                format!("metrics unavailable: {why}")
            }
        };
        self.keep(canary, line, now)
    }

    fn keep(&self, canary: &CanaryRef, line: String, at: Millis) -> bool {
        let Ok(mut shown) = self.shown.lock() else {
            return false;
        };
        if shown.len() >= MOST && !shown.contains_key(canary) {
            return false;
        }
        let changed = shown.get(canary).is_none_or(|s| s.line != line);
        shown.insert(canary.clone(), Shown { line, at });
        changed
    }

    /// Forgets the canaries that no longer wait.
    pub(crate) fn retain(&self, waiting: &std::collections::BTreeSet<CanaryRef>) {
        if let Ok(mut shown) = self.shown.lock() {
            shown.retain(|c, _| waiting.contains(c));
        }
        if let Ok(mut charts) = self.charts.lock() {
            charts.retain(|c, _| waiting.contains(c));
        }
    }

    /// The charts of `canary`'s last 30 minutes, when they were read.
    pub(crate) fn charts_of(&self, canary: &CanaryRef) -> Vec<Chart> {
        let Ok(charts) = self.charts.lock() else {
            return Vec::new();
        };
        charts.get(canary).cloned().unwrap_or_default()
    }

    /// Reads the built-in metrics' last 30 minutes, canary and primary.
    async fn read_charts(
        &self,
        prometheus: &Prometheus,
        canary: &CanaryRef,
        metadata: &BTreeMap<String, String>,
        window: &str,
        now: Millis,
    ) {
        let provider = self.provider_of(metadata);
        let target = metadata.get("target").unwrap_or(&canary.name);
        let model = Model::canary(&canary.name, &canary.namespace, target, window);
        let model = &model;
        let (end, step) = (now.div_euclid(1000), 60);
        let start = end - chart::SPAN_MS / 1000;
        let mut charts = Vec::new();
        for (builtin, name, unit) in [
            (Builtin::SuccessRate, "success", "%"),
            (Builtin::Duration, "p99", "ms"),
        ] {
            let series = |side| async move {
                let Ok(Some(query)) = queries::query(provider, builtin, side, model) else {
                    return Vec::new();
                };
                let points = prometheus.range(&query, start, end, step).await;
                let ms = |(t, v): (f64, f64)| match builtin {
                    Builtin::Duration => (t, queries::duration_ms(provider, v)),
                    Builtin::SuccessRate => (t, v),
                };
                // A chart is a picture: a series Prometheus could not give is left out.
                points
                    .map(|p| p.into_iter().map(ms).collect())
                    .unwrap_or_default()
            };
            let (canary, primary) = tokio::join!(series(Side::Canary), series(Side::Primary));
            charts.push(Chart {
                name,
                unit,
                canary,
                primary,
            });
        }
        if let Ok(mut kept) = self.charts.lock() {
            if kept.len() < MOST || kept.contains_key(canary) {
                kept.insert(canary.clone(), charts);
            }
        }
    }

    /// The query window: the hook metadata's `interval` (the Canary's
    /// analysis interval, a claim: held to 10 s..1 h and written anew, see
    /// `gate::interval`), else the policy's, else one minute.
    fn window_of(&self, metadata: &BTreeMap<String, String>) -> String {
        metadata
            .get("interval")
            .and_then(|i| crate::gate::interval::bounded(i))
            .map(crate::gate::interval::prometheus)
            .or_else(|| self.rules.interval.clone())
            .unwrap_or_else(|| "1m".to_string())
    }

    /// The most Prometheus queries one canary's fetch sends: the built-in
    /// metrics for canary and primary, now and over the chart's span, and
    /// each of the policy's queries.
    pub(crate) fn queries_per_canary(&self) -> usize {
        8 + self.rules.queries.len()
    }

    async fn readings(
        &self,
        prometheus: &Prometheus,
        canary: &CanaryRef,
        metadata: &BTreeMap<String, String>,
        window: &str,
    ) -> Result<Vec<Reading>, Unavailable> {
        let provider = self.provider_of(metadata);
        let target = metadata.get("target").unwrap_or(&canary.name);
        let model = Model::canary(&canary.name, &canary.namespace, target, window);
        let model = &model;
        let mut out = Vec::new();
        for (builtin, name, unit, better) in [
            (Builtin::SuccessRate, "success", "%", Better::Higher),
            (Builtin::Duration, "p99", "ms", Better::Lower),
        ] {
            let ask = |side| async move {
                let query = queries::query(provider, builtin, side, model)
                    .map_err(|_| Unavailable::BadQuery)?;
                match query {
                    Some(q) => prometheus.instant(&q).await.map(Some),
                    None => Ok(None),
                }
            };
            let (canary, primary) = tokio::join!(ask(Side::Canary), ask(Side::Primary));
            let ms = |v: f64| match builtin {
                Builtin::Duration => queries::duration_ms(provider, v),
                Builtin::SuccessRate => v,
            };
            // A metric with no samples yet (no traffic, a query for
            // another mesh) is left out; the others still show.
            let canary = match canary {
                Ok(Some(value)) => value,
                Ok(None) | Err(Unavailable::NoData) => continue,
                Err(why) => return Err(why),
            };
            out.push(Reading {
                name: name.into(),
                unit: unit.into(),
                canary: ms(canary),
                // The primary's number is context: without it the canary's still shows.
                primary: primary.ok().flatten().map(ms),
                better,
            });
        }
        for custom in &self.rules.queries {
            match self.custom(prometheus, custom, model).await {
                Ok(reading) => out.push(reading),
                Err(Unavailable::NoData) => {}
                Err(why) => return Err(why),
            }
        }
        if out.is_empty() {
            return Err(Unavailable::NoData);
        }
        Ok(out)
    }

    async fn custom(
        &self,
        prometheus: &Prometheus,
        custom: &EvidenceQuery,
        model: &Model,
    ) -> Result<Reading, Unavailable> {
        let query = queries::render(&custom.query, model).map_err(|_| Unavailable::BadQuery)?;
        Ok(Reading {
            name: custom.name.clone(),
            unit: custom.unit.clone(),
            canary: prometheus.instant(&query).await?,
            primary: None,
            better: Better::Unknown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(name: &str, unit: &str, canary: f64, primary: f64, better: Better) -> Reading {
        Reading {
            name: name.into(),
            unit: unit.into(),
            canary,
            primary: Some(primary),
            better,
        }
    }

    #[test]
    fn the_line_reads_as_people_say_it() {
        let readings = [
            reading("success", "%", 99.2, 99.8, Better::Higher),
            reading("p99", "ms", 120.0, 95.0, Better::Lower),
        ];
        assert_eq!(
            line(&readings, "1m"),
            "success 99.2 % (primary 99.8 %) · ⚠ p99 120 ms (primary 95 ms) · last 1m"
        );
    }

    #[test]
    fn worse_is_more_than_noise() {
        assert!(reading("success", "%", 97.0, 99.8, Better::Higher).worse());
        assert!(!reading("success", "%", 99.2, 99.8, Better::Higher).worse());
        assert!(reading("p99", "ms", 300.0, 100.0, Better::Lower).worse());
        assert!(!reading("p99", "ms", 110.0, 100.0, Better::Lower).worse());
        assert!(
            !reading("p99", "ms", 3.0, 1.0, Better::Lower).worse(),
            "within 5 ms"
        );
        assert!(!reading("custom", "", 1.0, 9.0, Better::Unknown).worse());
    }
}
