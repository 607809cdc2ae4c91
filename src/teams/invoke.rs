//! A click on a card's button: an `invoke` activity named
//! `adaptiveCard/action` with the button's verb and the wait it showed.
//!
//! The route checks the button is gatebot's, stores the click as a receipt
//! (once per activity id: a replay is the same receipt), and waits a moment
//! for the inbox to apply it through the one command path. Its answer is
//! what Teams expects of an invoke: the updated card, or the refusal as a
//! message. The inbox applies it with Teams' authorizer, and the card's
//! decision commits with the change it decides.
//!
//! A button's data names its wait and that wait's gate; only the wait id is
//! believed: the gate, canary and revision acted on are the wait's, read
//! from the store, and a button whose gate is not its wait's is refused
//! (crafted: gatebot never renders one).

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::activity::Activity;
use super::card::{self, Offer, APPROVE, HOLD, REJECT};
use super::sink::{self, CardJob};
use crate::command::Command;
use crate::core::authors::PrAuthors;
use crate::core::commands::Subject;
use crate::core::dispatch::{self, Request};
use crate::core::intake::{self, Mark, Replies, Told};
use crate::core::{AppState, Provenance};
use crate::gate::{Actor, DeliveryId, GateKey, Phase, Source};
use crate::http::error::{Reject, Rejected};
use crate::http::receipts::Receipts;
use crate::notify::{Lease, SendError, SinkJob};
use crate::store::{QueueItem, WaitRow};

use super::answers::{name_of, person_of, send_error, TeamsAuthorizer, TeamsDenied};

pub const INVOKE: &str = "invoke";
pub const CARD_ACTION: &str = "adaptiveCard/action";
/// How long the answer waits for the click to be applied: Teams shows an
/// error if an invoke is not answered within a few seconds.
const ANSWER_WITHIN: Duration = Duration::from_secs(3);
/// This process's inbox wakes the answer when it applied a click; another
/// replica's inbox is seen by reading the audit this often.
const POLL_EVERY: Duration = Duration::from_millis(20);

const CARD: &str = "application/vnd.microsoft.card.adaptive";
const MESSAGE: &str = "application/vnd.microsoft.activity.message";

/// What a click asks, checked before it is stored.
struct Click {
    verb: &'static str,
    wait_id: i64,
}

fn click(activity: &Activity) -> Result<Click, String> {
    let action = &activity.value.action;
    if action.kind != "Action.Execute" {
        return Err(format!("the action {:?} is not supported", action.kind));
    }
    let verb = [APPROVE, REJECT, HOLD]
        .into_iter()
        .find(|v| *v == action.verb)
        .ok_or_else(|| format!("the verb {:?} is not one of gatebot's buttons", action.verb))?;
    if action.data.wait_id <= 0 || sink::parse_gate(&action.data.gate).is_none() {
        return Err("the button names no wait of gatebot's".into());
    }
    if activity.id.is_empty() {
        return Err("the activity has no id".into());
    }
    Ok(Click {
        verb,
        wait_id: action.data.wait_id,
    })
}

/// The invoke's error answer, as the Bot Framework SDKs write it; counted
/// as a refusal.
fn bad_request(message: String) -> Response {
    let body = json!({
        "statusCode": 400,
        "type": "application/vnd.microsoft.error",
        "value": {"code": "BadRequest", "message": message},
    });
    let mut response = (StatusCode::BAD_REQUEST, Json(body)).into_response();
    response
        .extensions_mut()
        .insert(Rejected("teams_bad_invoke"));
    response
}

fn answer(kind: &str, value: Value) -> Response {
    Json(json!({"statusCode": 200, "type": kind, "value": value})).into_response()
}

/// Why a click's data does not match its wait, if it does not: the gate a
/// button names must be the gate of the wait it names.
fn mismatch(data_gate: &str, wait: &WaitRow) -> Option<String> {
    let named = sink::parse_gate(data_gate)?;
    (named != wait.gate).then(|| {
        format!(
            "this button names {named}, but its wait {} is at {}: nothing was done",
            wait.id, wait.gate
        )
    })
}

/// The route's part: check the click against its wait, store, wait for the
/// inbox, answer with the card.
pub async fn respond(
    state: &AppState,
    receipts: &Receipts,
    mut activity: Activity,
) -> Result<Response, Reject> {
    if activity.name != CARD_ACTION {
        return Ok(StatusCode::OK.into_response());
    }
    let click = match click(&activity) {
        Ok(click) => click,
        Err(why) => return Ok(bad_request(why)),
    };
    let Some(wait) = state.records.wait(click.wait_id).await? else {
        return Ok(answer(MESSAGE, json!("this wait is no longer known")));
    };
    if let Some(why) = mismatch(&activity.value.action.data.gate, &wait) {
        tracing::warn!(wait = click.wait_id, gate = %activity.value.action.data.gate,
            "a Teams click whose gate is not its wait's: refused");
        return Ok(bad_request(why));
    }
    activity.received_at = Some(state.clock.now_ms());
    super::receipt::store(receipts, &activity).await?;
    let delivery = DeliveryId::teams(&activity.receipt_id());
    let done = applied(state, &delivery).await?;
    if let Some(refusal) = done.iter().find_map(|(action, reason)| {
        (action == "refuse").then(|| reason.clone().unwrap_or_default())
    }) {
        return Ok(answer(MESSAGE, json!(refusal)));
    }
    let posted = state.records.teams_card(click.wait_id).await?;
    let view = sink::view(
        &state.records,
        &state.evidence,
        click.wait_id,
        posted.as_ref(),
        state.clock.now_ms(),
    )
    .await
    .map_err(|e| Reject::unavailable(e.to_string()))?;
    let Some(mut view) = view else {
        return Ok(answer(MESSAGE, json!("this wait is no longer known")));
    };
    if done.is_empty() {
        view.status = Some(card::Status {
            text: format!("{} by {} is being applied", click.verb, activity.from.name),
            color: "warning",
        });
        view.open = false;
    }
    let links = super::links(&state.config);
    Ok(answer(CARD, card::render(&view, &links, Offer::Buttons)))
}

/// What the delivery did, from the audit, once the inbox applied it (or
/// nothing, if it did not within `ANSWER_WITHIN`).
async fn applied(
    state: &AppState,
    delivery: &DeliveryId,
) -> Result<Vec<(String, Option<String>)>, Reject> {
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    loop {
        // Listening before reading, so a click applied in between still wakes us.
        let woken = state.delivery_applied.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let done = state.records.audit_of_delivery(delivery.as_str()).await?;
        if !done.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(done);
        }
        let next = deadline.min(tokio::time::Instant::now() + POLL_EVERY);
        tokio::select! {
            () = &mut woken => {}
            () = tokio::time::sleep_until(next) => {}
        }
    }
}

/// A stored click as the inbox hands it over.
pub struct Stored<'a> {
    pub activity: &'a Activity,
    pub item: &'a QueueItem,
    pub lease: &'a Lease,
    /// Whether answers are posted (the bot's password is set).
    pub replies: bool,
}

/// The inbox's part: the click applied through the one command path, in one
/// unit with what it writes (made here, before the unit): the card's
/// decision when the click decided it, its refresh, the note in its thread
/// when the click applied late (the card shows the decision; only lateness
/// needs saying), and the delivery settled.
pub async fn apply(state: &AppState, authors: &PrAuthors, c: Stored<'_>) -> Result<(), SendError> {
    let (activity, item) = (c.activity, c.item);
    let click = click(activity).map_err(SendError::Permanent)?;
    let store_err = SendError::from;
    let wait = state.records.wait(click.wait_id).await.map_err(store_err)?;
    // The gate is the wait's, never the button's word for it.
    let Some(key) = wait.as_ref().map(|w| w.gate.clone()) else {
        return Err(SendError::Permanent(format!(
            "the wait {} of a stored click is no longer known",
            click.wait_id
        )));
    };
    if let Some(why) = wait
        .as_ref()
        .and_then(|w| mismatch(&activity.value.action.data.gate, w))
    {
        return Err(SendError::Permanent(why));
    }
    let posted = state
        .records
        .teams_card(click.wait_id)
        .await
        .map_err(store_err)?;
    let name = name_of(activity);
    let request = request(state, activity, &key, click.verb, wait.as_ref());
    let authorizer = TeamsAuthorizer {
        state,
        authors,
        aad_object_id: activity.from.aad_object_id.as_deref(),
        name,
        card: over(wait.as_ref(), posted.as_ref()),
    };
    let engine = &state.engine;
    let authorized = dispatch::authorize(engine, &request, &authorizer)
        .await
        .map_err(send_error)?;
    let replies = replies(activity, &click, name, c.replies, item)?;
    let told =
        intake::take_one(engine, "teams", request, authorized, Some(c.lease), replies).await?;
    state.delivery_applied.notify_waiters();
    tracing::info!(from = %name, verb = click.verb, told = ?told, "Teams card click");
    Ok(())
}

/// What a click writes besides its change: the card's decision (not for a
/// hold, which leaves the card open, nor for an approval that only counted),
/// the card's refresh, and the reply in its thread that says a late click was late.
fn replies<'a>(
    activity: &Activity,
    click: &Click,
    name: &str,
    replies: bool,
    item: &'a QueueItem,
) -> Result<Replies<'a>, SendError> {
    let reply = sink::Reply {
        service_url: activity.service_url.clone(),
        conversation_id: activity.conversation.id.clone(),
        reply_to_id: activity.id.clone(),
        text: String::new(),
        clicker: Some(name.to_string()),
        lines: Vec::new(),
    };
    let refresh = CardJob::Refresh {
        wait_id: click.wait_id,
    };
    let decided = (click.verb != HOLD).then(|| Mark::TeamsCard {
        wait_id: click.wait_id,
        verb: click.verb,
        by: name.to_string(),
    });
    Ok(Replies {
        reply: replies
            .then(|| reply.job())
            .transpose()
            .map_err(SendError::from)?,
        shows: Told::late,
        applied: Some(refresh.job(None).map_err(SendError::from)?),
        decided: decided.into_iter().collect(),
        received: Some(item),
        ..Replies::default()
    })
}

/// The command a click means, by whom, for the revision the card showed.
fn request(
    state: &AppState,
    activity: &Activity,
    key: &GateKey,
    verb: &str,
    wait: Option<&WaitRow>,
) -> Request {
    let mut who = Provenance::new(Actor::new(name_of(activity), Source::Teams))
        .person(person_of(state, activity))
        .delivery(DeliveryId::teams(&activity.receipt_id()))
        .written_at(activity.received_at);
    // The card showed one revision of one canary: the click approves that
    // one, never a newer revision that reaches the gate before it asks again.
    if let Some((w, canary)) = wait.and_then(|w| Some((w, w.canary.clone()?))) {
        who = who.revision(canary, w.checksum.clone());
    }
    let reason = activity.value.action.data.reason.as_deref().map(str::trim);
    let reason = reason.filter(|r| !r.is_empty()).map(str::to_string);
    let command = match verb {
        APPROVE => Command::Open {
            kind: key.kind,
            reason,
            force: false,
        },
        REJECT => Command::Reject {
            phase: Some(wait.map_or(Phase::None, |w| w.phase.clone())),
            reason,
        },
        _ => Command::Hold { reason },
    };
    Request {
        place: None,
        command,
        subject: Subject::Gate(key.clone()),
        who,
    }
}

/// A card decided already, or whose wait is over, is refused (once the
/// person may act at all).
fn over(wait: Option<&WaitRow>, posted: Option<&crate::store::TeamsCard>) -> Option<TeamsDenied> {
    if let Some((verb, by, _)) = posted.and_then(|p| p.decided.as_ref()) {
        let done = if verb == APPROVE {
            "approved"
        } else {
            "rejected"
        };
        return Some(TeamsDenied::Decided(format!("{done} by {by}")));
    }
    match wait {
        None => Some(TeamsDenied::Over("the wait is no longer known".into())),
        Some(w) => w
            .outcome
            .as_ref()
            .map(|o| TeamsDenied::Over(format!("the wait is over ({o})"))),
    }
}
