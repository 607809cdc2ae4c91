//! A Flagger simulator for black-box tests.
//!
//! It drives one Canary through Flagger's scheduler (`advanceCanary`) one analysis interval
//! at a time and makes exactly the webhook calls Flagger would make in that interval, over
//! real HTTP. Only webhooks are simulated: no metrics, pre/post-rollout hooks, mirroring
//! or step-weight promotion; the mesh provider routes traffic (not the plain `kubernetes`
//! provider), and workloads are always ready.
//!
//! Fidelity notes, from Flagger's scheduler:
//! - The checksum sent is `status.lastAppliedSpec`: while waiting at `confirm-rollout` it is
//!   still the previous revision's; it becomes the new revision's when the canary is scaled
//!   up. After a rollback (phase Failed) Flagger re-syncs it first, so the next start gate
//!   sees the new revision's checksum.
//! - Events carry the phase and checksum of the in-memory Canary Flagger records them on,
//!   which is sometimes the phase before the transition made in the same tick (for example
//!   "Halt … waiting for approval" carries Initialized or Succeeded, "Promotion completed!"
//!   carries Finalising).
//! - Entering WaitingPromotion, and every refused promotion check while in it, sets
//!   `status.iterations` to `analysis.iterations - 1`; that is why Blue/Green and A/B ask the
//!   promotion gate only every other tick, while the canary strategy asks every tick.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Flagger's webhook types that the simulator drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookType {
    ConfirmRollout,
    ConfirmTrafficIncrease,
    ConfirmPromotion,
    PreRollout,
    Rollback,
    Event,
}

impl HookType {
    /// The `type` value of the webhook entry in a Canary spec.
    pub fn as_str(self) -> &'static str {
        match self {
            HookType::ConfirmRollout => "confirm-rollout",
            HookType::ConfirmTrafficIncrease => "confirm-traffic-increase",
            HookType::ConfirmPromotion => "confirm-promotion",
            HookType::PreRollout => "pre-rollout",
            HookType::Rollback => "rollback",
            HookType::Event => "event",
        }
    }
}

/// One entry of `analysis.webhooks`.
#[derive(Debug, Clone)]
pub struct Hook {
    pub name: String,
    pub hook_type: HookType,
    pub url: String,
    pub metadata: BTreeMap<String, String>,
    pub timeout: Duration,
}

impl Hook {
    pub fn new(name: &str, hook_type: HookType, url: impl Into<String>) -> Self {
        Hook {
            name: name.to_string(),
            hook_type,
            url: url.into(),
            metadata: BTreeMap::new(),
            timeout: Duration::from_secs(10),
        }
    }

    pub fn with_metadata(mut self, k: &str, v: &str) -> Self {
        self.metadata.insert(k.to_string(), v.to_string());
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// The analysis strategy of the Canary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Progressive traffic shifting: `stepWeight` / `maxWeight`.
    Canary { step_weight: u32, max_weight: u32 },
    /// `iterations` without `match`.
    BlueGreen { iterations: u32 },
    /// `iterations` with `match` (header/cookie routing).
    AB { iterations: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Initializing,
    Initialized,
    Waiting,
    Progressing,
    WaitingPromotion,
    Promoting,
    Finalising,
    Succeeded,
    Failed,
}

impl Phase {
    /// The phase as Flagger writes it in the status and in webhook payloads.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Initializing => "Initializing",
            Phase::Initialized => "Initialized",
            Phase::Waiting => "Waiting",
            Phase::Progressing => "Progressing",
            Phase::WaitingPromotion => "WaitingPromotion",
            Phase::Promoting => "Promoting",
            Phase::Finalising => "Finalising",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }
}

/// One HTTP call made to a webhook.
#[derive(Debug, Clone)]
pub struct Call {
    pub tick: u64,
    pub hook_name: String,
    pub hook_type: HookType,
    pub url: String,
    /// `None` when the connection failed or the hook timed out.
    pub status: Option<u16>,
    pub phase_sent: Phase,
    pub checksum_sent: String,
    /// The JSON request body exactly as sent.
    pub body: String,
    /// The response body, or the transport error text when `status` is `None`.
    pub response: String,
}

impl Call {
    /// Flagger's notion of success: 200, 201 or 202.
    pub fn passed(&self) -> bool {
        matches!(self.status, Some(200..=202))
    }
}

/// One event Flagger recorded (and sent to every `event` hook).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimEvent {
    pub tick: u64,
    pub message: String,
    /// "Normal" or "Warning".
    pub event_type: &'static str,
    pub phase: Phase,
    pub checksum: String,
}

/// Status fields of the simulated Canary object.
#[derive(Debug, Clone)]
struct Status {
    phase: Phase,
    last_applied: String,
    last_promoted: String,
    iterations: i64,
    failed_checks: u32,
}

pub struct FlaggerSim {
    name: String,
    namespace: String,
    strategy: Strategy,
    hooks: Vec<Hook>,
    /// The checksum of the spec currently applied to the target workload.
    target: String,
    status: Status,
    /// Traffic routed to the canary, as the mesh router reports it.
    weight: u32,
    tick: u64,
    calls: Vec<Call>,
    events: Vec<SimEvent>,
    promotions: u32,
    rollbacks: u32,
    /// `analysis.threshold`: failed checks before a rollback.
    threshold: u32,
}

/// The revision checksum the simulator starts with.
pub const INITIAL_CHECKSUM: &str = "rev-0000";

impl FlaggerSim {
    pub fn new(name: &str, namespace: &str, strategy: Strategy, hooks: Vec<Hook>) -> Self {
        FlaggerSim {
            name: name.to_string(),
            namespace: namespace.to_string(),
            strategy,
            hooks,
            target: INITIAL_CHECKSUM.to_string(),
            status: Status {
                phase: Phase::Initializing,
                last_applied: String::new(),
                last_promoted: String::new(),
                iterations: 0,
                failed_checks: 0,
            },
            weight: 0,
            tick: 0,
            calls: Vec::new(),
            events: Vec::new(),
            promotions: 0,
            rollbacks: 0,
            threshold: 5,
        }
    }

    /// `analysis.threshold` (5 unless set).
    pub fn with_threshold(mut self, threshold: u32) -> Self {
        self.threshold = threshold;
        self
    }

    /// `status.failedChecks`.
    pub fn failed_checks(&self) -> u32 {
        self.status.failed_checks
    }

    /// Applies a new revision of the target workload (a changed pod template).
    pub fn deploy(&mut self, checksum: &str) {
        self.target = checksum.to_string();
    }

    /// Runs one analysis interval and returns the phase after it.
    pub async fn tick(&mut self) -> Phase {
        self.tick += 1;
        self.advance().await;
        self.status.phase
    }

    /// Ticks until `pred` holds (checked before the first tick and after each one), at most
    /// `max_ticks` times. Returns whether `pred` held.
    pub async fn run_until(&mut self, pred: impl Fn(&FlaggerSim) -> bool, max_ticks: u32) -> bool {
        if pred(self) {
            return true;
        }
        for _ in 0..max_ticks {
            self.tick().await;
            if pred(self) {
                return true;
            }
        }
        false
    }

    pub fn phase(&self) -> Phase {
        self.status.phase
    }

    /// Traffic weight routed to the canary (0-100).
    pub fn canary_weight(&self) -> u32 {
        self.weight
    }

    /// The checksum Flagger sends now (`status.lastAppliedSpec`).
    pub fn checksum(&self) -> &str {
        &self.status.last_applied
    }

    /// The checksum of the revision last deployed with [`FlaggerSim::deploy`].
    pub fn deployed_checksum(&self) -> &str {
        &self.target
    }

    /// The checksum of the revision running as primary (`status.lastPromotedSpec`).
    pub fn promoted_checksum(&self) -> &str {
        &self.status.last_promoted
    }

    /// `status.iterations` (may be negative while waiting for promotion, as in Flagger).
    pub fn iterations(&self) -> i64 {
        self.status.iterations
    }

    /// Number of ticks run so far.
    pub fn ticks(&self) -> u64 {
        self.tick
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn calls(&self) -> &[Call] {
        &self.calls
    }

    pub fn calls_of(&self, t: HookType) -> Vec<&Call> {
        self.calls.iter().filter(|c| c.hook_type == t).collect()
    }

    /// Calls made during one tick (ticks are numbered from 1).
    pub fn calls_in_tick(&self, tick: u64) -> Vec<&Call> {
        self.calls.iter().filter(|c| c.tick == tick).collect()
    }

    pub fn promotions(&self) -> u32 {
        self.promotions
    }

    pub fn rollbacks(&self) -> u32 {
        self.rollbacks
    }

    /// Messages of every event recorded so far, in order (each is sent to every event hook).
    pub fn events(&self) -> Vec<String> {
        self.events.iter().map(|e| e.message.clone()).collect()
    }

    /// Every event recorded so far with its type, phase and checksum.
    pub fn event_log(&self) -> &[SimEvent] {
        &self.events
    }

    // ---- the scheduler ----------------------------------------------------------------

    fn target_name(&self) -> String {
        format!("{}.{}", self.name, self.namespace)
    }

    /// Flagger's `hasSpecChanged`: a revision equal to the promoted one (a manual revert)
    /// does not start an analysis.
    fn target_changed(&self) -> bool {
        if self.status.last_applied.is_empty() {
            return true;
        }
        if self.status.last_promoted == self.target {
            return false;
        }
        self.status.last_applied != self.target
    }

    /// Flagger's `SetStatusPhase`.
    fn set_phase(&mut self, phase: Phase) {
        self.status.phase = phase;
        if phase != Phase::Progressing && phase != Phase::Waiting {
            self.status.iterations = 0;
            if phase == Phase::WaitingPromotion {
                self.status.iterations = self.analysis_iterations() - 1;
            }
        }
        if phase == Phase::Initialized || phase == Phase::Succeeded {
            self.status.last_promoted = self.status.last_applied.clone();
        }
    }

    fn analysis_iterations(&self) -> i64 {
        match self.strategy {
            Strategy::Canary { .. } => 0,
            Strategy::BlueGreen { iterations } | Strategy::AB { iterations } => iterations as i64,
        }
    }

    async fn advance(&mut self) {
        let tn = self.target_name();

        // setPhaseInitialized: the first run creates the primary from the current spec.
        if self.status.phase == Phase::Initializing {
            self.status.last_applied = self.target.clone();
            self.set_phase(Phase::Initialized);
            let (p, c) = (self.status.phase, self.status.last_applied.clone());
            self.event(Normal, format!("Initialization done! {tn}"), p, c)
                .await;
            return;
        }

        // shouldAdvance
        let phase = self.status.phase;
        let should_advance = match phase {
            Phase::Progressing
            | Phase::Waiting
            | Phase::WaitingPromotion
            | Phase::Promoting
            | Phase::Finalising => true,
            _ => {
                let changed = self.target_changed();
                if phase == Phase::Failed {
                    // Flagger re-syncs lastAppliedSpec of a failed canary but compares the
                    // copy it already holds: the change is still seen, and the start gate
                    // then gets the new revision's checksum.
                    self.status.last_applied = self.target.clone();
                }
                changed
            }
        };
        if !should_advance {
            return;
        }

        // checkCanaryStatus
        if !matches!(
            phase,
            Phase::Progressing | Phase::WaitingPromotion | Phase::Promoting | Phase::Finalising
        ) {
            if !self.run_confirm_rollout_hooks().await {
                return;
            }
            let c = self.status.last_applied.clone();
            self.event(
                Normal,
                format!("New revision detected! Scaling up {tn}"),
                Phase::Progressing,
                c,
            )
            .await;
            // SyncStatus{Phase: Progressing}
            self.status.phase = Phase::Progressing;
            self.status.iterations = 0;
            self.status.failed_checks = 0;
            self.status.last_applied = self.target.clone();
            return;
        }

        // hasCanaryRevisionChanged
        if matches!(phase, Phase::Progressing | Phase::WaitingPromotion) && self.target_changed() {
            self.weight = 0;
            self.status.phase = Phase::Progressing;
            self.status.iterations = 0;
            self.status.last_applied = self.target.clone();
            let c = self.status.last_applied.clone();
            self.event(
                Normal,
                format!("New revision detected! Restarting analysis for {tn}"),
                Phase::Progressing,
                c,
            )
            .await;
            return;
        }

        // manual rollback
        if matches!(
            phase,
            Phase::Progressing | Phase::Waiting | Phase::WaitingPromotion
        ) && self.run_rollback_hooks().await
        {
            let c = self.status.last_applied.clone();
            self.event(
                Warning,
                format!("Rolling back {tn} manual webhook invoked"),
                phase,
                c,
            )
            .await;
            self.rollback().await;
            return;
        }

        if phase == Phase::Promoting {
            // runPromotionTrafficShift without stepWeightPromotion
            let c = self.status.last_applied.clone();
            self.event(
                Normal,
                "Routing all traffic to primary".to_string(),
                phase,
                c,
            )
            .await;
            self.weight = 0;
            self.set_phase(Phase::Finalising);
            return;
        }

        if phase == Phase::Finalising {
            self.set_phase(Phase::Succeeded);
            self.promotions += 1;
            let c = self.status.last_applied.clone();
            self.event(
                Normal,
                format!("Promotion completed! Scaling down {tn}"),
                phase,
                c,
            )
            .await;
            return;
        }

        // the failed checks threshold
        if matches!(phase, Phase::Progressing | Phase::WaitingPromotion)
            && self.status.failed_checks >= self.threshold
        {
            let c = self.status.last_applied.clone();
            let msg = format!(
                "Rolling back {tn} failed checks threshold reached {}",
                self.status.failed_checks
            );
            self.event(Warning, msg, phase, c).await;
            self.rollback().await;
            return;
        }

        if self.weight == 0 && self.status.iterations == 0 {
            let c = self.status.last_applied.clone();
            self.event(
                Normal,
                format!("Starting canary analysis for {tn}"),
                phase,
                c,
            )
            .await;
            // runPreRolloutHooks: a failure counts as a failed check.
            if !self.run_pre_rollout_hooks().await {
                self.status.failed_checks += 1;
                return;
            }
        }

        match self.strategy {
            Strategy::AB { iterations } => self.run_ab(iterations as i64).await,
            Strategy::BlueGreen { iterations } => self.run_blue_green(iterations as i64).await,
            Strategy::Canary {
                step_weight,
                max_weight,
            } => {
                if step_weight > 0 {
                    if phase == Phase::Progressing
                        && !self.run_confirm_traffic_increase_hooks().await
                    {
                        return;
                    }
                    self.run_canary(step_weight, max_weight).await;
                }
            }
        }
    }

    async fn run_canary(&mut self, step_weight: u32, max_weight: u32) {
        let tn = self.target_name();
        let phase = self.status.phase;
        if self.weight < max_weight {
            self.weight = (self.weight + step_weight).min(100);
            let c = self.status.last_applied.clone();
            self.event(
                Normal,
                format!("Advance {tn} canary weight {}", self.weight),
                phase,
                c,
            )
            .await;
            return;
        }
        if !self.run_confirm_promotion_hooks().await {
            return;
        }
        self.promote().await;
    }

    async fn run_ab(&mut self, iterations: i64) {
        let tn = self.target_name();
        let phase = self.status.phase;
        if iterations > self.status.iterations {
            self.weight = 100;
            self.status.iterations += 1;
            let c = self.status.last_applied.clone();
            let msg = format!(
                "Advance {tn} canary iteration {}/{iterations}",
                self.status.iterations
            );
            self.event(Normal, msg, phase, c).await;
            return;
        }
        if !self.run_confirm_promotion_hooks().await {
            return;
        }
        if iterations == self.status.iterations {
            self.promote().await;
        }
    }

    async fn run_blue_green(&mut self, iterations: i64) {
        let tn = self.target_name();
        let phase = self.status.phase;
        if iterations > self.status.iterations {
            self.status.iterations += 1;
            let c = self.status.last_applied.clone();
            let msg = format!(
                "Advance {tn} canary iteration {}/{iterations}",
                self.status.iterations
            );
            self.event(Normal, msg, phase, c).await;
            return;
        }
        if !self.run_confirm_promotion_hooks().await {
            return;
        }
        if iterations == self.status.iterations {
            // First approval: switch traffic, promote only if the next check passes too.
            let c = self.status.last_applied.clone();
            self.event(
                Normal,
                "Routing all traffic to canary".to_string(),
                phase,
                c,
            )
            .await;
            self.weight = 100;
            self.status.iterations += 1;
            return;
        }
        if iterations < self.status.iterations {
            self.promote().await;
        }
    }

    async fn promote(&mut self) {
        let c = self.status.last_applied.clone();
        let msg = format!(
            "Copying {n}.{ns} template spec to {n}-primary.{ns}",
            n = self.name,
            ns = self.namespace
        );
        self.event(Normal, msg, self.status.phase, c).await;
        self.set_phase(Phase::Promoting);
    }

    async fn rollback(&mut self) {
        self.weight = 0;
        let c = self.status.last_applied.clone();
        let msg = format!("Canary failed! Scaling down {}", self.target_name());
        self.event(Warning, msg, Phase::Failed, c).await;
        // SyncStatus{Phase: Failed}
        self.status.phase = Phase::Failed;
        self.status.iterations = 0;
        self.status.last_applied = self.target.clone();
        self.rollbacks += 1;
    }

    fn hooks_of(&self, t: HookType) -> Vec<Hook> {
        self.hooks
            .iter()
            .filter(|h| h.hook_type == t)
            .cloned()
            .collect()
    }

    async fn run_confirm_rollout_hooks(&mut self) -> bool {
        for hook in self.hooks_of(HookType::ConfirmRollout) {
            let phase = self.status.phase;
            let c = self.status.last_applied.clone();
            if !self.call(&hook, phase, None).await {
                if phase != Phase::Waiting {
                    self.set_phase(Phase::Waiting);
                    let msg = format!(
                        "Halt {} advancement waiting for approval {}",
                        self.target_name(),
                        hook.name
                    );
                    self.event(Warning, msg, phase, c).await;
                }
                return false;
            }
            let msg = format!("Confirm-rollout check {} passed", hook.name);
            self.event(Normal, msg, phase, c).await;
        }
        true
    }

    async fn run_confirm_traffic_increase_hooks(&mut self) -> bool {
        for hook in self.hooks_of(HookType::ConfirmTrafficIncrease) {
            let phase = self.status.phase;
            let c = self.status.last_applied.clone();
            if !self.call(&hook, Phase::Progressing, None).await {
                let msg = format!(
                    "Halt {} advancement waiting for traffic increase approval {}",
                    self.target_name(),
                    hook.name
                );
                self.event(Warning, msg, phase, c).await;
                return false;
            }
            let msg = format!("Confirm-traffic-increase check {} passed", hook.name);
            self.event(Normal, msg, phase, c).await;
        }
        true
    }

    async fn run_confirm_promotion_hooks(&mut self) -> bool {
        for hook in self.hooks_of(HookType::ConfirmPromotion) {
            let phase = self.status.phase;
            let c = self.status.last_applied.clone();
            if !self.call(&hook, Phase::Progressing, None).await {
                if phase != Phase::WaitingPromotion {
                    self.set_phase(Phase::WaitingPromotion);
                    let msg = format!(
                        "Halt {} advancement waiting for promotion approval {}",
                        self.target_name(),
                        hook.name
                    );
                    self.event(Warning, msg, phase, c).await;
                } else {
                    self.status.iterations = self.analysis_iterations() - 1;
                }
                return false;
            }
            let msg = format!("Confirm-promotion check {} passed", hook.name);
            self.event(Normal, msg, phase, c).await;
        }
        true
    }

    async fn run_pre_rollout_hooks(&mut self) -> bool {
        for hook in self.hooks_of(HookType::PreRollout) {
            let phase = self.status.phase;
            let c = self.status.last_applied.clone();
            if !self.call(&hook, Phase::Progressing, None).await {
                // CallWebhook's error: the response body, or the transport error.
                let err = self
                    .calls
                    .last()
                    .map(|c| c.response.clone())
                    .unwrap_or_default();
                let msg = format!(
                    "Halt {} advancement pre-rollout check {} failed {err}",
                    self.target_name(),
                    hook.name
                );
                self.event(Warning, msg, phase, c).await;
                return false;
            }
            let msg = format!("Pre-rollout check {} passed", hook.name);
            self.event(Normal, msg, phase, c).await;
        }
        true
    }

    async fn run_rollback_hooks(&mut self) -> bool {
        for hook in self.hooks_of(HookType::Rollback) {
            let phase = self.status.phase;
            let c = self.status.last_applied.clone();
            if self.call(&hook, phase, None).await {
                let msg = format!("Rollback check {} passed", hook.name);
                self.event(Warning, msg, phase, c).await;
                return true;
            }
            let msg = format!("Rollback hook {} not signaling a rollback", hook.name);
            self.event(Normal, msg, phase, c).await;
        }
        false
    }

    /// Records an event and posts it to every event hook, as Flagger's `recordEvent*` does.
    async fn event(
        &mut self,
        event_type: EventType,
        message: String,
        phase: Phase,
        checksum: String,
    ) {
        let event_type = event_type.as_str();
        self.events.push(SimEvent {
            tick: self.tick,
            message: message.clone(),
            event_type,
            phase,
            checksum: checksum.clone(),
        });
        for hook in self.hooks_of(HookType::Event) {
            let timestamp = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
                .to_string();
            let mut meta = BTreeMap::new();
            meta.insert("eventMessage".to_string(), message.clone());
            meta.insert("eventType".to_string(), event_type.to_string());
            meta.insert("timestamp".to_string(), timestamp);
            // The entry's own metadata never overrides the three event keys.
            for (k, v) in &hook.metadata {
                meta.entry(k.clone()).or_insert_with(|| v.clone());
            }
            let saved = std::mem::replace(&mut self.status.last_applied, checksum.clone());
            self.call(&hook, phase, Some(meta)).await;
            self.status.last_applied = saved;
        }
    }

    /// One POST to a webhook, recorded in `calls`. Returns Flagger's verdict (200-202).
    async fn call(
        &mut self,
        hook: &Hook,
        phase: Phase,
        metadata: Option<BTreeMap<String, String>>,
    ) -> bool {
        let metadata = metadata.unwrap_or_else(|| hook.metadata.clone());
        let checksum = self.status.last_applied.clone();
        let payload = Payload {
            name: &self.name,
            namespace: &self.namespace,
            phase: phase.as_str(),
            checksum: &checksum,
            metadata: if metadata.is_empty() {
                None
            } else {
                Some(&metadata)
            },
        };
        let body = serde_json::to_string(&payload).expect("payload serializes");
        let (status, response) = post(&hook.url, &body, hook.timeout).await;
        let call = Call {
            tick: self.tick,
            hook_name: hook.name.clone(),
            hook_type: hook.hook_type,
            url: hook.url.clone(),
            status,
            phase_sent: phase,
            checksum_sent: checksum,
            body,
            response,
        };
        let passed = call.passed();
        self.calls.push(call);
        passed
    }
}

#[derive(Clone, Copy)]
enum EventType {
    Normal,
    Warning,
}
use EventType::{Normal, Warning};

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            Normal => "Normal",
            Warning => "Warning",
        }
    }
}

/// Flagger's `CanaryWebhookPayload`, fields in Go's declaration order.
#[derive(serde::Serialize)]
struct Payload<'a> {
    name: &'a str,
    namespace: &'a str,
    phase: &'a str,
    checksum: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a BTreeMap<String, String>>,
}

/// A new client per call (Flagger reuses no connection), no retries.
async fn post(url: &str, body: &str, timeout: Duration) -> (Option<u16>, String) {
    let client = match reqwest::Client::builder()
        .timeout(timeout)
        .no_proxy()
        .build()
    {
        Ok(c) => c,
        Err(e) => return (None, e.to_string()),
    };
    let res = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::USER_AGENT, "Go-http-client/1.1")
        .body(body.to_string())
        .send()
        .await;
    match res {
        Ok(r) => {
            let status = r.status().as_u16();
            match r.text().await {
                Ok(text) => (Some(status), text),
                // Flagger fails the call when the body cannot be read.
                Err(e) => (None, e.to_string()),
            }
        }
        Err(e) => (None, e.to_string()),
    }
}

/// The hooks a Canary for pull request `pr` points at gatebot (at `base`): the
/// start, promote and rollback gates of the PR, and the event hook.
/// `GATEBOT_FLAGGER_TOKENS` for `(cluster, token)` pairs: each token's SHA-256.
pub fn flagger_tokens(pairs: &[(&str, &str)]) -> gatebot::testing::gate::FlaggerTokens {
    use sha2::Digest;
    let setting: Vec<String> = pairs
        .iter()
        .map(|(cluster, token)| format!("{cluster}={}", hex::encode(sha2::Sha256::digest(token))))
        .collect();
    setting
        .join(",")
        .parse()
        .expect("a valid GATEBOT_FLAGGER_TOKENS")
}

/// The hooks of a Flagger whose cluster has `token`: gate URLs carry it in
/// the path (`/gates/t/<token>/…`), the others as `?token=`.
pub fn with_token(hooks: Vec<Hook>, token: &str) -> Vec<Hook> {
    hooks
        .into_iter()
        .map(|mut h| {
            h.url = match h.url.split_once("/gates/") {
                Some((base, rest)) => format!("{base}/gates/t/{token}/{rest}"),
                None => format!("{}?token={token}", h.url),
            };
            h
        })
        .collect()
}

pub fn pr_hooks(base: &str, pr: u64) -> Vec<Hook> {
    vec![
        Hook::new(
            "start-gate",
            HookType::ConfirmRollout,
            format!("{base}/gates/start/pr/{pr}"),
        ),
        Hook::new(
            "promote-gate",
            HookType::ConfirmPromotion,
            format!("{base}/gates/promote/pr/{pr}"),
        ),
        Hook::new(
            "rollback-gate",
            HookType::Rollback,
            format!("{base}/gates/rollback/pr/{pr}"),
        ),
        Hook::new(
            "timeline",
            HookType::Event,
            format!("{base}/flagger/events"),
        )
        .with_metadata("pr", &pr.to_string()),
    ]
}

/// A webhook that always fails with 500 and `body`, as a pre-rollout check
/// that finds a problem does: Flagger puts `body` in its event message.
/// Served until the test's runtime ends.
pub async fn failing_webhook(body: &'static str) -> String {
    use axum::http::StatusCode;
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || async move { (StatusCode::INTERNAL_SERVER_ERROR, body) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a port");
    let url = format!(
        "http://{}/hook",
        listener.local_addr().expect("its address")
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// PR 42's podinfo canary (`rev-a` then `rev-b`), started by the admin,
/// waiting at the promote gate of `server`.
pub async fn waiting_at_promote(server: &crate::harness::TestServer) -> FlaggerSim {
    server.open("/gates/start/pr/42").await;
    let mut sim = FlaggerSim::new(
        "podinfo",
        "test",
        Strategy::Canary {
            step_weight: 50,
            max_weight: 50,
        },
        pr_hooks(&server.url, 42),
    );
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    server.drained().await;
    sim
}
