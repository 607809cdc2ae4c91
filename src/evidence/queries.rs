//! Flagger's built-in metrics, `request-success-rate` and `request-duration`,
//! rendered as Flagger sends them to Prometheus (fluxcd/flagger at 15bd6ad5,
//! `pkg/metrics/observers`), so the numbers beside the buttons are the ones
//! Flagger judges the canary by; and the same queries pointed at the primary,
//! where a provider's metrics can tell the primary's traffic apart.
//!
//! The names in a [`Model`] arrive over an unauthenticated webhook. Rendering
//! refuses any value that is not a plain name (the interval: a Prometheus
//! duration), so no name can close a string and change the query's meaning.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

/// A provider as Flagger's observer factory (`observers/factory.go`) tells
/// them apart: one variant per set of built-in queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Provider {
    Istio,
    Linkerd,
    Nginx,
    Contour,
    Gloo,
    AppMesh,
    Kuma,
    /// `gatewayapi…` and `kubernetes`: Flagger's generic `HttpObserver`.
    GatewayApi,
    Apisix,
    Traefik,
    Skipper,
    Osm,
    Knative,
}

impl Provider {
    /// The observer Flagger picks for a Canary's `spec.provider` (or the
    /// mesh provider): prefixes for `appmesh`, `gloo` and `gatewayapi` (so
    /// `appmesh:v1beta2`, `gatewayapi:v1beta1`), `kubernetes` exactly, and
    /// Istio for anything else, the empty name included.
    pub(crate) fn from_flagger(provider: &str) -> Provider {
        match provider {
            p if p.starts_with("appmesh") => Provider::AppMesh,
            "linkerd" => Provider::Linkerd,
            "istio" => Provider::Istio,
            "contour" => Provider::Contour,
            p if p.starts_with("gloo") => Provider::Gloo,
            "nginx" => Provider::Nginx,
            p if p == "kubernetes" || p.starts_with("gatewayapi") => Provider::GatewayApi,
            "skipper" => Provider::Skipper,
            "traefik" => Provider::Traefik,
            "osm" => Provider::Osm,
            "kuma" => Provider::Kuma,
            "apisix" => Provider::Apisix,
            "knative" => Provider::Knative,
            _ => Provider::Istio,
        }
    }

    /// Flagger's name for the provider; [`Provider::from_flagger`] reads it back.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Provider::Istio => "istio",
            Provider::Linkerd => "linkerd",
            Provider::Nginx => "nginx",
            Provider::Contour => "contour",
            Provider::Gloo => "gloo",
            Provider::AppMesh => "appmesh",
            Provider::Kuma => "kuma",
            Provider::GatewayApi => "gatewayapi",
            Provider::Apisix => "apisix",
            Provider::Traefik => "traefik",
            Provider::Skipper => "skipper",
            Provider::Osm => "osm",
            Provider::Knative => "knative",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Flagger's two built-in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Builtin {
    /// `request-success-rate`: percent of requests not answered with a 5xx.
    SuccessRate,
    /// `request-duration`: the 99th percentile, see [`duration_ms`].
    Duration,
}

/// Whose traffic a query measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Side {
    Canary,
    Primary,
}

/// Flagger's `MetricTemplateModel`: what a template's functions return.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Model {
    pub(crate) name: String,
    pub(crate) namespace: String,
    /// `spec.targetRef.name`, the canary's workload.
    pub(crate) target: String,
    /// `spec.service.name`, else the target's name.
    pub(crate) service: String,
    /// `spec.ingressRef.name`, else the target's name.
    pub(crate) ingress: String,
    /// `spec.routeRef.name`, else the target's name (Knative: the latest revision).
    pub(crate) route: String,
    /// The metric's interval, the range of every rate: `1m`, `30s`.
    pub(crate) interval: String,
    /// `templateVariables`, read with `{{ index variables "key" }}`.
    pub(crate) variables: BTreeMap<String, String>,
}

impl Model {
    /// The model Flagger's `toMetricModel` builds for a Canary that sets no
    /// service name, ingress or route reference: all three are the target.
    /// Set the fields after when the Canary does set them.
    pub(crate) fn canary(name: &str, namespace: &str, target: &str, interval: &str) -> Model {
        Model {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            target: target.to_owned(),
            service: target.to_owned(),
            ingress: target.to_owned(),
            route: target.to_owned(),
            interval: interval.to_owned(),
            variables: BTreeMap::new(),
        }
    }
}

/// The primary's model: Flagger names the primary workload `<target>-primary`
/// and its Service `<service>-primary`. Ingress and route stay: no provider's
/// query names a primary ingress or route (nginx's and Skipper's primary
/// traffic passes the same ingresses, see [`query`]).
pub(crate) fn primary(model: &Model) -> Model {
    let mut primary = model.clone();
    primary.target.push_str("-primary");
    primary.service.push_str("-primary");
    primary
}

/// The query Flagger sends for `builtin`, or its counterpart for the primary.
/// `Ok(None)`: the provider's metrics cannot tell the primary's traffic from
/// the canary's.
pub(crate) fn query(
    provider: Provider,
    builtin: Builtin,
    side: Side,
    model: &Model,
) -> Result<Option<String>, RenderError> {
    let text = template(provider, builtin);
    let model = as_flagger_sees(provider, model);
    match (side, primary_rule(provider)) {
        (Side::Canary, _) => render(text, &model).map(Some),
        (Side::Primary, PrimaryRule::Rename) => render(text, &primary(&model)).map(Some),
        (Side::Primary, PrimaryRule::Swap(canary, primary)) => {
            render(&text.replace(canary, primary), &model).map(Some)
        }
        (Side::Primary, PrimaryRule::Unsupported) => Ok(None),
    }
}

/// How a provider's primary query is made from the canary's.
enum PrimaryRule {
    /// The same template, rendered against [`primary`]'s model.
    Rename,
    /// The template with Flagger's fixed canary selector swapped for the
    /// primary's, rendered against the canary's model.
    Swap(&'static str, &'static str),
    /// No series of the provider's metric is the primary's alone.
    Unsupported,
}

fn primary_rule(provider: Provider) -> PrimaryRule {
    match provider {
        // `destination_workload` is the primary Deployment, `<target>-primary`.
        Provider::Istio => PrimaryRule::Rename,
        // `deployment` is the primary Deployment, `<target>-primary`.
        Provider::Linkerd => PrimaryRule::Rename,
        // Pods are named after their Deployment: `<target>-primary-<hash>-<id>`.
        Provider::AppMesh | Provider::GatewayApi => PrimaryRule::Rename,
        // `destination_name` of kind Deployment is `<target>-primary`.
        Provider::Osm => PrimaryRule::Rename,
        // Same ingress: ingress-nginx sets `canary` only on requests it sent to the canary.
        Provider::Nginx => PrimaryRule::Swap(r#"canary!="""#, r#"canary="""#),
        // Flagger's HTTPProxy sends the rest to `<service>-primary`: cluster `<ns>_…-primary_…`.
        Provider::Contour => PrimaryRule::Swap("{{ service }}-canary_", "{{ service }}-primary_"),
        // Flagger's other upstream: `…-primaryupstream-<port>` beside `…-canaryupstream-…`.
        Provider::Gloo => PrimaryRule::Swap("-canaryupstream-", "-primaryupstream-"),
        // The TrafficRoute's other split is the Kuma service `…-primary_<ns>_svc_<port>`.
        Provider::Kuma => PrimaryRule::Swap("{{ target }}-canary_", "{{ target }}-primary_"),
        // The TraefikService's other weighted service: Traefik's `<ns>-…-primary-<port>`.
        Provider::Traefik => PrimaryRule::Swap("{{ target }}-canary-", "{{ target }}-primary-"),
        // The canary ingress's other backend is `<service>-primary`, route `…__<service>_primary`.
        Provider::Skipper => PrimaryRule::Swap("__%s_canary(", "__%s_primary("),
        // One ApisixRoute carries both backends and its metrics have no backend label.
        Provider::Apisix => PrimaryRule::Unsupported,
        // The primary is a revision named only in the Knative Service's annotation.
        Provider::Knative => PrimaryRule::Unsupported,
    }
}

/// The model as the provider's observer renders it: Skipper's observer
/// first turns every non-word character into `_` (`encodeModelForSkipper`),
/// as Skipper does in its route ids.
fn as_flagger_sees(provider: Provider, model: &Model) -> Cow<'_, Model> {
    if provider != Provider::Skipper {
        return Cow::Borrowed(model);
    }
    let mut encoded = model.clone();
    for field in [
        &mut encoded.ingress,
        &mut encoded.name,
        &mut encoded.namespace,
        &mut encoded.service,
        &mut encoded.target,
    ] {
        *field = field
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
    }
    Cow::Owned(encoded)
}

/// A `request-duration` value in milliseconds, as Flagger converts it:
/// the generic observer's query is in seconds (`value*1000`), nginx, Traefik
/// and Skipper multiply in the query, the others are in milliseconds. Whole
/// milliseconds, truncated as Go's `int64(…)` does, so the number is the one
/// Flagger compares with the threshold.
pub(crate) fn duration_ms(provider: Provider, value: f64) -> f64 {
    match provider {
        Provider::GatewayApi => (value * 1000.0).trunc(),
        _ => value.trunc(),
    }
}

/// Flagger's query templates, verbatim: a Go map of two raw strings.
struct Queries {
    success_rate: &'static str,
    duration: &'static str,
}

/// Flagger's template for `builtin`, as in its source (Go `text/template`).
/// Skipper's expects the model [`query`] encodes for it.
pub(crate) fn template(provider: Provider, builtin: Builtin) -> &'static str {
    let queries = match provider {
        Provider::Istio => ISTIO,
        Provider::Linkerd => LINKERD,
        Provider::Nginx => NGINX,
        Provider::Contour => CONTOUR,
        Provider::Gloo => GLOO,
        Provider::AppMesh => APP_MESH,
        Provider::Kuma => KUMA,
        Provider::GatewayApi => HTTP,
        Provider::Apisix => APISIX,
        Provider::Traefik => TRAEFIK,
        Provider::Skipper => SKIPPER,
        Provider::Osm => OSM,
        Provider::Knative => KNATIVE,
    };
    match builtin {
        Builtin::SuccessRate => queries.success_rate,
        Builtin::Duration => queries.duration,
    }
}

/// `pkg/metrics/observers/skipper.go`, `routePattern`: both Skipper
/// templates start with it.
macro_rules! skipper_route_pattern {
    () => {
        r#"{{- $route := printf "kube(ew)?_%s__%s_canary__.*__%s_canary(_[0-9]+)?" namespace ingress service }}"#
    };
}

/// `pkg/metrics/observers/istio.go`, `istioQueries`.
const ISTIO: Queries = Queries {
    success_rate: r#"
	sum(
		rate(
			istio_requests_total{
				reporter="destination",
				destination_workload_namespace="{{ namespace }}",
				destination_workload=~"{{ target }}",
				response_code!~"5.*"
			}[{{ interval }}]
		)
	) 
	/ 
	sum(
		rate(
			istio_requests_total{
				reporter="destination",
				destination_workload_namespace="{{ namespace }}",
				destination_workload=~"{{ target }}"
			}[{{ interval }}]
		)
	) 
	* 100"#,
    duration: r#"
	histogram_quantile(
		0.99,
		sum(
			rate(
				istio_request_duration_milliseconds_bucket{
					reporter="destination",
					destination_workload_namespace="{{ namespace }}",
					destination_workload=~"{{ target }}"
				}[{{ interval }}]
			)
		) by (le)
	)"#,
};

/// `pkg/metrics/observers/linkerd.go`, `linkerdQueries`.
const LINKERD: Queries = Queries {
    success_rate: r#"
	sum(
		rate(
			response_total{
				namespace="{{ namespace }}",
				deployment=~"{{ target }}",
				classification!="failure",
				direction="inbound"
			}[{{ interval }}]
		)
	) 
	/ 
	sum(
		rate(
			response_total{
				namespace="{{ namespace }}",
				deployment=~"{{ target }}",
				direction="inbound"
			}[{{ interval }}]
		)
	) 
	* 100"#,
    duration: r#"
	histogram_quantile(
		0.99,
		sum(
			rate(
				response_latency_ms_bucket{
					namespace="{{ namespace }}",
					deployment=~"{{ target }}",
					direction="inbound"
				}[{{ interval }}]
			)
		) by (le)
	)"#,
};

/// `pkg/metrics/observers/nginx.go`, `nginxQueries`.
const NGINX: Queries = Queries {
    success_rate: r#"
	sum(
		rate(
			nginx_ingress_controller_requests{
				namespace="{{ namespace }}",
				ingress="{{ ingress }}",
				canary!="",
				status!~"5.*"
			}[{{ interval }}]
		)
	) 
	/ 
	sum(
		rate(
			nginx_ingress_controller_requests{
				namespace="{{ namespace }}",
				ingress="{{ ingress }}",
				canary!=""
			}[{{ interval }}]
		)
	) 
	* 100"#,
    duration: r#"
	sum(
		rate(
			nginx_ingress_controller_response_duration_seconds_sum{
				namespace="{{ namespace }}",
				ingress="{{ ingress }}",
				canary!=""
			}[{{ interval }}]
		)
	) 
	/ 
	sum(
		rate(
			nginx_ingress_controller_response_duration_seconds_count{
				namespace="{{ namespace }}",
				ingress="{{ ingress }}",
				canary!=""
			}[{{ interval }}]
		)
	) 
	* 1000"#,
};

/// `pkg/metrics/observers/contour.go`, `contourQueries`.
const CONTOUR: Queries = Queries {
    success_rate: r#"
	sum(
		rate(
			envoy_cluster_upstream_rq{
				envoy_cluster_name=~"{{ namespace }}_{{ service }}-canary_[0-9a-zA-Z-]+",
				envoy_response_code!~"5.*"
			}[{{ interval }}]
		)
	) 
	/ 
	sum(
		rate(
			envoy_cluster_upstream_rq{
				envoy_cluster_name=~"{{ namespace }}_{{ service }}-canary_[0-9a-zA-Z-]+",
			}[{{ interval }}]
		)
	) 
	* 100"#,
    duration: r#"
	histogram_quantile(
		0.99,
		sum(
			rate(
				envoy_cluster_upstream_rq_time_bucket{
					envoy_cluster_name=~"{{ namespace }}_{{ service }}-canary_[0-9a-zA-Z-]+",
				}[{{ interval }}]
			)
		) by (le)
	)"#,
};

/// `pkg/metrics/observers/gloo.go`, `glooQueries`.
const GLOO: Queries = Queries {
    success_rate: r#"
	sum(
		rate(
			envoy_cluster_upstream_rq{
				envoy_cluster_name=~"{{ namespace }}-{{ target }}-canaryupstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+",
				envoy_response_code!~"5.*"
			}[{{ interval }}]
		)
	) 
	/ 
	sum(
		rate(
			envoy_cluster_upstream_rq{
				envoy_cluster_name=~"{{ namespace }}-{{ target }}-canaryupstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+",
			}[{{ interval }}]
		)
	) 
	* 100"#,
    duration: r#"
	histogram_quantile(
		0.99,
		sum(
			rate(
				envoy_cluster_upstream_rq_time_bucket{
					envoy_cluster_name=~"{{ namespace }}-{{ target }}-canaryupstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+",
				}[{{ interval }}]
			)
		) by (le)
	)"#,
};

/// `pkg/metrics/observers/appmesh.go`, `appMeshQueries`.
const APP_MESH: Queries = Queries {
    success_rate: r#"
	sum(
		rate(
			envoy_cluster_upstream_rq{
				kubernetes_namespace="{{ namespace }}",
				kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)",
				envoy_response_code!~"5.*"
			}[{{ interval }}]
		)
	) 
	/ 
	sum(
		rate(
			envoy_cluster_upstream_rq{
				kubernetes_namespace="{{ namespace }}",
				kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"
			}[{{ interval }}]
		)
	) 
	* 100"#,
    duration: r#"
	histogram_quantile(
		0.99,
		sum(
			rate(
				envoy_cluster_upstream_rq_time_bucket{
					kubernetes_namespace="{{ namespace }}",
					kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"
				}[{{ interval }}]
			)
		) by (le)
	)"#,
};

/// `pkg/metrics/observers/kuma.go`, `kumaQueries`.
const KUMA: Queries = Queries {
    success_rate: r#"
	sum(
		rate(
			envoy_cluster_upstream_rq{
				service=~"{{ target }}-canary_{{ namespace }}_svc_[0-9a-zA-Z-]+",
				envoy_response_code!~"5.*"
			}[{{ interval }}]
		)
	) 
	/ 
	sum(
		rate(
			envoy_cluster_upstream_rq{
				service=~"{{ target }}-canary_{{ namespace }}_svc_[0-9a-zA-Z-]+",
			}[{{ interval }}]
		)
	) 
	* 100"#,
    duration: r#"
	histogram_quantile(
		0.99,
		sum(
			rate(
				envoy_cluster_upstream_rq_time_bucket{
					service=~"{{ target }}-canary_{{ namespace }}_svc_[0-9a-zA-Z-]+",
				}[{{ interval }}]
			)
		) by (le)
	)"#,
};

/// `pkg/metrics/observers/http.go`, `httpQueries`.
const HTTP: Queries = Queries {
    success_rate: r#"
	sum(
		rate(
			http_request_duration_seconds_count{
				kubernetes_namespace="{{ namespace }}",
				kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)",
				status!~"5.*"
			}[{{ interval }}]
		)
	) 
	/ 
	sum(
		rate(
			http_request_duration_seconds_count{
				kubernetes_namespace="{{ namespace }}",
				kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"
			}[{{ interval }}]
		)
	) 
	* 100"#,
    duration: r#"
	histogram_quantile(
		0.99,
		sum(
			rate(
				http_request_duration_seconds_bucket{
					kubernetes_namespace="{{ namespace }}",
					kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"
				}[{{ interval }}]
			)
		) by (le)
	)"#,
};

/// `pkg/metrics/observers/apisix.go`, `apisixQueries`.
const APISIX: Queries = Queries {
    success_rate: r#"
	sum(
		rate(
			apisix_http_status{
				route=~"{{ namespace }}_{{ route }}-{{ target }}-canary_.+",
				code!~"5.."
			}[{{ interval }}]
		)
	)
	/
	sum(
		rate(
			apisix_http_status{
				route=~"{{ namespace }}_{{ route }}-{{ target }}-canary_.+"
			}[{{ interval }}]
		)
	) * 100"#,
    duration: r#"
	histogram_quantile(
		0.99, 
		sum(
			rate(
				apisix_http_latency_bucket{
					type=~"request",
					route=~"{{ namespace }}_{{ route }}-{{ target }}-canary_.+"
				}[{{ interval }}]
			)
		) by (le)
	)"#,
};

/// `pkg/metrics/observers/traefik.go`, `traefikQueries`.
const TRAEFIK: Queries = Queries {
    success_rate: r#"
	sum(
		rate(
			traefik_service_request_duration_seconds_bucket{
				service=~"{{ namespace }}-{{ target }}-canary-[0-9a-zA-Z-]+@kubernetescrd",
				code!~"5..",
				le="+Inf"
			}[{{ interval }}]
		)
	)
	/
	sum(
		rate(
			traefik_service_request_duration_seconds_bucket{
				service=~"{{ namespace }}-{{ target }}-canary-[0-9a-zA-Z-]+@kubernetescrd",
				le="+Inf"
			}[{{ interval }}]
		)
	) * 100"#,
    duration: r#"
	histogram_quantile(
		0.99,
		sum(
			rate(
				traefik_service_request_duration_seconds_bucket{
					service=~"{{ namespace }}-{{ target }}-canary-[0-9a-zA-Z-]+@kubernetescrd"
				}[{{ interval }}]
			)
		) by (le)
	) * 1000"#,
};

/// `pkg/metrics/observers/skipper.go`, `skipperQueries`.
const SKIPPER: Queries = Queries {
    success_rate: concat!(
        skipper_route_pattern!(),
        r#"
	sum(rate(skipper_response_duration_seconds_bucket{route=~"{{ $route }}",code!~"5..",le="+Inf"}[{{ interval }}])) / 
	sum(rate(skipper_response_duration_seconds_bucket{route=~"{{ $route }}",le="+Inf"}[{{ interval }}])) * 100"#
    ),
    duration: concat!(
        skipper_route_pattern!(),
        r#"
	sum(rate(skipper_serve_route_duration_seconds_sum{route=~"{{ $route }}"}[{{ interval }}])) / 
	sum(rate(skipper_serve_route_duration_seconds_count{route=~"{{ $route }}"}[{{ interval }}])) * 1000"#
    ),
};

/// `pkg/metrics/observers/osm.go`, `osmQueries`.
const OSM: Queries = Queries {
    success_rate: r#"
    sum(
        rate(
            osm_request_total{
				destination_namespace="{{ namespace }}",
				destination_kind="Deployment",
				destination_name="{{ target }}",
				response_code!~"5.*"
            }[{{ interval }}]
        )
    )
    /
    sum(
        rate(
            osm_request_total{
				destination_namespace="{{ namespace }}",
				destination_kind="Deployment",
				destination_name="{{ target }}"
            }[{{ interval }}]
        )
    )
	* 100"#,
    duration: r#"
	histogram_quantile(
		0.99,
		sum(
		  rate(
			osm_request_duration_ms_bucket{
				destination_namespace="{{ namespace }}",
				destination_kind="Deployment",
				destination_name="{{ target }}"
			}[{{ interval }}]
		  )
		) by (le)
	)"#,
};

/// `pkg/metrics/observers/knative.go`, `knativeQueries`.
const KNATIVE: Queries = Queries {
    success_rate: r#"
	sum(
		rate(
			envoy_cluster_upstream_rq{
				envoy_cluster_name=~"{{ namespace }}/{{ route }}",
				envoy_response_code!~"5.*"
			}[{{ interval }}]
		)
	) 
	/ 
	sum(
		rate(
			envoy_cluster_upstream_rq{
				envoy_cluster_name=~"{{ namespace }}/{{ route }}",
			}[{{ interval }}]
		)
	) 
	* 100"#,
    duration: r#"
	histogram_quantile(
		0.99,
		sum(
			rate(
				envoy_cluster_upstream_rq_time_bucket{
					envoy_cluster_name=~"{{ namespace }}/{{ route }}",
				}[{{ interval }}]
			)
		) by (le)
	)"#,
};

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RenderError {
    /// A `{{` without its `}}`, at this byte of the template.
    Unclosed(usize),
    /// An action outside the small part of Go templates supported here.
    Malformed(String),
    /// A function that is not one of the model's.
    UnknownFunction(String),
    /// `index variables "key"` with no such key.
    MissingVariable(String),
    /// The named value is not a plain name (or duration). The value itself
    /// is untrusted, so it is not repeated.
    Unsafe(String),
}

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenderError::Unclosed(at) => write!(f, "unclosed action at byte {at}"),
            RenderError::Malformed(why) => write!(f, "unsupported template action: {why}"),
            RenderError::UnknownFunction(name) => write!(f, "function {name:?} not defined"),
            RenderError::MissingVariable(key) => write!(f, "map has no entry for key {key:?}"),
            RenderError::Unsafe(what) => {
                write!(
                    f,
                    "{what} is not a plain name or duration, refusing to query it"
                )
            }
        }
    }
}

impl std::error::Error for RenderError {}

/// Whether `s` can stand in a PromQL label matcher as it is: a non-empty
/// Kubernetes-style name, `[A-Za-z0-9._-]`, no longer than any Kubernetes
/// name. Nothing in it can end the quoted string.
pub(crate) fn label_safe(s: &str) -> bool {
    (1..=253).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether `s` is a Prometheus duration: numbered units from largest to
/// smallest, each at most once (`1m`, `30s`, `1h30m`, `500ms`).
fn prometheus_duration(s: &str) -> bool {
    const UNITS: [&str; 7] = ["y", "w", "d", "h", "m", "s", "ms"];
    let mut rest = s;
    let mut smallest_seen = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let letters = rest[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        let unit = &rest[digits..digits + letters];
        match UNITS.iter().position(|u| *u == unit) {
            Some(at) if digits > 0 && at >= smallest_seen => smallest_seen = at + 1,
            _ => return false,
        }
        rest = &rest[digits + letters..];
    }
    !s.is_empty()
}

/// Renders `template` as Flagger's `RenderQuery` and `trimQuery` do: the
/// model's functions (`{{ target }}`, `{{ index variables "key" }}`, and the
/// `$var := printf "…" …` Skipper's templates use), then every run of
/// whitespace as one space. Every value put in must be [`label_safe`], the
/// interval a Prometheus duration.
pub(crate) fn render(template: &str, model: &Model) -> Result<String, RenderError> {
    let mut scope = Scope {
        model,
        vars: BTreeMap::new(),
    };
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        push_text(&mut out, &rest[..open], trim_next);
        let at = template.len() - rest.len() + open;
        let action = Action::parse(&rest[open + 2..]).ok_or(RenderError::Unclosed(at))?;
        if action.trim_before {
            let kept = out.trim_end_matches(is_space).len();
            out.truncate(kept);
        }
        scope.run(action.body, &mut out)?;
        trim_next = action.trim_after;
        rest = action.after;
    }
    push_text(&mut out, rest, trim_next);
    Ok(collapse(&out))
}

/// Go's `trimQuery`: each run of `\s` (space, `\t`, `\n`, `\f`, `\r`) as one space.
fn collapse(query: &str) -> String {
    let mut out = String::with_capacity(query.len());
    let mut in_space = false;
    for c in query.chars() {
        if c.is_ascii_whitespace() {
            if !in_space {
                out.push(' ');
            }
            in_space = true;
        } else {
            out.push(c);
            in_space = false;
        }
    }
    out
}

/// The white space Go templates trim at `{{-` and `-}}`.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn push_text(out: &mut String, text: &str, trim_start: bool) {
    if trim_start {
        out.push_str(text.trim_start_matches(is_space));
    } else {
        out.push_str(text);
    }
}

/// One `{{ … }}`, its trim markers taken off.
struct Action<'t> {
    body: &'t str,
    after: &'t str,
    trim_before: bool,
    trim_after: bool,
}

impl<'t> Action<'t> {
    /// `s` starts just after `{{`; `None` when the action is not closed.
    fn parse(s: &'t str) -> Option<Self> {
        let close = find_close(s)?;
        let mut body = &s[..close];
        let trim_before = body.starts_with('-') && body[1..].starts_with(is_space);
        if trim_before {
            body = &body[1..];
        }
        let trim_after = body.ends_with('-') && body[..body.len() - 1].ends_with(is_space);
        if trim_after {
            body = &body[..body.len() - 1];
        }
        Some(Action {
            body,
            after: &s[close + 2..],
            trim_before,
            trim_after,
        })
    }
}

/// The byte offset of the `}}` that closes an action, skipping quoted strings.
fn find_close(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut quote = None;
    let mut i = 0;
    while i < bytes.len() {
        match (quote, bytes[i]) {
            (Some(b'"'), b'\\') => i += 1,
            (Some(q), b) if b == q => quote = None,
            (Some(_), _) => {}
            (None, b @ (b'"' | b'`')) => quote = Some(b),
            (None, b'}') if bytes.get(i + 1) == Some(&b'}') => return Some(i),
            (None, _) => {}
        }
        i += 1;
    }
    None
}

enum Token<'t> {
    Word(&'t str),
    Text(String),
    Declare,
}

fn malformed(why: impl Into<String>) -> RenderError {
    RenderError::Malformed(why.into())
}

fn tokens(body: &str) -> Result<Vec<Token<'_>>, RenderError> {
    let mut out = Vec::new();
    let mut rest = body.trim_start_matches(is_space);
    while let Some(first) = rest.chars().next() {
        let (token, after) = match first {
            '"' => quoted(rest)?,
            '`' => {
                let end = rest[1..]
                    .find('`')
                    .ok_or_else(|| malformed("unterminated raw string"))?;
                (Token::Text(rest[1..=end].to_owned()), &rest[end + 2..])
            }
            _ => {
                let end = rest
                    .find(|c| is_space(c) || c == '"' || c == '`')
                    .unwrap_or(rest.len());
                let word = &rest[..end];
                let token = if word == ":=" {
                    Token::Declare
                } else {
                    Token::Word(word)
                };
                (token, &rest[end..])
            }
        };
        out.push(token);
        rest = after.trim_start_matches(is_space);
    }
    Ok(out)
}

/// A Go interpreted string at the start of `s`, with the escapes a query needs.
fn quoted(s: &str) -> Result<(Token<'_>, &str), RenderError> {
    let mut text = String::new();
    let mut chars = s.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((Token::Text(text), &s[i + 1..])),
            '\\' => match chars.next().map(|(_, c)| c) {
                Some(c @ ('"' | '\\')) => text.push(c),
                Some('n') => text.push('\n'),
                Some('t') => text.push('\t'),
                _ => return Err(malformed("unsupported escape in a string")),
            },
            c => text.push(c),
        }
    }
    Err(malformed("unterminated string"))
}

/// The model and the template's `$variables` while one template renders.
struct Scope<'m, 't> {
    model: &'m Model,
    vars: BTreeMap<&'t str, String>,
}

impl<'m, 't> Scope<'m, 't> {
    fn run(&mut self, body: &'t str, out: &mut String) -> Result<(), RenderError> {
        match tokens(body)?.as_slice() {
            [Token::Word(var), Token::Declare, pipeline @ ..] if var.starts_with('$') => {
                let mut value = String::new();
                self.pipeline(pipeline, &mut value)?;
                self.vars.insert(*var, value);
                Ok(())
            }
            pipeline => self.pipeline(pipeline, out),
        }
    }

    fn pipeline(&self, tokens: &[Token<'t>], out: &mut String) -> Result<(), RenderError> {
        match tokens {
            [Token::Word("index"), Token::Word("variables"), Token::Text(key)] => {
                out.push_str(self.variable(key)?);
                Ok(())
            }
            [Token::Word("printf"), Token::Text(format), args @ ..] => {
                self.printf(format, args, out)
            }
            [one] => {
                out.push_str(self.argument(one)?);
                Ok(())
            }
            [Token::Word(word), ..] => Err(misuse(word)),
            _ => Err(malformed("an action must name a function")),
        }
    }

    fn argument<'a>(&'a self, token: &'a Token<'t>) -> Result<&'a str, RenderError> {
        match token {
            Token::Text(text) => Ok(text),
            Token::Word(var) if var.starts_with('$') => self
                .vars
                .get(var)
                .map(String::as_str)
                .ok_or_else(|| malformed(format!("undefined variable {var}"))),
            Token::Word(word) => self.field(word),
            Token::Declare => Err(malformed("unexpected :=")),
        }
    }

    /// A model function's value, if it is safe in a query.
    fn field(&self, name: &str) -> Result<&'m str, RenderError> {
        let model = self.model;
        let value = match name {
            "name" => &model.name,
            "namespace" => &model.namespace,
            "target" => &model.target,
            "service" => &model.service,
            "ingress" => &model.ingress,
            "route" => &model.route,
            "interval" if prometheus_duration(&model.interval) => return Ok(&model.interval),
            "interval" => return Err(RenderError::Unsafe("interval".to_owned())),
            _ => return Err(misuse(name)),
        };
        if label_safe(value) {
            Ok(value)
        } else {
            Err(RenderError::Unsafe(name.to_owned()))
        }
    }

    /// A template variable's value, if present and safe. Go's `index` gives
    /// "" for a missing key; an empty matcher is never meant, so it is an error.
    fn variable(&self, key: &str) -> Result<&'m str, RenderError> {
        let value = self
            .model
            .variables
            .get(key)
            .ok_or_else(|| RenderError::MissingVariable(key.to_owned()))?;
        if label_safe(value) {
            Ok(value)
        } else {
            Err(RenderError::Unsafe(format!("variable {key:?}")))
        }
    }

    /// Go's `printf` with `%s` and `%%` only, all a query needs.
    fn printf(
        &self,
        format: &str,
        args: &[Token<'t>],
        out: &mut String,
    ) -> Result<(), RenderError> {
        let mut args = args.iter();
        let mut rest = format;
        while let Some(at) = rest.find('%') {
            out.push_str(&rest[..at]);
            match rest[at + 1..].chars().next() {
                Some('s') => {
                    let arg = args
                        .next()
                        .ok_or_else(|| malformed("printf: too few arguments"))?;
                    out.push_str(self.argument(arg)?);
                }
                Some('%') => out.push('%'),
                _ => return Err(malformed("printf: only %s and %% are supported")),
            }
            rest = &rest[at + 2..];
        }
        out.push_str(rest);
        match args.next() {
            Some(_) => Err(malformed("printf: too many arguments")),
            None => Ok(()),
        }
    }
}

/// A known function given the wrong arguments, or an unknown one.
fn misuse(word: &str) -> RenderError {
    const KNOWN: [&str; 10] = [
        "name",
        "namespace",
        "target",
        "service",
        "ingress",
        "route",
        "interval",
        "variables",
        "index",
        "printf",
    ];
    if KNOWN.contains(&word) {
        malformed(format!("{word} does not take these arguments here"))
    } else {
        RenderError::UnknownFunction(word.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Provider; 13] = [
        Provider::Istio,
        Provider::Linkerd,
        Provider::Nginx,
        Provider::Contour,
        Provider::Gloo,
        Provider::AppMesh,
        Provider::Kuma,
        Provider::GatewayApi,
        Provider::Apisix,
        Provider::Traefik,
        Provider::Skipper,
        Provider::Osm,
        Provider::Knative,
    ];

    /// A `MetricTemplateModel` literal from Flagger's tests, field by field.
    type Fields = &'static [(&'static str, &'static str)];

    fn flagger_model(fields: Fields) -> Model {
        let mut model = Model::default();
        for &(field, value) in fields {
            let slot = match field {
                "name" => &mut model.name,
                "namespace" => &mut model.namespace,
                "target" => &mut model.target,
                "service" => &mut model.service,
                "ingress" => &mut model.ingress,
                "route" => &mut model.route,
                "interval" => &mut model.interval,
                other => panic!("MetricTemplateModel has no {other}"),
            };
            *slot = value.to_owned();
        }
        model
    }

    fn podinfo() -> Model {
        Model::canary("podinfo", "default", "podinfo", "1m")
    }

    /// Every rendered query Flagger's own `observers/*_test.go` expect, with
    /// the model each test uses.
    #[test]
    fn canary_queries_are_flaggers_byte_for_byte() {
        let cases: &[(Provider, Builtin, Fields, &str)] = &[
            (
                Provider::Istio,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( istio_requests_total{ reporter="destination", destination_workload_namespace="default", destination_workload=~"podinfo", response_code!~"5.*" }[1m] ) ) / sum( rate( istio_requests_total{ reporter="destination", destination_workload_namespace="default", destination_workload=~"podinfo" }[1m] ) ) * 100"#,
            ),
            (
                Provider::Istio,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( istio_request_duration_milliseconds_bucket{ reporter="destination", destination_workload_namespace="default", destination_workload=~"podinfo" }[1m] ) ) by (le) )"#,
            ),
            (
                Provider::Linkerd,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( response_total{ namespace="default", deployment=~"podinfo", classification!="failure", direction="inbound" }[1m] ) ) / sum( rate( response_total{ namespace="default", deployment=~"podinfo", direction="inbound" }[1m] ) ) * 100"#,
            ),
            (
                Provider::Linkerd,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( response_latency_ms_bucket{ namespace="default", deployment=~"podinfo", direction="inbound" }[1m] ) ) by (le) )"#,
            ),
            (
                Provider::Nginx,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "nginx"),
                    ("target", "podinfo"),
                    ("ingress", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( nginx_ingress_controller_requests{ namespace="nginx", ingress="podinfo", canary!="", status!~"5.*" }[1m] ) ) / sum( rate( nginx_ingress_controller_requests{ namespace="nginx", ingress="podinfo", canary!="" }[1m] ) ) * 100"#,
            ),
            (
                Provider::Nginx,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "nginx"),
                    ("target", "podinfo"),
                    ("ingress", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( nginx_ingress_controller_response_duration_seconds_sum{ namespace="nginx", ingress="podinfo", canary!="" }[1m] ) ) / sum( rate( nginx_ingress_controller_response_duration_seconds_count{ namespace="nginx", ingress="podinfo", canary!="" }[1m] ) ) * 1000"#,
            ),
            (
                Provider::Contour,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( envoy_cluster_upstream_rq{ envoy_cluster_name=~"default_podinfo-canary_[0-9a-zA-Z-]+", envoy_response_code!~"5.*" }[1m] ) ) / sum( rate( envoy_cluster_upstream_rq{ envoy_cluster_name=~"default_podinfo-canary_[0-9a-zA-Z-]+", }[1m] ) ) * 100"#,
            ),
            (
                Provider::Contour,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo-service"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( envoy_cluster_upstream_rq{ envoy_cluster_name=~"default_podinfo-service-canary_[0-9a-zA-Z-]+", envoy_response_code!~"5.*" }[1m] ) ) / sum( rate( envoy_cluster_upstream_rq{ envoy_cluster_name=~"default_podinfo-service-canary_[0-9a-zA-Z-]+", }[1m] ) ) * 100"#,
            ),
            (
                Provider::Contour,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( envoy_cluster_upstream_rq_time_bucket{ envoy_cluster_name=~"default_podinfo-canary_[0-9a-zA-Z-]+", }[1m] ) ) by (le) )"#,
            ),
            (
                Provider::Contour,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo-service"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( envoy_cluster_upstream_rq_time_bucket{ envoy_cluster_name=~"default_podinfo-service-canary_[0-9a-zA-Z-]+", }[1m] ) ) by (le) )"#,
            ),
            (
                Provider::Gloo,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( envoy_cluster_upstream_rq{ envoy_cluster_name=~"default-podinfo-canaryupstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+", envoy_response_code!~"5.*" }[1m] ) ) / sum( rate( envoy_cluster_upstream_rq{ envoy_cluster_name=~"default-podinfo-canaryupstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+", }[1m] ) ) * 100"#,
            ),
            (
                Provider::Gloo,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( envoy_cluster_upstream_rq_time_bucket{ envoy_cluster_name=~"default-podinfo-canaryupstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+", }[1m] ) ) by (le) )"#,
            ),
            (
                Provider::AppMesh,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( envoy_cluster_upstream_rq{ kubernetes_namespace="default", kubernetes_pod_name=~"podinfo-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)", envoy_response_code!~"5.*" }[1m] ) ) / sum( rate( envoy_cluster_upstream_rq{ kubernetes_namespace="default", kubernetes_pod_name=~"podinfo-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)" }[1m] ) ) * 100"#,
            ),
            (
                Provider::AppMesh,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( envoy_cluster_upstream_rq_time_bucket{ kubernetes_namespace="default", kubernetes_pod_name=~"podinfo-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)" }[1m] ) ) by (le) )"#,
            ),
            (
                Provider::Kuma,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( envoy_cluster_upstream_rq{ service=~"podinfo-canary_default_svc_[0-9a-zA-Z-]+", envoy_response_code!~"5.*" }[1m] ) ) / sum( rate( envoy_cluster_upstream_rq{ service=~"podinfo-canary_default_svc_[0-9a-zA-Z-]+", }[1m] ) ) * 100"#,
            ),
            (
                Provider::Kuma,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( envoy_cluster_upstream_rq_time_bucket{ service=~"podinfo-canary_default_svc_[0-9a-zA-Z-]+", }[1m] ) ) by (le) )"#,
            ),
            (
                Provider::GatewayApi,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( http_request_duration_seconds_count{ kubernetes_namespace="default", kubernetes_pod_name=~"podinfo-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)", status!~"5.*" }[1m] ) ) / sum( rate( http_request_duration_seconds_count{ kubernetes_namespace="default", kubernetes_pod_name=~"podinfo-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)" }[1m] ) ) * 100"#,
            ),
            (
                Provider::GatewayApi,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( http_request_duration_seconds_bucket{ kubernetes_namespace="default", kubernetes_pod_name=~"podinfo-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)" }[1m] ) ) by (le) )"#,
            ),
            (
                Provider::Apisix,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("route", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( apisix_http_status{ route=~"default_podinfo-podinfo-canary_.+", code!~"5.." }[1m] ) ) / sum( rate( apisix_http_status{ route=~"default_podinfo-podinfo-canary_.+" }[1m] ) ) * 100"#,
            ),
            (
                Provider::Apisix,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("route", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( apisix_http_latency_bucket{ type=~"request", route=~"default_podinfo-podinfo-canary_.+" }[1m] ) ) by (le) )"#,
            ),
            (
                Provider::Traefik,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( traefik_service_request_duration_seconds_bucket{ service=~"default-podinfo-canary-[0-9a-zA-Z-]+@kubernetescrd", code!~"5..", le="+Inf" }[1m] ) ) / sum( rate( traefik_service_request_duration_seconds_bucket{ service=~"default-podinfo-canary-[0-9a-zA-Z-]+@kubernetescrd", le="+Inf" }[1m] ) ) * 100"#,
            ),
            (
                Provider::Traefik,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( traefik_service_request_duration_seconds_bucket{ service=~"default-podinfo-canary-[0-9a-zA-Z-]+@kubernetescrd" }[1m] ) ) by (le) ) * 1000"#,
            ),
            (
                Provider::Skipper,
                Builtin::SuccessRate,
                &[
                    ("namespace", "skipper"),
                    ("interval", "1m"),
                    ("service", "backend"),
                    ("ingress", "skipper-ingress"),
                ],
                r#" sum(rate(skipper_response_duration_seconds_bucket{route=~"kube(ew)?_skipper__skipper_ingress_canary__.*__backend_canary(_[0-9]+)?",code!~"5..",le="+Inf"}[1m])) / sum(rate(skipper_response_duration_seconds_bucket{route=~"kube(ew)?_skipper__skipper_ingress_canary__.*__backend_canary(_[0-9]+)?",le="+Inf"}[1m])) * 100"#,
            ),
            (
                Provider::Skipper,
                Builtin::Duration,
                &[
                    ("namespace", "skipper"),
                    ("interval", "1m"),
                    ("service", "backend"),
                    ("ingress", "skipper-ingress"),
                ],
                r#" sum(rate(skipper_serve_route_duration_seconds_sum{route=~"kube(ew)?_skipper__skipper_ingress_canary__.*__backend_canary(_[0-9]+)?"}[1m])) / sum(rate(skipper_serve_route_duration_seconds_count{route=~"kube(ew)?_skipper__skipper_ingress_canary__.*__backend_canary(_[0-9]+)?"}[1m])) * 1000"#,
            ),
            (
                Provider::Osm,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( osm_request_total{ destination_namespace="default", destination_kind="Deployment", destination_name="podinfo", response_code!~"5.*" }[1m] ) ) / sum( rate( osm_request_total{ destination_namespace="default", destination_kind="Deployment", destination_name="podinfo" }[1m] ) ) * 100"#,
            ),
            (
                Provider::Osm,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( osm_request_duration_ms_bucket{ destination_namespace="default", destination_kind="Deployment", destination_name="podinfo" }[1m] ) ) by (le) )"#,
            ),
            (
                Provider::Knative,
                Builtin::SuccessRate,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("route", "podinfo-00001"),
                    ("interval", "1m"),
                ],
                r#" sum( rate( envoy_cluster_upstream_rq{ envoy_cluster_name=~"default/podinfo-00001", envoy_response_code!~"5.*" }[1m] ) ) / sum( rate( envoy_cluster_upstream_rq{ envoy_cluster_name=~"default/podinfo-00001", }[1m] ) ) * 100"#,
            ),
            (
                Provider::Knative,
                Builtin::Duration,
                &[
                    ("name", "podinfo"),
                    ("namespace", "default"),
                    ("target", "podinfo"),
                    ("service", "podinfo"),
                    ("route", "podinfo-00001"),
                    ("interval", "1m"),
                ],
                r#" histogram_quantile( 0.99, sum( rate( envoy_cluster_upstream_rq_time_bucket{ envoy_cluster_name=~"default/podinfo-00001", }[1m] ) ) by (le) )"#,
            ),
        ];
        for &(provider, builtin, fields, expected) in cases {
            let model = flagger_model(fields);
            let got = query(provider, builtin, Side::Canary, &model).unwrap();
            assert_eq!(got.as_deref(), Some(expected), "{provider} {builtin:?}");
        }
        let covered: Vec<Provider> = cases.iter().map(|c| c.0).collect();
        assert!(ALL.iter().all(|p| covered.contains(p)));
    }

    #[test]
    fn providers_are_picked_as_flaggers_factory_does() {
        for (named, provider) in [
            ("gatewayapi:v1beta1", Provider::GatewayApi),
            ("gatewayapi:v1", Provider::GatewayApi),
            ("kubernetes", Provider::GatewayApi),
            ("appmesh:v1beta2", Provider::AppMesh),
            ("gloo", Provider::Gloo),
            ("gloo:v1", Provider::Gloo),
            ("nginx", Provider::Nginx),
            ("", Provider::Istio),
            ("unknown", Provider::Istio),
            // Exact names only: Flagger's `:service` suffix falls to Istio.
            ("kubernetes:service", Provider::Istio),
            ("linkerd:service", Provider::Istio),
        ] {
            assert_eq!(Provider::from_flagger(named), provider, "{named:?}");
        }
        for provider in ALL {
            assert_eq!(Provider::from_flagger(provider.name()), provider);
        }
    }

    #[test]
    fn the_primary_is_the_renamed_workload_for_istio_and_linkerd() {
        let model = podinfo();
        let istio = query(Provider::Istio, Builtin::SuccessRate, Side::Primary, &model).unwrap();
        assert_eq!(
            istio.as_deref(),
            Some(
                r#" sum( rate( istio_requests_total{ reporter="destination", destination_workload_namespace="default", destination_workload=~"podinfo-primary", response_code!~"5.*" }[1m] ) ) / sum( rate( istio_requests_total{ reporter="destination", destination_workload_namespace="default", destination_workload=~"podinfo-primary" }[1m] ) ) * 100"#
            )
        );
        let linkerd = query(Provider::Linkerd, Builtin::Duration, Side::Primary, &model).unwrap();
        assert_eq!(
            linkerd.as_deref(),
            Some(
                r#" histogram_quantile( 0.99, sum( rate( response_latency_ms_bucket{ namespace="default", deployment=~"podinfo-primary", direction="inbound" }[1m] ) ) by (le) )"#
            )
        );
    }

    #[test]
    fn the_primary_model_renames_the_workload_and_service_only() {
        let mut model = podinfo();
        model.ingress = "web".to_owned();
        let primary = primary(&model);
        assert_eq!(primary.target, "podinfo-primary");
        assert_eq!(primary.service, "podinfo-primary");
        assert_eq!(
            (primary.ingress.as_str(), primary.route.as_str()),
            ("web", "podinfo")
        );
    }

    #[test]
    fn nginx_primary_is_the_same_ingress_without_a_canary_upstream() {
        let model = podinfo();
        let q = query(Provider::Nginx, Builtin::SuccessRate, Side::Primary, &model).unwrap();
        assert_eq!(
            q.as_deref(),
            Some(
                r#" sum( rate( nginx_ingress_controller_requests{ namespace="default", ingress="podinfo", canary="", status!~"5.*" }[1m] ) ) / sum( rate( nginx_ingress_controller_requests{ namespace="default", ingress="podinfo", canary="" }[1m] ) ) * 100"#
            )
        );
    }

    #[test]
    fn swapped_selectors_name_the_primary() {
        let mut model = podinfo();
        model.ingress = "web".to_owned();
        for (provider, canary, primary) in [
            (
                Provider::Contour,
                "default_podinfo-canary_",
                "default_podinfo-primary_",
            ),
            (
                Provider::Gloo,
                "default-podinfo-canaryupstream-",
                "default-podinfo-primaryupstream-",
            ),
            (
                Provider::Kuma,
                "podinfo-canary_default_svc_",
                "podinfo-primary_default_svc_",
            ),
            (
                Provider::Traefik,
                "default-podinfo-canary-",
                "default-podinfo-primary-",
            ),
            (
                Provider::Skipper,
                "__.*__podinfo_canary(",
                "__.*__podinfo_primary(",
            ),
        ] {
            for builtin in [Builtin::SuccessRate, Builtin::Duration] {
                let c = query(provider, builtin, Side::Canary, &model)
                    .unwrap()
                    .unwrap();
                let p = query(provider, builtin, Side::Primary, &model)
                    .unwrap()
                    .unwrap();
                assert!(
                    c.contains(canary) && !c.contains(primary),
                    "{provider}: {c}"
                );
                assert_eq!(p, c.replace(canary, primary), "{provider} {builtin:?}");
            }
        }
        // Skipper's primary backend is on the canary ingress too.
        let p = query(Provider::Skipper, Builtin::Duration, Side::Primary, &model).unwrap();
        assert!(p.unwrap().contains("kube(ew)?_default__web_canary__"));
    }

    #[test]
    fn every_primary_differs_from_its_canary_or_is_none() {
        let model = podinfo();
        for provider in ALL {
            for builtin in [Builtin::SuccessRate, Builtin::Duration] {
                let c = query(provider, builtin, Side::Canary, &model).unwrap();
                let p = query(provider, builtin, Side::Primary, &model).unwrap();
                let none = matches!(provider, Provider::Apisix | Provider::Knative);
                assert_eq!(p.is_none(), none, "{provider}");
                assert_ne!(p, c, "{provider} {builtin:?}");
            }
        }
    }

    #[test]
    fn an_injected_name_is_refused() {
        let evil = r#"x"}[1m]) or vector(1) #"#;
        for provider in ALL {
            for side in [Side::Canary, Side::Primary] {
                let model = Model::canary("podinfo", "default", evil, "1m");
                match query(provider, Builtin::SuccessRate, side, &model) {
                    // Skipper's observer turns every non-word character into `_` first.
                    Ok(Some(q)) if provider == Provider::Skipper => {
                        assert!(!q.contains("vector(1)"), "{q}");
                    }
                    Ok(None) => assert!(side == Side::Primary),
                    other => assert!(matches!(other, Err(RenderError::Unsafe(_))), "{provider}"),
                }
            }
        }
        let mut model = podinfo();
        model.namespace = "default\"}".to_owned();
        let err = query(Provider::Istio, Builtin::Duration, Side::Canary, &model).unwrap_err();
        assert_eq!(err, RenderError::Unsafe("namespace".to_owned()));
        assert!(!err.to_string().contains('"'), "the value is not echoed");
        let model = Model::canary("podinfo", "default", "podinfo", "1m]) or vector(1) #");
        let err = query(Provider::Linkerd, Builtin::Duration, Side::Canary, &model).unwrap_err();
        assert_eq!(err, RenderError::Unsafe("interval".to_owned()));
    }

    #[test]
    fn plain_names_are_label_safe() {
        for ok in ["podinfo", "podinfo-primary", "my_app.v2", "A1"] {
            assert!(label_safe(ok), "{ok}");
        }
        let long = "a".repeat(254);
        for bad in [
            "",
            "a b",
            "a\"",
            "a}",
            "a\\",
            "a\n",
            "ä",
            "a=~\".*\"",
            long.as_str(),
        ] {
            assert!(!label_safe(bad), "{bad:?}");
        }
    }

    #[test]
    fn intervals_are_prometheus_durations() {
        for ok in [
            "1m",
            "30s",
            "1h30m",
            "500ms",
            "2d",
            "1w",
            "1y",
            "1h0m0s",
            "1m30s500ms",
        ] {
            assert!(prometheus_duration(ok), "{ok}");
        }
        for bad in [
            "", "1", "m", "1m1h", "1m1m", "1.5m", "-1m", "1mm", "1m ", " 1m", "1M", "1ms1s",
        ] {
            assert!(!prometheus_duration(bad), "{bad:?}");
        }
    }

    #[test]
    fn template_variables_are_read_with_index() {
        let mut model = podinfo();
        model.variables.insert("k".to_owned(), "v1".to_owned());
        let q = r#"up{job="{{ index variables "k" }}", ns="{{namespace}}"}"#;
        assert_eq!(render(q, &model).unwrap(), r#"up{job="v1", ns="default"}"#);
        let missing = render(r#"{{ index variables "nope" }}"#, &model);
        assert_eq!(
            missing,
            Err(RenderError::MissingVariable("nope".to_owned()))
        );
        model
            .variables
            .insert("k".to_owned(), "v\"} or up".to_owned());
        assert!(matches!(render(q, &model), Err(RenderError::Unsafe(_))));
        // A `}}` inside the quoted key does not end the action.
        model.variables.insert("a}}b".to_owned(), "x".to_owned());
        assert_eq!(
            render(r#"{{ index variables "a}}b" }}"#, &model).unwrap(),
            "x"
        );
    }

    #[test]
    fn malformed_templates_are_errors() {
        let model = podinfo();
        assert_eq!(
            render("up{a=\"{{ target \"}", &model),
            Err(RenderError::Unclosed(6))
        );
        assert_eq!(render("{{ target", &model), Err(RenderError::Unclosed(0)));
        assert_eq!(
            render("{{ index variables \"k }}", &model),
            Err(RenderError::Unclosed(0))
        );
        assert_eq!(
            render("{{ env \"HOME\" }}", &model),
            Err(RenderError::UnknownFunction("env".to_owned()))
        );
        assert_eq!(
            render("{{ .Values }}", &model),
            Err(RenderError::UnknownFunction(".Values".to_owned()))
        );
        for bad in [
            "{{ }}",
            "{{ variables }}",
            "{{ target \"x\" }}",
            "{{ $undefined }}",
            "{{ printf \"%d\" target }}",
            "{{ printf \"%s %s\" target }}",
            "{{ printf \"%s\" target name }}",
        ] {
            assert!(
                matches!(render(bad, &model), Err(RenderError::Malformed(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn rendering_collapses_whitespace_as_trim_query_does() {
        let model = podinfo();
        let q = "\n\tsum(\r\n  x{a=\"{{target}}\"}\x0c[{{ interval }}])  \t";
        assert_eq!(render(q, &model).unwrap(), " sum( x{a=\"podinfo\"} [1m]) ");
        assert_eq!(render("a  {{- target -}}  b", &model).unwrap(), "apodinfob");
        let q = r#"{{- $r := printf "%s_%s%%" namespace target }}{{ $r }}/{{ $r }}"#;
        assert_eq!(
            render(q, &model).unwrap(),
            "default_podinfo%/default_podinfo%"
        );
    }

    #[test]
    fn durations_are_milliseconds() {
        assert_eq!(duration_ms(Provider::GatewayApi, 0.25), 250.0);
        assert_eq!(duration_ms(Provider::GatewayApi, 0.1234), 123.0);
        assert_eq!(duration_ms(Provider::Istio, 12.7), 12.0);
        assert_eq!(duration_ms(Provider::Nginx, 612.9), 612.0);
        assert_eq!(duration_ms(Provider::Skipper, 40.0), 40.0);
    }
}
