//! Flagger's event hook: what an event message means. No I/O.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    WaitingForApproval,
    WaitingForPromotionApproval,
    NewRevision,
    AnalysisStarted,
    WeightAdvanced,
    PromotionApproved,
    PromotionStarted,
    PromotionCompleted,
    RollingBack,
    CanaryFailed,
    Other,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WaitingForApproval => "waiting_for_approval",
            Self::WaitingForPromotionApproval => "waiting_for_promotion_approval",
            Self::NewRevision => "new_revision",
            Self::AnalysisStarted => "analysis_started",
            Self::WeightAdvanced => "weight_advanced",
            Self::PromotionApproved => "promotion_approved",
            Self::PromotionStarted => "promotion_started",
            Self::PromotionCompleted => "promotion_completed",
            Self::RollingBack => "rolling_back",
            Self::CanaryFailed => "canary_failed",
            Self::Other => "other",
        }
    }

    /// The canary's rollout has ended, one way or the other.
    pub fn is_final(self) -> bool {
        matches!(self, Self::PromotionCompleted | Self::CanaryFailed)
    }

    /// Worth telling people about (the rest is kept in the timeline only).
    pub fn is_milestone(self) -> bool {
        !matches!(self, Self::Other | Self::WeightAdvanced)
    }
}

/// Recognises Flagger's event messages (pkg/controller, v1.44).
pub fn classify(message: &str) -> EventKind {
    let m = message.to_ascii_lowercase();
    if m.contains("waiting for promotion approval") {
        EventKind::WaitingForPromotionApproval
    } else if m.contains("waiting for approval") {
        EventKind::WaitingForApproval
    } else if m.starts_with("new revision detected") {
        EventKind::NewRevision
    } else if m.starts_with("starting canary analysis") {
        EventKind::AnalysisStarted
    } else if m.starts_with("advance ") && m.contains("weight") {
        EventKind::WeightAdvanced
    } else if m.starts_with("confirm-promotion check") && m.contains("passed") {
        EventKind::PromotionApproved
    } else if m.starts_with("copying ") && m.contains("template spec") {
        EventKind::PromotionStarted
    } else if m.starts_with("promotion completed") {
        EventKind::PromotionCompleted
    } else if m.starts_with("rolling back") {
        EventKind::RollingBack
    } else if m.starts_with("canary failed") {
        EventKind::CanaryFailed
    } else {
        EventKind::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_flaggers_messages() {
        let cases = [
            (
                "Halt podinfo.test advancement waiting for approval start-gate",
                EventKind::WaitingForApproval,
            ),
            (
                "Halt podinfo.test advancement waiting for promotion approval promote-gate",
                EventKind::WaitingForPromotionApproval,
            ),
            (
                "New revision detected! Scaling up podinfo.test",
                EventKind::NewRevision,
            ),
            (
                "Starting canary analysis for podinfo.test",
                EventKind::AnalysisStarted,
            ),
            (
                "Advance podinfo.test canary weight 10",
                EventKind::WeightAdvanced,
            ),
            (
                "Confirm-promotion check promote-gate passed",
                EventKind::PromotionApproved,
            ),
            (
                "Copying podinfo.test template spec to podinfo-primary.test",
                EventKind::PromotionStarted,
            ),
            (
                "Promotion completed! Scaling down podinfo.test",
                EventKind::PromotionCompleted,
            ),
            (
                "Rolling back podinfo.test manual webhook invoked",
                EventKind::RollingBack,
            ),
            (
                "Canary failed! Scaling down podinfo.test",
                EventKind::CanaryFailed,
            ),
            ("Pre-rollout check acceptance-test passed", EventKind::Other),
        ];
        for (msg, kind) in cases {
            assert_eq!(classify(msg), kind, "{msg}");
        }
    }
}
