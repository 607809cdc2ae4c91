//! Jira Service Management's request API (`/rest/servicedeskapi/request`):
//! the change's status and field values, and its approvals' decisions. The
//! planned window and the affected service are custom fields, named in the
//! policy.

use reqwest::Method;
use serde_json::{json, Value};

use super::{garbled, text_of, CallError, ChangeClient, Draft};
use crate::gate::ticket::{Decision, Ticket};
use crate::gate::Millis;

pub(super) async fn read(client: &ChangeClient, key: &str) -> Result<Ticket, CallError> {
    let request = client
        .call(
            Method::GET,
            &format!("/rest/servicedeskapi/request/{key}"),
            None,
        )
        .await?;
    if request["issueKey"].as_str() != Some(key) {
        return Err(CallError::NotFound);
    }
    let approvals = client
        .call(
            Method::GET,
            &format!("/rest/servicedeskapi/request/{key}/approval"),
            None,
        )
        .await?;
    let decision = decision_of(&approvals)?;
    let value = |id: &Option<String>| {
        let id = id.as_deref()?;
        request["requestFieldValues"]
            .as_array()?
            .iter()
            .find(|f| f["fieldId"].as_str() == Some(id))
            .map(|f| f["value"].clone())
    };
    let at = |id: &Option<String>| {
        value(id)
            .as_ref()
            .and_then(text_of)
            .as_deref()
            .and_then(instant)
    };
    let fields = &client.fields;
    let window = at(&fields.start_field).zip(at(&fields.end_field));
    let services = value(&fields.service_field).map(names).unwrap_or_default();
    let link = request["_links"]["web"]
        .as_str()
        .filter(|l| l.starts_with("https://") || l.starts_with("http://"))
        .map_or_else(|| format!("{}/browse/{key}", client.base), str::to_string);
    Ok(Ticket {
        number: key.to_string(),
        link,
        decision,
        closed: request["currentStatus"]["statusCategory"]
            .as_str()
            .is_some_and(|c| c.eq_ignore_ascii_case("done")),
        window,
        services,
    })
}

/// What the approvals decided: declined by any; approved only when every
/// one on a last page says so (a decision missing or unread is pending).
fn decision_of(approvals: &Value) -> Result<Decision, CallError> {
    let values = approvals["values"]
        .as_array()
        .ok_or_else(|| garbled("a list of approvals"))?;
    let decisions: Vec<&str> = values
        .iter()
        .map(|a| a["finalDecision"].as_str().unwrap_or("pending"))
        .collect();
    // Only a page that says it is the last is all of them.
    let whole = approvals["isLastPage"].as_bool() == Some(true);
    Ok(if decisions.contains(&"declined") {
        Decision::Rejected
    } else if whole && !decisions.is_empty() && decisions.iter().all(|d| *d == "approved") {
        Decision::Approved
    } else {
        Decision::Pending
    })
}

/// A service field's names: one text, or a list of texts or of objects
/// with a name (Affected services) or a value (a select list).
fn names(value: Value) -> Vec<String> {
    let one = |v: &Value| {
        text_of(v)
            .or_else(|| text_of(&v["name"]))
            .or_else(|| text_of(&v["value"]))
    };
    match &value {
        Value::Array(items) => items.iter().filter_map(one).collect(),
        v => one(v).into_iter().collect(),
    }
}

/// Jira's `2026-12-07T08:00:00.000+0000`, or RFC 3339.
fn instant(text: &str) -> Option<Millis> {
    let text = text.trim();
    let parsed = jiff::Timestamp::strptime("%Y-%m-%dT%H:%M:%S%.f%z", text)
        .or_else(|_| text.parse::<jiff::Timestamp>());
    parsed.ok().map(|t| t.as_millisecond())
}

pub(super) async fn create(client: &ChangeClient, draft: &Draft) -> Result<String, CallError> {
    let fields = &client.fields;
    let (Some(desk), Some(kind)) = (&fields.service_desk, &fields.request_type) else {
        return Err(CallError::Refused(
            "[change] names no service_desk and request_type to open changes in".into(),
        ));
    };
    let mut values = json!({
        "summary": draft.summary,
        "description": draft.description,
    });
    let when = |ms| {
        super::timestamp(ms)
            .strftime("%Y-%m-%dT%H:%M:%S%.3f+0000")
            .to_string()
    };
    if let (Some(start), Some(end)) = (&fields.start_field, &fields.end_field) {
        values[start] = json!(when(draft.window.0));
        values[end] = json!(when(draft.window.1));
    }
    let body = json!({
        "serviceDeskId": desk,
        "requestTypeId": kind,
        "requestFieldValues": values,
    });
    let answer = client
        .call(Method::POST, "/rest/servicedeskapi/request", Some(&body))
        .await?;
    answer["issueKey"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| garbled("the new request's key"))
}

/// Takes the change through the transitions its workflow offers toward its
/// end: to implementing, then completed (or failed); one that did not
/// succeed and was never approved is cancelled. Each offered transition is
/// looked up by name, so a site's own ids do not matter.
pub(super) async fn close(
    client: &ChangeClient,
    key: &str,
    successful: bool,
    notes: &str,
) -> Result<(), CallError> {
    let end = if successful { "complete" } else { "fail" };
    for _ in 0..3 {
        let path = format!("/rest/servicedeskapi/request/{key}/transition");
        let offered = client.call(Method::GET, &path, None).await?;
        let offered = offered["values"].as_array().cloned().unwrap_or_default();
        let named = |word: &str| {
            offered.iter().find(|t| {
                t["name"]
                    .as_str()
                    .is_some_and(|n| n.to_ascii_lowercase().starts_with(word))
            })
        };
        // Toward the end, through Implement; a change never approved (no
        // Implement offered yet) is cancelled when it did not succeed.
        let (next, last) = match (named(end), named("implement"), named("cancel")) {
            (Some(t), _, _) => (t, true),
            (None, Some(t), _) => (t, false),
            (None, None, Some(t)) if !successful => (t, true),
            _ => return ended(client, key, end).await,
        };
        let id = next["id"]
            .as_str()
            .ok_or_else(|| garbled("a transition id"))?;
        let body = json!({"id": id, "additionalComment": {"body": notes}});
        client.call(Method::POST, &path, Some(&body)).await?;
        if last {
            return Ok(());
        }
    }
    Ok(())
}

/// Nothing toward the end is offered: done if the request ended already
/// (closed by hand, or by another close); else a workflow gatebot does not
/// know, refused so that it is said.
async fn ended(client: &ChangeClient, key: &str, end: &str) -> Result<(), CallError> {
    match read(client, key).await?.closed {
        true => Ok(()),
        false => Err(CallError::Refused(format!(
            "{key} offers no transition toward {end}, implement or cancel: close it by hand"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn jiras_times_and_service_fields_read() {
        assert_eq!(super::instant("1970-01-01T00:00:01.000+0000"), Some(1_000));
        assert_eq!(super::instant("1970-01-01T01:00:01.000+0100"), Some(1_000));
        assert_eq!(super::instant("1970-01-01T00:00:01Z"), Some(1_000));
        assert_eq!(super::instant("soon"), None);
        assert_eq!(super::names(json!("shop")), ["shop"]);
        assert_eq!(
            super::names(json!([{"name": "shop"}, {"value": "cart"}, 3])),
            ["shop", "cart", "3"]
        );
        assert!(super::names(json!({"id": 1})).is_empty());
    }

    #[test]
    fn approved_only_when_every_approval_says_so() {
        use crate::gate::ticket::Decision;
        let of = |v| super::decision_of(&v).unwrap();
        let table = [
            (
                json!({"values": [{"finalDecision": "approved"}], "isLastPage": true}),
                Decision::Approved,
            ),
            (
                json!({"values": [{"finalDecision": "approved"}, {}], "isLastPage": true}),
                Decision::Pending,
            ),
            (
                json!({"values": [{"finalDecision": "approved"}, {"finalDecision": null}]}),
                Decision::Pending,
            ),
            (
                json!({"values": [{"finalDecision": "approved"}], "isLastPage": "false"}),
                Decision::Pending,
            ),
            (
                json!({"values": [{"finalDecision": "declined"}], "isLastPage": false}),
                Decision::Rejected,
            ),
            (json!({"values": []}), Decision::Pending),
        ];
        for (v, want) in table {
            assert_eq!(of(v.clone()), want, "{v}");
        }
        assert!(super::decision_of(&json!({"values": 3})).is_err());
    }
}
