//! Flagger's canary phases (`CanaryPhase`), as a check or a wait carries
//! them. A phase gatebot does not know is kept as sent: Flagger may add some.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A canary's phase; `Phase::parse("")` is [`Phase::None`] (a check that
/// names none).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Phase {
    #[default]
    None,
    Initializing,
    Initialized,
    Waiting,
    Progressing,
    WaitingPromotion,
    Promoting,
    Finalising,
    Succeeded,
    Failed,
    Terminating,
    Terminated,
    /// Sent by Flagger, unknown here.
    Other(Box<str>),
}

const KNOWN: [(Phase, &str); 12] = [
    (Phase::None, ""),
    (Phase::Initializing, "Initializing"),
    (Phase::Initialized, "Initialized"),
    (Phase::Waiting, "Waiting"),
    (Phase::Progressing, "Progressing"),
    (Phase::WaitingPromotion, "WaitingPromotion"),
    (Phase::Promoting, "Promoting"),
    (Phase::Finalising, "Finalising"),
    (Phase::Succeeded, "Succeeded"),
    (Phase::Failed, "Failed"),
    (Phase::Terminating, "Terminating"),
    (Phase::Terminated, "Terminated"),
];

impl Phase {
    pub fn parse(text: &str) -> Self {
        KNOWN
            .iter()
            .find(|(_, name)| *name == text)
            .map_or_else(|| Self::Other(text.into()), |(p, _)| p.clone())
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Other(text) => text,
            known => KNOWN
                .iter()
                .find(|(p, _)| p == known)
                .map_or("", |(_, name)| name),
        }
    }

    /// Whether the canary is under analysis or about to be promoted: a
    /// rejection then rolls it back.
    pub fn progressing(&self) -> bool {
        matches!(
            self,
            Self::Progressing | Self::WaitingPromotion | Self::Promoting
        )
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Written and read as Flagger's text, so the rows and the API keep their bytes.
impl Serialize for Phase {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Phase {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::parse(&String::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_round_trip_and_unknown_ones_are_kept() {
        for (phase, name) in KNOWN {
            assert_eq!(Phase::parse(name), phase);
            assert_eq!(phase.as_str(), name);
        }
        let new = Phase::parse("Paused");
        assert_eq!(new, Phase::Other("Paused".into()));
        assert_eq!(new.to_string(), "Paused");
        assert!(Phase::parse("WaitingPromotion").progressing());
        assert!(!Phase::parse("Waiting").progressing());
        assert!(!new.progressing());
    }

    #[test]
    fn phases_are_written_as_their_text() {
        for text in ["", "Waiting", "Paused"] {
            let json = serde_json::to_string(&Phase::parse(text)).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            assert_eq!(serde_json::from_str::<Phase>(&json).unwrap().as_str(), text);
        }
    }
}
