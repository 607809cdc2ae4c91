//! `GET /ui/events`: server-sent events telling open pages that something
//! changed (a gate opened, closed, was held; a wait started). The page then
//! fetches itself and swaps what it shows, with no full reload.
//!
//! Bounded: at most [`super::MAX_LIVE_PAGES`] streams at once per replica, and
//! each ends after a while (the page reconnects at once and refreshes), so an
//! idle connection limit never cuts one mid-event. With several replicas a page
//! hears only the changes its own replica made; it refreshes on reconnecting.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::view::Viewer;
use super::Problem;

pub async fn stream(viewer: Viewer) -> Result<Response, Problem> {
    let Ok(slot) = viewer.web.live_pages.clone().try_acquire_owned() else {
        return Err(Problem::unavailable(
            "too many pages are open on this server: reload by hand",
        ));
    };
    let changes = viewer.web.changes.subscribe();
    let until = Instant::now() + viewer.web.stream_lifetime;
    let hello = Event::default()
        .event("ready")
        .retry(Duration::from_millis(500))
        .data("ready");
    let first = futures_util::stream::once(async move { Ok::<_, Infallible>(hello) });
    let rest = futures_util::stream::unfold(
        (changes, slot, until),
        |(mut changes, slot, until)| async move {
            let event = match tokio::time::timeout_at(until, changes.recv()).await {
                // Time to reconnect.
                Err(_) | Ok(Err(RecvError::Closed)) => return None,
                Ok(Ok(changed)) => Event::default()
                    .event("change")
                    .json_data(&changed)
                    .unwrap_or_else(|_| Event::default().event("change").data("{}")),
                // Fell behind: one refresh covers whatever was missed.
                Ok(Err(RecvError::Lagged(_))) => Event::default().event("change").data("{}"),
            };
            Some((Ok::<_, Infallible>(event), (changes, slot, until)))
        },
    );
    use futures_util::StreamExt;
    Ok(Sse::new(first.chain(rest))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}
