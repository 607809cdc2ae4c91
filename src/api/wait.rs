//! `gatebot wait <gate>`: a pipeline step that blocks until people decide.
//! It asks the API (`GET /api/v1/gates/…`) until the gate opens (exit 0) or
//! is closed, rejected or retired after the wait began (exit 1). A named gate
//! that was never created is an error (exit 2): nobody is told to decide it.

use secrecy::SecretString;
use tokio::time::Instant;

use super::cli::{api_path, exchange, read, NoAnswer, Server};
use super::wire::GateView;
use crate::config::WaitArgs;
use crate::gate::state::rfc3339;
use crate::gate::{GateStatus, Scope};

/// How the wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub approved: bool,
    pub message: String,
}

/// Why one question went unanswered.
enum Failed {
    /// Asking again will not help (a wrong token, an unknown gate).
    Fatal(anyhow::Error),
    Transient(anyhow::Error),
}

pub async fn run(args: &WaitArgs, token: Option<SecretString>) -> anyhow::Result<Decided> {
    let gate = api_path(&args.gate);
    let path = format!("/api/v1/gates/{gate}");
    let server = Server::new(&args.server, token, &args.outbound, "pipeline".into())?;
    let deadline = Instant::now() + args.timeout;
    let mut since: Option<Since> = None;
    let mut last_error = None;
    loop {
        match fetch(server.get(&path)).await {
            Ok(gate) => {
                last_error = None;
                if let Some(decided) = decide(&gate, &mut since) {
                    return Ok(decided);
                }
            }
            Err(Failed::Fatal(e)) => return Err(e),
            Err(Failed::Transient(e)) => {
                // Said once per outage, not at every interval.
                if last_error.is_none() {
                    eprintln!("gatebot: {e:#}; asking again every {:?}", args.interval);
                }
                last_error = Some(e);
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return match last_error {
                Some(e) => Err(e.context(format!("gave up after {:?}", args.timeout))),
                None => Ok(Decided {
                    approved: false,
                    message: format!(
                        "/gates/{gate}: nobody decided within {}",
                        humantime::format_duration(args.timeout)
                    ),
                }),
            };
        }
        tokio::time::sleep(args.interval.min(deadline - now)).await;
    }
}

async fn fetch(req: reqwest::RequestBuilder) -> Result<GateView, Failed> {
    let (status, body) = exchange(req).await.map_err(|e| match e {
        NoAnswer::Unreachable(why) => {
            Failed::Transient(anyhow::anyhow!("cannot reach gatebot ({why})"))
        }
        NoAnswer::CutOff(e) => Failed::Transient(e),
    })?;
    if status.is_success() {
        let view: GateView = read(&body).map_err(Failed::Fatal)?;
        // Every key reads as a closed gate, but a named one exists only once a
        // pipeline created it: waiting on a mistyped name would only time out.
        if matches!(view.gate.key.scope, Scope::Named(_)) && view.named.is_none() {
            return Err(Failed::Fatal(anyhow::anyhow!(
                "{} was never created: a pipeline creates it first (POST /api/v1/gates); check the name",
                view.gate.key
            )));
        }
        return Ok(view);
    }
    let e = anyhow::anyhow!("gatebot answered {status}: {}", body.trim());
    if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
        Err(Failed::Transient(e))
    } else {
        Err(Failed::Fatal(e))
    }
}

/// What counts as a rejection: a close after this point.
#[derive(Debug, Clone, Copy)]
enum Since {
    /// A named gate: anything since its creation.
    Created(i64),
    /// Any other gate: a change newer than the one first seen.
    Change(Option<i64>),
}

/// The decision the gate shows, if any. `since` is set at the first answer.
fn decide(view: &GateView, since: &mut Option<Since>) -> Option<Decided> {
    let key = &view.gate.key;
    let change = view.change();
    let change_at = change.map(|c| c.at);
    let by = || {
        let Some(c) = change else {
            return "? via ?".to_string();
        };
        let mut who = format!("{} via {}", c.by.name, c.by.source);
        if let Some(r) = c.reason.as_deref().filter(|r| !r.is_empty()) {
            who.push_str(&format!(" ({r})"));
        }
        who
    };
    let named = view.named.as_ref();
    if let Some(at) = named.and_then(|n| n.retired_at) {
        return Some(Decided {
            approved: false,
            message: format!("{key} was retired at {}", rfc3339(at)),
        });
    }
    let since = *since.get_or_insert(match named {
        Some(n) => Since::Created(n.created_at),
        None => Since::Change(change_at),
    });
    match &view.gate.status {
        GateStatus::Open(_) => Some(Decided {
            approved: true,
            message: format!("{key} approved by {}", by()),
        }),
        GateStatus::Closed { .. } => {
            let at = change_at?;
            let rejected = match since {
                Since::Created(created) => at >= created,
                Since::Change(first) => first.is_none_or(|f| at > f),
            };
            rejected.then(|| Decided {
                approved: false,
                message: format!("{key} was closed by {} at {}", by(), rfc3339(at)),
            })
        }
        // A hold is a pause: someone may still lift it and approve.
        GateStatus::Held { .. } | GateStatus::Approving(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    const KEY: &str = "/gates/promote/acme/shop/pr/1";

    /// A gate's view as the API answers it, from its gate and named parts.
    fn view(mut gate: Value) -> GateView {
        for list in ["observations", "waits", "audit"] {
            gate[list] = json!([]);
        }
        serde_json::from_value(gate).unwrap()
    }

    fn named(created_at: i64, retired_at: Option<i64>) -> Value {
        json!({"title": null, "links": [], "slack_channel": null, "pr": null,
            "created_at": created_at, "created_by": "pipeline", "retired_at": retired_at})
    }

    #[test]
    fn a_named_gate_rejected_before_the_first_question_counts() {
        let gate = view(json!({"key": "/gates/promote/named/r1", "state": "closed",
            "change": {"by": {"name": "U1", "source": "slack"}, "reason": null, "at": 20},
            "named": named(10, None)}));
        let d = decide(&gate, &mut None).unwrap();
        assert!(!d.approved);
        assert!(
            d.message.contains("closed by U1 via slack"),
            "{}",
            d.message
        );
    }

    #[test]
    fn an_old_close_of_another_gate_is_not_a_rejection() {
        let mut since = None;
        let old = view(
            json!({"key": KEY, "state": "closed", "change": {"by": {"name": "a", "source": "api"}, "reason": null, "at": 5}}),
        );
        assert_eq!(decide(&old, &mut since), None);
        let new = view(
            json!({"key": KEY, "state": "closed", "change": {"by": {"name": "b", "source": "api"}, "reason": null, "at": 6}}),
        );
        assert!(!decide(&new, &mut since).unwrap().approved);
        let held = view(
            json!({"key": KEY, "state": "held", "change": {"by": {"name": "b", "source": "api"}, "reason": null, "at": 7}}),
        );
        assert_eq!(decide(&held, &mut Some(Since::Change(Some(5)))), None);
    }

    #[test]
    fn open_is_approved_and_retired_is_not() {
        let open = view(json!({"key": KEY, "state": "open", "id": "a1", "pins": {},
            "by": {"name": "alice", "source": "github"}, "reason": null, "at": 5, "expires_at": null}));
        let d = decide(&open, &mut None).unwrap();
        assert!(d.approved);
        assert_eq!(d.message, format!("{KEY} approved by alice via github"));
        let retired = view(json!({"key": KEY, "state": "held",
            "change": {"by": {"name": "b", "source": "api"}, "reason": null, "at": 9},
            "named": named(1, Some(9))}));
        assert!(!decide(&retired, &mut None).unwrap().approved);
    }

    #[test]
    fn an_answer_without_a_field_the_wait_reads_is_refused() {
        let answer = json!({"key": KEY, "observations": [], "waits": [], "audit": []});
        let e = serde_json::from_value::<GateView>(answer).unwrap_err();
        assert!(e.to_string().contains("state"), "{e}");
    }
}
