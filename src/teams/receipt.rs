//! An activity stored as a receipt of the inbox (`teams` source) before
//! Teams is answered: once per activity id, so a replay or a redelivery is
//! a success that changes nothing.

use axum::http::StatusCode;

use super::activity::Activity;
use crate::http::error::Reject;
use crate::http::receipts::Receipts;
use crate::store::Delivery;

/// Stored once per activity id: a replay or a redelivery is a success that
/// changes nothing.
pub async fn store(receipts: &Receipts, activity: &Activity) -> Result<(), Reject> {
    let payload = serde_json::to_string(activity).map_err(|e| {
        Reject::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "unencodable",
            format!("cannot store the activity: {e}"),
        )
    })?;
    let delivery = Delivery {
        source: "teams".into(),
        delivery: activity.receipt_id(),
        kind: activity.kind.clone(),
        payload,
    };
    receipts
        .store(delivery)
        .await
        .map(drop)
        .map_err(Reject::unavailable)
}
