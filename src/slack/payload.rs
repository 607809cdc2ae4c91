//! What Slack sends, parsed leniently into our own structs: only the fields we
//! use, every one optional or defaulted, unknown fields and types ignored.
//! (Org-wide installs send `"team": null`, which slack-morphism's typed model rejects.)

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// `null` and a missing field both mean the default.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Interaction {
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    #[serde(deserialize_with = "nullable")]
    pub user: User,
    pub team: Option<Team>,
    pub channel: Option<Channel>,
    pub container: Option<Container>,
    pub message: Option<Message>,
    pub response_url: Option<String>,
    pub trigger_id: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub actions: Vec<Action>,
    /// The signed request time (Unix ms), set by the route from the verified
    /// header; never Slack's to say. None in clicks stored before it was kept.
    pub signed_at: Option<i64>,
    /// The modal submitted (`view_submission`): gatebot's reason modal.
    pub view: Option<View>,
}

/// A submitted modal: what gatebot put in it and what the person typed.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct View {
    pub callback_id: Option<String>,
    pub private_metadata: Option<String>,
    pub state: Option<ViewState>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct ViewState {
    /// block id → action id → the input's value.
    pub values: BTreeMap<String, BTreeMap<String, InputValue>>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct InputValue {
    pub value: Option<String>,
}

/// The reason modal's callback id, and its input's block and action id.
pub const REASON_MODAL: &str = "gatebot_reason";
pub const REASON_INPUT: &str = "reason";

/// What the reason modal carries back in its `private_metadata`: the button
/// pressed, as its message had it, and where to answer the person.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct ModalOrigin {
    #[serde(rename = "a")]
    pub action_id: String,
    #[serde(rename = "v")]
    pub value: String,
    #[serde(rename = "r", default)]
    pub response_url: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct User {
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    pub username: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Team {
    pub id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Channel {
    pub id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Container {
    pub channel_id: Option<String>,
    pub message_ts: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Message {
    pub ts: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Action {
    pub action_id: Option<String>,
    pub value: Option<String>,
    pub action_ts: Option<String>,
}

/// The button ids we put on waiting messages.
pub const APPROVE: &str = "gatebot_approve";
pub const REJECT: &str = "gatebot_reject";

/// What a button's `value` carries: the gate and the wait it was posted for.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct ButtonValue {
    #[serde(rename = "g")]
    pub gate: String,
    #[serde(rename = "w")]
    pub wait_id: i64,
}

/// A click on one of our buttons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Click {
    pub approve: bool,
    pub value: ButtonValue,
}

impl Interaction {
    /// Parses the form body Slack posts: `payload=<url-encoded JSON>`.
    pub fn from_form(body: &[u8]) -> Result<Self, String> {
        let json = form_urlencoded::parse(body)
            .find(|(k, _)| k == "payload")
            .map(|(_, v)| v.into_owned())
            .ok_or("the form has no `payload` field")?;
        serde_json::from_str(&json).map_err(|e| format!("payload: {e}"))
    }

    /// The button pressed, as the reason modal carries it back.
    fn modal_origin(&self) -> Option<ModalOrigin> {
        let view = self.view.as_ref()?;
        if self.kind != "view_submission" || view.callback_id.as_deref() != Some(REASON_MODAL) {
            return None;
        }
        serde_json::from_str(view.private_metadata.as_deref()?).ok()
    }

    /// What the person typed in the reason modal.
    pub fn reason(&self) -> Option<String> {
        let state = self.view.as_ref()?.state.as_ref()?;
        let typed = state
            .values
            .get(REASON_INPUT)?
            .get(REASON_INPUT)?
            .value
            .as_deref()?;
        Some(typed.trim().to_string()).filter(|r| !r.is_empty())
    }

    /// A reason modal submitted with nothing a person reads as a reason:
    /// Slack's `min_length` counts spaces, and `because` alone says nothing.
    pub fn reason_missing(&self) -> bool {
        self.modal_origin().is_some()
            && crate::gate::reason::given(self.reason().as_deref(), |_| false).is_none()
    }

    /// A submitted reason modal as the click it answers: the button pressed,
    /// the reason typed, and the click's `response_url`. Anything else as it is.
    pub fn into_click(mut self) -> Self {
        if let Some(origin) = self.modal_origin() {
            self.actions = vec![Action {
                action_id: Some(origin.action_id),
                value: Some(origin.value),
                action_ts: None,
            }];
            self.response_url = origin.response_url;
        }
        self
    }

    /// The first of our buttons among the actions, if any.
    pub fn click(&self) -> Option<Click> {
        self.actions.iter().find_map(|a| {
            let approve = match a.action_id.as_deref()? {
                APPROVE => true,
                REJECT => false,
                _ => return None,
            };
            let value = serde_json::from_str(a.value.as_deref()?).ok()?;
            Some(Click { approve, value })
        })
    }

    /// Unique per click and equal on Slack's retries of it.
    pub fn click_id(&self) -> String {
        match self.trigger_id.as_deref().filter(|t| !t.is_empty()) {
            Some(t) => t.to_string(),
            None => {
                let ts = self
                    .actions
                    .first()
                    .and_then(|a| a.action_ts.clone())
                    .unwrap_or_default();
                format!("{}-{ts}", self.user.id)
            }
        }
    }

    pub fn channel_id(&self) -> Option<String> {
        self.channel
            .as_ref()
            .and_then(|c| c.id.clone())
            .or_else(|| self.container.as_ref().and_then(|c| c.channel_id.clone()))
            .filter(|c| !c.is_empty())
    }

    pub fn message_ts(&self) -> Option<String> {
        self.message
            .as_ref()
            .and_then(|m| m.ts.clone())
            .or_else(|| self.container.as_ref().and_then(|c| c.message_ts.clone()))
            .filter(|t| !t.is_empty())
    }

    /// How people call the user in messages and the audit log (authorization uses the id).
    pub fn user_label(&self) -> String {
        self.user
            .username
            .clone()
            .or_else(|| self.user.name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| self.user.id.clone())
    }
}

/// The slash command's form fields.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct SlashCommand {
    pub command: String,
    pub text: String,
    pub user_id: String,
    /// Deprecated by Slack and never used to authorize.
    pub user_name: String,
    pub team_id: String,
    pub channel_id: String,
    pub response_url: String,
    pub trigger_id: String,
    pub ssl_check: String,
    /// The signed request time (Unix ms), set by the route, never from the form.
    pub signed_at: Option<i64>,
}

impl SlashCommand {
    pub fn from_form(body: &[u8]) -> Self {
        let mut c = Self::default();
        for (k, v) in form_urlencoded::parse(body) {
            let v = v.into_owned();
            match &*k {
                "command" => c.command = v,
                "text" => c.text = v,
                "user_id" => c.user_id = v,
                "user_name" => c.user_name = v,
                "team_id" => c.team_id = v,
                "channel_id" => c.channel_id = v,
                "response_url" => c.response_url = v,
                "trigger_id" => c.trigger_id = v,
                "ssl_check" => c.ssl_check = v,
                _ => {}
            }
        }
        c
    }

    pub fn user_label(&self) -> String {
        if self.user_name.is_empty() {
            self.user_id.clone()
        } else {
            self.user_name.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn org_wide_installs_parse() {
        let json = r#"{"type":"block_actions","team":null,"enterprise":{"id":"E1"},
            "user":{"id":"W012A3CDE","username":"alice","team_id":null},
            "container":{"type":"view","view_id":"V1"},"is_enterprise_install":true,
            "trigger_id":"t1","actions":[{"action_id":"gatebot_approve","type":"button",
            "value":"{\"g\":\"/gates/promote/acme/shop/pr/42\",\"w\":7}","action_ts":"1.2"}]}"#;
        let i: Interaction = serde_json::from_str(json).unwrap();
        assert!(i.team.is_none());
        assert_eq!(i.user.id, "W012A3CDE");
        let click = i.click().unwrap();
        assert!(click.approve);
        assert_eq!(click.value.wait_id, 7);
        assert_eq!(i.click_id(), "t1");
    }

    #[test]
    fn nulls_and_strangers_are_not_fatal() {
        let i: Interaction =
            serde_json::from_str(r#"{"type":null,"user":null,"actions":null,"new":1}"#).unwrap();
        assert!(i.click().is_none());
        let c = SlashCommand::from_form(b"command=%2Fgatebot&text=promote+42&user_id=U1&x=y");
        assert_eq!(c.text, "promote 42");
        assert_eq!(c.user_id, "U1");
    }
}
