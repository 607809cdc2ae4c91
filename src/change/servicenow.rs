//! ServiceNow's Change Management API (`/api/sn_chg_rest/change`), whose
//! fields each come as `{"value", "display_value"}`.

use reqwest::Method;
use serde_json::{json, Value};

use super::{garbled, text_of, CallError, ChangeClient, Draft};
use crate::gate::ticket::{Decision, Ticket};
use crate::gate::Millis;

/// The states of a change request that end it: Closed and Canceled.
const ENDED: [&str; 2] = ["3", "4"];

/// `close_code` values of ServiceNow's change model.
const SUCCESSFUL: &str = "successful";
const UNSUCCESSFUL: &str = "unsuccessful";

fn field(record: &Value, name: &str, part: &str) -> Option<String> {
    text_of(&record[name][part]).or_else(|| text_of(&record[name]))
}

/// The record of `number`, and its sys_id.
async fn record(client: &ChangeClient, number: &str) -> Result<(Value, String), CallError> {
    let path = format!("/api/sn_chg_rest/change?sysparm_query=number={number}");
    let answer = client.call(Method::GET, &path, None).await?;
    let records = answer["result"]
        .as_array()
        .ok_or_else(|| garbled("a result list"))?;
    let record = match records.as_slice() {
        [] => return Err(CallError::NotFound),
        [one, ..] => one.clone(),
    };
    // The query is the number; a record of another one is not this change.
    if field(&record, "number", "value").as_deref() != Some(number) {
        return Err(CallError::NotFound);
    }
    let sys_id = field(&record, "sys_id", "value").ok_or_else(|| garbled("a sys_id"))?;
    Ok((record, sys_id))
}

pub(super) async fn read(client: &ChangeClient, number: &str) -> Result<Ticket, CallError> {
    let (record, sys_id) = record(client, number).await?;
    let decision = match field(&record, "approval", "value").as_deref() {
        Some("approved") => Decision::Approved,
        Some("rejected") => Decision::Rejected,
        _ => Decision::Pending,
    };
    // 3.0 or "3": the state as a whole number. One that can't be read is
    // taken as ended: an unknown state lets nothing open.
    let state = field(&record, "state", "value").map(|s| s.trim_end_matches(".0").to_string());
    let closed = state
        .as_deref()
        .is_none_or(|s| ENDED.contains(&s) || s.parse::<i64>().is_err());
    let at = |name: &str| field(&record, name, "value").as_deref().and_then(utc);
    let window = at("start_date").zip(at("end_date"));
    let services = ["cmdb_ci", "business_service"]
        .iter()
        .filter_map(|name| field(&record, name, "display_value"))
        .filter(|s| !s.is_empty())
        .collect();
    Ok(Ticket {
        number: number.to_string(),
        link: format!("{}/change_request.do?sys_id={sys_id}", client.base),
        decision,
        closed,
        window,
        services,
    })
}

/// ServiceNow's `2026-12-07 08:00:00`, in UTC as the API's `value` gives it;
/// anything else (an offset, another form) is no time.
fn utc(text: &str) -> Option<Millis> {
    let civil = jiff::civil::DateTime::strptime("%Y-%m-%d %H:%M:%S", text).ok()?;
    let at = jiff::tz::TimeZone::UTC.to_timestamp(civil).ok()?;
    Some(at.as_millisecond())
}

pub(super) async fn create(client: &ChangeClient, draft: &Draft) -> Result<String, CallError> {
    let path = match &client.fields.template {
        Some(template) => format!("/api/sn_chg_rest/change/standard/{template}"),
        None => "/api/sn_chg_rest/change/normal".to_string(),
    };
    let when = |ms| {
        super::timestamp(ms)
            .strftime("%Y-%m-%d %H:%M:%S")
            .to_string()
    };
    let mut body = json!({
        "short_description": draft.summary,
        "description": draft.description,
        "start_date": when(draft.window.0),
        "end_date": when(draft.window.1),
    });
    if let Some(service) = &draft.service {
        body["cmdb_ci"] = json!(service);
    }
    let answer = client.call(Method::POST, &path, Some(&body)).await?;
    field(&answer["result"], "number", "value").ok_or_else(|| garbled("the new change's number"))
}

pub(super) async fn close(
    client: &ChangeClient,
    number: &str,
    successful: bool,
    notes: &str,
) -> Result<(), CallError> {
    let (_, sys_id) = record(client, number).await?;
    let body = json!({
        "state": "3",
        "close_code": if successful { SUCCESSFUL } else { UNSUCCESSFUL },
        "close_notes": notes,
    });
    let path = format!("/api/sn_chg_rest/change/{sys_id}");
    client
        .call(Method::PATCH, &path, Some(&body))
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_apis_times_are_utc() {
        assert_eq!(super::utc("1970-01-01 00:00:01"), Some(1_000));
        assert_eq!(super::utc("2026-12-07 08:00:00"), Some(1_796_630_400_000));
        assert_eq!(super::utc("2026-12-07T08:00:00"), None);
        assert_eq!(super::utc("2026-12-07 08:00:00-10:00"), None);
        assert_eq!(super::utc(""), None);
        assert_eq!(super::utc("next tuesday"), None);
    }
}
