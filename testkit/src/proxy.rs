//! A small forward proxy for tests of `HTTPS_PROXY`/`HTTP_PROXY`: plain-HTTP
//! requests in absolute form are forwarded, `CONNECT host:port` is tunnelled,
//! and every request is recorded, so a test can tell which calls went through
//! it and which did not.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::net::{TcpListener, TcpStream};

/// One request the proxy was asked to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxied {
    pub method: String,
    /// `http://host:port/path` when forwarded, `host:port` for CONNECT.
    pub target: String,
}

#[derive(Clone)]
pub struct FakeProxy {
    /// `http://127.0.0.1:port`, for `HTTPS_PROXY`/`HTTP_PROXY`.
    pub url: String,
    seen: Arc<Mutex<Vec<Proxied>>>,
}

#[derive(Clone)]
struct Shared {
    seen: Arc<Mutex<Vec<Proxied>>>,
    upstream: reqwest::Client,
}

impl FakeProxy {
    pub async fn start() -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared {
            seen: seen.clone(),
            // Never through a proxy itself, whatever the test's environment says.
            upstream: reqwest::Client::builder().no_proxy().build().unwrap(),
        };
        let app = Router::new().fallback(handle).with_state(shared);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, seen }
    }

    /// Everything asked of the proxy so far, in order.
    pub fn seen(&self) -> Vec<Proxied> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests whose target contains `part`.
    pub fn seen_to(&self, part: &str) -> Vec<Proxied> {
        self.seen()
            .into_iter()
            .filter(|p| p.target.contains(part))
            .collect()
    }
}

async fn handle(State(shared): State<Shared>, req: Request) -> Response {
    let target = req.uri().to_string();
    shared.seen.lock().unwrap().push(Proxied {
        method: req.method().to_string(),
        target: target.clone(),
    });
    if req.method() == Method::CONNECT {
        return tunnel(req, target).await;
    }
    // A request in origin form was not meant for a proxy.
    if req.uri().scheme().is_none() {
        return (StatusCode::BAD_REQUEST, "not a proxy request").into_response();
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 16 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut headers = parts.headers;
    for hop in [
        "host",
        "proxy-connection",
        "connection",
        "proxy-authorization",
    ] {
        headers.remove(hop);
    }
    let sent = shared
        .upstream
        .request(parts.method, target)
        .headers(headers)
        .body(body)
        .send()
        .await;
    match sent {
        Ok(answer) => {
            let mut out = Response::builder().status(answer.status().as_u16());
            for (k, v) in answer.headers() {
                if k != "transfer-encoding" && k != "connection" {
                    out = out.header(k, v);
                }
            }
            match answer.bytes().await {
                Ok(body) => out.body(Body::from(body)).unwrap(),
                Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
            }
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

/// Answers 200 and copies bytes both ways between the client and `authority`.
async fn tunnel(req: Request, authority: String) -> Response {
    let Ok(mut upstream) = TcpStream::connect(&authority).await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    tokio::spawn(async move {
        if let Ok(upgraded) = hyper::upgrade::on(req).await {
            let mut client = hyper_util::rt::TokioIo::new(upgraded);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        }
    });
    StatusCode::OK.into_response()
}
