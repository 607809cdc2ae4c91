//! Approvals tied to change requests (the policy's `[change]`). In mode
//! `reference` a command that opens a gate under the rule names an approved
//! change, read from its system before the unit opens; the approval carries
//! its number and link and ends with its window. Mode `create` is
//! `created`'s.

use super::commands::{environment_of, Plan};
use super::{CommandError, Engine};
use crate::change::CallError;
use crate::command::{Command, Invalid, Verb};
use crate::gate::ticket::{ChangeRule, Mode};
use crate::gate::{GateKey, Millis};

/// The change an approval was given under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketPin {
    pub number: String,
    pub link: String,
    /// Its window's end: the approval ends then.
    pub until: Millis,
}

impl TicketPin {
    /// "change CHG0031337 (https://…), window until …", for the reason.
    pub fn describe(&self) -> String {
        format!(
            "change {} ({}), window until {}",
            self.number,
            self.link,
            crate::gate::state::rfc3339(self.until)
        )
    }
}

/// The change a command that opens gates under the rule names, checked
/// with its system: Ok(None) when no gate of `plan` is under the rule.
pub async fn check(
    engine: &Engine,
    plan: &Plan,
    command: &Command,
) -> Result<Result<Option<TicketPin>, Invalid>, CommandError> {
    let settings = engine.settings();
    let Some(rule) = settings
        .change
        .as_ref()
        .filter(|r| r.mode == Mode::Reference)
    else {
        return Ok(Ok(None));
    };
    let Some(key) = covered(rule, engine, &plan.keys) else {
        return Ok(Ok(None));
    };
    let place = environment_of(&settings.environments, key);
    let Some(number) = command.reason().and_then(|text| rule.number_in(text)) else {
        return Ok(Err(Invalid::ChangeRequired {
            verb: Verb::opening(key.kind).to_string(),
            place,
            example: rule.example(),
        }));
    };
    let Some(system) = engine.change_system.get() else {
        return Ok(Err(Invalid::ChangeNotReady(
            "no change system is set up (GATEBOT_CHANGE_USER)".into(),
        )));
    };
    let now = engine.now();
    let answer = match system.read(&number).await {
        Ok(ticket) => match ticket.allows(now, rule.service.as_deref()) {
            Ok(until) => Ok(Some(TicketPin {
                number,
                link: ticket.link,
                until,
            })),
            Err(why) => Err(Invalid::ChangeNotReady(why.0)),
        },
        Err(CallError::NotFound) => Err(Invalid::ChangeNotReady(format!(
            "{} has no change {number}",
            rule.provider.name()
        ))),
        Err(e) => {
            tracing::warn!(change = %number, error = %e, "change not read");
            Err(Invalid::ChangeNotReady(e.to_string()))
        }
    };
    Ok(answer)
}

/// The first gate of `keys` under the rule.
fn covered<'k>(rule: &ChangeRule, engine: &Engine, keys: &'k [GateKey]) -> Option<&'k GateKey> {
    let envs = &engine.settings().environments;
    keys.iter().find(|k| rule.covers_gate(k, envs))
}
