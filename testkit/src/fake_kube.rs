//! A fake Kubernetes API server: the objects a test puts, answered at their
//! API paths with the real JSON shapes (tests/fixtures/kubernetes/), a
//! missing one with the API server's `Status`, and a merge patch applied.
//! `kubeconfig` writes the file gatebot reads to reach it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// The bearer token the kubeconfig carries; anything else is 401.
pub const TOKEN: &str = "fake-service-account-token";

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub body: String,
}

#[derive(Default)]
struct Inner {
    objects: Mutex<HashMap<String, Value>>,
    seen: Mutex<Vec<Seen>>,
    down: AtomicBool,
}

#[derive(Clone)]
pub struct FakeKube {
    pub url: String,
    inner: Arc<Inner>,
}

/// A fixture of tests/fixtures/kubernetes/.
pub fn fixture(name: &str) -> Value {
    let path = crate::repository()
        .join("tests/fixtures/kubernetes")
        .join(name);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

impl FakeKube {
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = Router::new().fallback(serve).with_state(inner.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, inner }
    }

    /// Writes a kubeconfig for this server into `dir`, its context in `namespace`.
    pub fn kubeconfig(&self, dir: &Path, namespace: &str) -> PathBuf {
        write_kubeconfig(dir, namespace, &self.url, "")
    }

    /// A kubeconfig reaching this server over TLS at `url` (a TLS front),
    /// trusting the CA certificate in the file `ca` (`certificate-authority`).
    pub fn kubeconfig_tls(&self, dir: &Path, namespace: &str, url: &str, ca: &Path) -> PathBuf {
        let extra = format!("    certificate-authority: {}\n", ca.display());
        write_kubeconfig(dir, namespace, url, &extra)
    }

    /// Serves `object` at `path` (e.g. `/apis/apps/v1/namespaces/test/deployments/podinfo`).
    pub fn put(&self, path: &str, object: Value) {
        self.inner
            .objects
            .lock()
            .unwrap()
            .insert(path.to_string(), object);
    }

    pub fn remove(&self, path: &str) {
        self.inner.objects.lock().unwrap().remove(path);
    }

    pub fn object(&self, path: &str) -> Option<Value> {
        self.inner.objects.lock().unwrap().get(path).cloned()
    }

    /// Every request answers 503 while down.
    pub fn set_down(&self, down: bool) {
        self.inner.down.store(down, Ordering::SeqCst);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.inner.seen.lock().unwrap().clone()
    }

    /// Requests whose path contains `part`.
    pub fn seen_at(&self, part: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.path.contains(part))
            .collect()
    }

    /// Flagger's example Canary `test/podinfo` and its Deployment running
    /// the image tagged `tag`, with `annotations` on the Deployment.
    pub fn podinfo(&self, tag: &str, annotations: Value) {
        self.put(CANARY, fixture("canary.podinfo.json"));
        let mut deployment = fixture("deployment.podinfo.json");
        deployment["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!(format!("ghcr.io/stefanprodan/podinfo:{tag}"));
        if let Some(extra) = annotations.as_object() {
            let own = deployment["metadata"]["annotations"]
                .as_object_mut()
                .expect("fixture has annotations");
            for (k, v) in extra {
                own.insert(k.clone(), v.clone());
            }
        }
        self.put(DEPLOYMENT, deployment);
    }
}

fn write_kubeconfig(dir: &Path, namespace: &str, url: &str, cluster_extra: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\n{cluster_extra}\
         contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: gatebot\n    namespace: {namespace}\n\
         current-context: fake\nusers:\n- name: gatebot\n  user:\n    token: {TOKEN}\n"
    );
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}

/// Where the fixtures' objects live.
pub const CANARY: &str = "/apis/flagger.app/v1beta1/namespaces/test/canaries/podinfo";
pub const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/test/deployments/podinfo";

async fn serve(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    inner.seen.lock().unwrap().push(Seen {
        method: method.to_string(),
        path: path.clone(),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    if inner.down.load(Ordering::SeqCst) {
        return status(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        );
    }
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer != Some(TOKEN) {
        return status(401, "Unauthorized", "Unauthorized");
    }
    let mut objects = inner.objects.lock().unwrap();
    let Some(object) = objects.get_mut(&path) else {
        let name = path.rsplit('/').next().unwrap_or_default();
        return status(404, "NotFound", &format!("\"{name}\" not found"));
    };
    match method {
        Method::GET => Json(object.clone()).into_response(),
        Method::PATCH => {
            let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
                return status(400, "BadRequest", "the patch is not JSON");
            };
            merge(object, &patch);
            Json(object.clone()).into_response()
        }
        _ => status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method",
        ),
    }
}

/// JSON merge patch (RFC 7386), as the API server applies
/// `application/merge-patch+json`.
fn merge(target: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let own = target.as_object_mut().expect("an object");
    for (k, v) in fields {
        if v.is_null() {
            own.remove(k);
        } else {
            merge(own.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// The API server's `Status` for a failure.
fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    (
        StatusCode::from_u16(code).expect("a status code"),
        Json(body),
    )
        .into_response()
}
