//! What the audit log records: the action taken and the delivery that caused
//! it. Both are stored and shown as plain strings; these types make sure only
//! known actions and well-formed delivery ids are written.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One line of the audit log says which of these happened to a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditAction {
    Open,
    Close,
    Hold,
    Unhold,
    /// An approval was first used for a revision of a canary.
    Pin,
    /// An approval ran out.
    Expire,
    /// Someone was not allowed to do what they asked.
    Refuse,
    /// A canary started waiting at a closed gate.
    Wait,
    /// A pipeline created a named gate.
    Create,
    /// A wait outlasted its deadline.
    Deadline,
    /// One approval of a gate that needs several; it stays closed.
    Approve,
    /// Break glass: opened past freezes, windows and missing approvals.
    Force,
    /// One approval taken back before it was used (a dismissed review).
    Withdraw,
}

impl AuditAction {
    pub const ALL: [AuditAction; 13] = [
        Self::Open,
        Self::Close,
        Self::Hold,
        Self::Unhold,
        Self::Pin,
        Self::Expire,
        Self::Refuse,
        Self::Wait,
        Self::Create,
        Self::Deadline,
        Self::Approve,
        Self::Force,
        Self::Withdraw,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Close => "close",
            Self::Hold => "hold",
            Self::Unhold => "unhold",
            Self::Pin => "pin",
            Self::Expire => "expire",
            Self::Refuse => "refuse",
            Self::Wait => "wait",
            Self::Create => "create",
            Self::Deadline => "deadline",
            Self::Approve => "approve",
            Self::Force => "force",
            Self::Withdraw => "withdraw",
        }
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an audit action")]
pub struct UnknownAction(pub String);

impl FromStr for AuditAction {
    type Err = UnknownAction;
    fn from_str(s: &str) -> Result<Self, UnknownAction> {
        Self::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownAction(s.to_string()))
    }
}

/// What a person's command arrived in, as the audit log keeps it: the same
/// delivery never applies twice. Each channel's scheme is written here once;
/// the strings are stored, so a scheme never changes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeliveryId(String);

impl DeliveryId {
    /// A GitHub delivery, by the id made of what GitHub signs (the comment or
    /// pull request event's `signed_id`), kept unprefixed as it always was.
    pub fn github(signed_id: &str) -> Self {
        Self(signed_id.to_string())
    }

    /// A Slack button click, by its `click_id` (the trigger id Slack signs).
    pub fn slack_click(click_id: &str) -> Self {
        Self(format!("slack:{click_id}"))
    }

    /// A Slack slash command, by its trigger id.
    pub fn slack_command(trigger_id: &str) -> Self {
        Self(format!("slack:{trigger_id}"))
    }

    /// A Teams activity, by its receipt id (conversation and activity id).
    pub fn teams(receipt_id: &str) -> Self {
        Self(format!("teams:{receipt_id}"))
    }

    /// An id read back from the store, as it was written.
    pub fn stored(text: String) -> Self {
        Self(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The once-key of a job this delivery queues for `purpose` (a reply, a
    /// reaction): queued once however often the delivery is worked.
    pub fn once_key(&self, source: &str, purpose: &str) -> String {
        format!("{source}:{}:{purpose}", self.0)
    }
}

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Serde for fields kept as their text (`ns/name`, a gate path) in stored
/// payloads and API rows, whatever the type's own serde form.
pub mod as_text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer};

    /// A type kept as its text: it writes and parses it, and says why not.
    pub trait Text: Display + FromStr<Err: Display> {}

    impl<T: Display + FromStr<Err: Display>> Text for T {}

    pub fn serialize<T: Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub fn deserialize<'de, T: Text, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        parse(String::deserialize(d)?)
    }

    fn parse<T: Text, E: serde::de::Error>(text: String) -> Result<T, E> {
        text.parse().map_err(E::custom)
    }

    /// An optional value's text, or what `absent` writes when there is none.
    fn serialize_or<T: Display, S: Serializer>(
        value: &Option<T>,
        s: S,
        absent: impl FnOnce(S) -> Result<S::Ok, S::Error>,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.collect_str(v),
            None => absent(s),
        }
    }

    /// The same for an optional field (`null` when absent).
    pub mod option {
        use std::fmt::Display;

        use serde::{Deserialize, Deserializer, Serializer};

        use super::Text;

        pub fn serialize<T: Display, S: Serializer>(
            value: &Option<T>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            super::serialize_or(value, s, S::serialize_none)
        }

        pub fn deserialize<'de, T: Text, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<T>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(super::parse)
                .transpose()
        }
    }

    /// An optional value whose absence is stored as "" (a wait that announces
    /// a named gate has no canary; the field was a plain string before).
    pub mod or_empty {
        use std::fmt::Display;

        use serde::{Deserialize, Deserializer, Serializer};

        use super::Text;

        pub fn serialize<T: Display, S: Serializer>(
            value: &Option<T>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            super::serialize_or(value, s, |s| s.serialize_str(""))
        }

        pub fn deserialize<'de, T: Text, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<T>, D::Error> {
            let text = String::deserialize(d)?;
            Some(text)
                .filter(|t| !t.is_empty())
                .map(super::parse)
                .transpose()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_read_back_as_written() {
        for a in AuditAction::ALL {
            assert_eq!(a.as_str().parse::<AuditAction>(), Ok(a));
            assert_eq!(
                serde_json::to_string(&a).unwrap(),
                format!("\"{}\"", a.as_str())
            );
        }
        assert!("reopen".parse::<AuditAction>().is_err());
    }

    #[test]
    fn delivery_schemes_are_the_stored_ones() {
        assert_eq!(
            DeliveryId::github("comment:1:t:created:ab").as_str(),
            "comment:1:t:created:ab"
        );
        assert_eq!(DeliveryId::slack_click("T1").as_str(), "slack:T1");
        assert_eq!(DeliveryId::slack_command("T2").as_str(), "slack:T2");
        assert_eq!(
            serde_json::to_string(&DeliveryId::slack_click("T1")).unwrap(),
            "\"slack:T1\""
        );
        assert_eq!(
            DeliveryId::github("d").once_key("github", "reply"),
            "github:d:reply"
        );
    }
}
