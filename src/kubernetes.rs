//! Reading (and, for one Secret, writing) the cluster gatebot runs in, with
//! kube-rs: a Canary (`flagger.app/v1beta1`), its target (a Deployment or a
//! DaemonSet) and the commit that target runs; and the Secret the GitHub App
//! set-up page fills. In-cluster config, or a kubeconfig
//! (`GATEBOT_KUBECONFIG`, else `KUBECONFIG` or `~/.kube/config`).
//!
//! Objects are read as `DynamicObject`s and only the fields named here are
//! looked at: a newer Flagger or Kubernetes with more fields changes nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::config::KubernetesConfig;
use crate::gate::CanaryRef;

/// The longest one call to the API server may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What the canary's target runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    pub commit: String,
    /// `owner/repo` from the Canary's or the target's annotation, if any.
    pub repository: Option<String>,
}

/// Why the cluster did not say.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{why}")]
pub struct ClusterError {
    pub why: String,
    /// The object asked for is not there (404).
    pub missing: bool,
}

impl ClusterError {
    fn new(why: String) -> Self {
        Self {
            why,
            missing: false,
        }
    }
}

/// A client of the cluster and how to read a revision from it.
pub struct Cluster {
    client: kube::Client,
    settings: KubernetesConfig,
    /// The namespace of the kubeconfig's context, or the pod's own.
    namespace: String,
}

/// The Canary `Cluster::probe` reads: a name no Canary has.
const PROBE_NAME: &str = "gatebot-check-config-probe";

impl Cluster {
    /// Reads the kubeconfig (or the in-cluster config); contacts nothing.
    pub async fn connect(settings: &KubernetesConfig) -> anyhow::Result<Self> {
        let config = match &settings.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path).map_err(|e| {
                    anyhow::anyhow!("GATEBOT_KUBECONFIG: cannot read {}: {e}", path.display())
                })?;
                kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default()).await?
            }
            None => kube::Config::infer().await.map_err(|e| {
                anyhow::anyhow!("no Kubernetes config: not in a cluster and no kubeconfig ({e})")
            })?,
        };
        let namespace = config.default_namespace.clone();
        Ok(Self {
            client: kube::Client::try_from(config)?,
            settings: settings.clone(),
            namespace,
        })
    }

    /// The namespace gatebot runs in (in-cluster), or its kubeconfig's.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The commit `canary`'s target runs, and the repository if annotated.
    pub async fn revision(&self, canary: &CanaryRef) -> Result<Revision, ClusterError> {
        let gvk = GroupVersionKind::gvk("flagger.app", "v1beta1", "Canary");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "canaries");
        let object = self.get(&canary.namespace, &canary.name, &resource).await?;
        same_place(&object, &canary.namespace, &canary.name, "Canary")?;
        let target = target_of(&object, canary)?;
        // Only the target in the Canary's own namespace counts: an object
        // elsewhere, whatever it is annotated with, is not this canary's.
        let target_object = self
            .get(&canary.namespace, &target.name, &target.resource)
            .await?;
        same_place(
            &target_object,
            &canary.namespace,
            &target.name,
            &target.resource.kind,
        )?;
        let commit = commit_of(&target_object, &self.settings).ok_or_else(|| {
            ClusterError::new(format!(
                "{} {}/{} names no commit: annotate it (or its pod template) with {}, or tag its image with the commit",
                target.resource.kind, canary.namespace, target.name, self.settings.commit_annotation
            ))
        })?;
        let key = &self.settings.repository_annotation;
        let repository = annotation(&object, key).or_else(|| annotation(&target_object, key));
        Ok(Revision { commit, repository })
    }

    /// One read-only call that proves the credentials and the permission
    /// the lookup needs: a Canary nobody names, read in gatebot's namespace
    /// (not found is the good answer). What was reached.
    pub async fn probe(&self) -> Result<String, ClusterError> {
        let gvk = GroupVersionKind::gvk("flagger.app", "v1beta1", "Canary");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "canaries");
        match self.get(&self.namespace, PROBE_NAME, &resource).await {
            Ok(_) => Ok(format!("read canaries in {}", self.namespace)),
            Err(e) if e.missing => Ok(format!(
                "may read canaries (tried {}/{PROBE_NAME})",
                self.namespace
            )),
            Err(e) => Err(e),
        }
    }

    async fn get(
        &self,
        namespace: &str,
        name: &str,
        resource: &ApiResource,
    ) -> Result<DynamicObject, ClusterError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, resource);
        let what = || format!("{} {namespace}/{name}", resource.kind);
        match tokio::time::timeout(CALL_TIMEOUT, api.get(name)).await {
            Err(_) => Err(ClusterError::new(format!(
                "the cluster did not answer within {CALL_TIMEOUT:?} for {}",
                what()
            ))),
            Ok(Ok(object)) => Ok(object),
            Ok(Err(e)) => Err(ClusterError {
                why: why(&e, &what(), &resource.plural, &resource.group),
                missing: matches!(&e, kube::Error::Api(status) if status.code == 404),
            }),
        }
    }

    /// Writes `data` into the Secret `name` of gatebot's namespace (the chart
    /// creates it empty and lets gatebot patch that one Secret).
    pub async fn write_secret(
        &self,
        name: &str,
        data: &BTreeMap<String, String>,
    ) -> Result<(), ClusterError> {
        use base64::Engine as _;
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let encoded: BTreeMap<&str, String> = data
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    base64::engine::general_purpose::STANDARD.encode(v),
                )
            })
            .collect();
        let patch = Patch::Merge(serde_json::json!({ "data": encoded }));
        let what = format!("Secret {}/{name}", self.namespace);
        match tokio::time::timeout(
            CALL_TIMEOUT,
            api.patch(name, &PatchParams::default(), &patch),
        )
        .await
        {
            Err(_) => Err(ClusterError::new(format!(
                "the cluster did not answer within {CALL_TIMEOUT:?} for {what}"
            ))),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(ClusterError::new(why(&e, &what, "secrets", ""))),
        }
    }
}

/// A failed call in words an operator can act on.
fn why(e: &kube::Error, what: &str, plural: &str, group: &str) -> String {
    let resource = if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    };
    match e {
        kube::Error::Api(status) if status.code == 404 => {
            format!("{what} is not in the cluster")
        }
        kube::Error::Api(status) if status.code == 401 || status.code == 403 => format!(
            "gatebot may not read {resource} ({}): give its ServiceAccount the chart's kubernetes role",
            status.code
        ),
        kube::Error::Api(status) => format!("the cluster answered {} for {what}", status.code),
        other => format!("the cluster is unreachable for {what}: {other}"),
    }
}

/// The object read is the one asked for: its namespace and name as the
/// request named them (a proxy or an aggregated API could answer otherwise).
fn same_place(
    object: &DynamicObject,
    namespace: &str,
    name: &str,
    kind: &str,
) -> Result<(), ClusterError> {
    let meta = &object.metadata;
    if meta.namespace.as_deref() == Some(namespace) && meta.name.as_deref() == Some(name) {
        return Ok(());
    }
    Err(ClusterError::new(format!(
        "the cluster answered {kind} {namespace}/{name} with {}/{}",
        meta.namespace.as_deref().unwrap_or("-"),
        meta.name.as_deref().unwrap_or("-")
    )))
}

struct Target {
    name: String,
    resource: ApiResource,
}

/// The Canary's `spec.targetRef`, as a resource to read.
fn target_of(canary: &DynamicObject, at: &CanaryRef) -> Result<Target, ClusterError> {
    let target = &canary.data["spec"]["targetRef"];
    let field = |f: &str| target[f].as_str().unwrap_or_default().to_string();
    let (kind, name, api_version) = (field("kind"), field("name"), field("apiVersion"));
    // Flagger reads the target in the Canary's namespace; one naming another
    // namespace is refused rather than read in either.
    let elsewhere = field("namespace");
    if !(elsewhere.is_empty() || elsewhere == at.namespace) {
        return Err(ClusterError::new(format!(
            "canary {at} targets an object in namespace {elsewhere}: only its own namespace's counts"
        )));
    }
    let api_version = if api_version.is_empty() {
        "apps/v1".to_string()
    } else {
        api_version
    };
    let plural = match kind.as_str() {
        "Deployment" => "deployments",
        "DaemonSet" => "daemonsets",
        "" => return Err(ClusterError::new(format!("canary {at} has no spec.targetRef"))),
        other => {
            return Err(ClusterError::new(format!(
                "canary {at} targets a {other}: only a Deployment's or a DaemonSet's commit can be read"
            )))
        }
    };
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let gvk = GroupVersionKind::gvk(group, version, &kind);
    Ok(Target {
        name,
        resource: ApiResource::from_gvk_with_plural(&gvk, plural),
    })
}

fn annotation(object: &DynamicObject, key: &str) -> Option<String> {
    object
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The commit: the annotation on the target, then on its pod template, then
/// the image tag of the container when it looks like a commit.
fn commit_of(target: &DynamicObject, settings: &KubernetesConfig) -> Option<String> {
    let key = &settings.commit_annotation;
    let template = &target.data["spec"]["template"];
    annotation(target, key)
        .or_else(|| {
            template["metadata"]["annotations"][key.as_str()]
                .as_str()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        })
        .or_else(|| {
            let containers = template["spec"]["containers"].as_array()?;
            let container = match &settings.container {
                Some(name) => containers.iter().find(|c| c["name"] == name.as_str())?,
                None => containers.first()?,
            };
            image_commit(container["image"].as_str()?)
        })
}

/// The tag of `image` when it is a commit: 7 to 40 hex digits, not all
/// decimal (a date or a build number is not a commit). A digest is ignored.
pub fn image_commit(image: &str) -> Option<String> {
    let image = image.split('@').next()?;
    let last = image.rsplit('/').next()?;
    let (_, tag) = last.split_once(':')?;
    let tag = tag.to_ascii_lowercase();
    let hex = (7..=40).contains(&tag.len()) && tag.chars().all(|c| c.is_ascii_hexdigit());
    (hex && !tag.chars().all(|c| c.is_ascii_digit())).then_some(tag)
}

#[cfg(test)]
mod tests {
    use super::image_commit;

    #[test]
    fn only_a_commit_like_tag_is_a_commit() {
        let sha = "0f3c2a9e5b7d4c1a8e6f2b3d9c0a1e4f5b6c7d8e";
        assert_eq!(
            image_commit(&format!("ghcr.io/acme/shop:{sha}")),
            Some(sha.into())
        );
        assert_eq!(
            image_commit("registry:5000/shop:0F3C2A9"),
            Some("0f3c2a9".into())
        );
        assert_eq!(
            image_commit("ghcr.io/acme/shop:0f3c2a9@sha256:abc"),
            Some("0f3c2a9".into())
        );
        for not in [
            "ghcr.io/stefanprodan/podinfo:6.0.0",
            "registry:5000/shop",
            "shop:20240101",
            "shop:latest",
            "shop:abc12",
            "shop:v0f3c2a9",
        ] {
            assert_eq!(image_commit(not), None, "{not}");
        }
    }
}
