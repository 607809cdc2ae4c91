#!/usr/bin/env python3
"""Offline checks of gatebot's deployment files.

Run through .ci/deploy-check.sh, which prepares a virtualenv with helm-python-sdk
(Helm's Go SDK as a shared library: lint and render without a helm binary) and
kubernetes-validate (Kubernetes OpenAPI schemas).

Prints one line per check and ends with `deploy: N passed, M failed`; exits non-zero
when any check failed.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

import helm_python as helm
import jsonschema
import yaml
from kubernetes_validate import utils as kv

KUBE_VERSION = "1.30.0"
ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "flagger-system"
RELEASE = "gatebot"

# Environment variable names fixed by the design; anything else GATEBOT_* is a typo.
KNOWN_ENV = {
    "GATEBOT_LISTEN", "GATEBOT_DATABASE_URL", "GATEBOT_ADMIN_TOKEN", "GATEBOT_APPROVAL_TTL",
    "GATEBOT_GITHUB_WEBHOOK_SECRET", "GATEBOT_GITHUB_TOKEN", "GATEBOT_GITHUB_APP_ID",
    "GATEBOT_GITHUB_APP_PRIVATE_KEY", "GATEBOT_GITHUB_API_URL", "GATEBOT_GITHUB_REPOSITORY",
    "GATEBOT_SLACK_SIGNING_SECRET", "GATEBOT_SLACK_BOT_TOKEN",
    "GATEBOT_SLACK_CHANNEL", "GATEBOT_SLACK_API_URL",
    "GATEBOT_POLICY", "GATEBOT_LOG_FORMAT", "RUST_LOG",
}
# Settings added since live in .env.example, which lists every one.
if (ROOT / ".env.example").is_file():
    KNOWN_ENV |= set(re.findall(r"^#?\s*((?:GATEBOT_[A-Z0-9_]+)|RUST_LOG)=",
                                (ROOT / ".env.example").read_text(), re.M))
SECRET_ENV = {
    "GATEBOT_ADMIN_TOKEN", "GATEBOT_GITHUB_WEBHOOK_SECRET", "GATEBOT_GITHUB_TOKEN",
    "GATEBOT_GITHUB_APP_PRIVATE_KEY", "GATEBOT_SLACK_SIGNING_SECRET", "GATEBOT_SLACK_BOT_TOKEN",
    "GATEBOT_SLACK_APP_TOKEN", "GATEBOT_TEAMS_APP_PASSWORD", "GATEBOT_CHANGE_PASSWORD",
    "GATEBOT_CHANGE_WEBHOOK_SECRET",
}
WEBHOOK_PATHS = ["/webhooks/github", "/webhooks/slack/interactions", "/webhooks/slack/commands",
                 "/webhooks/teams"]
# Routed by the Ingress only with change.webhook: by default the change system is polled.
CHANGE_WEBHOOK_PATH = "/webhooks/change"
SQLITE_URL = "sqlite:///data/gatebot.db"
# A fork's own image, as the build-it-yourself path sets it; the chart's default is the
# published one (PUBLISHED_IMAGE), which the README's first install uses.
IMAGE = {"image": {"repository": "registry.example.com/platform/gatebot"}}
PUBLISHED_IMAGE = "ghcr.io/gatebot/gatebot"
PUBLISHED_CHART = "oci://ghcr.io/gatebot/charts/gatebot"

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEexample\n-----END RSA PRIVATE KEY-----\n"

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "flagger-tokens-off": {"flaggerTokens": {"enabled": False}},
    "flagger-tokens-existing": {"flaggerTokens": {"existingSecret": "flagger", "existingSecretKey": "setting",
                                                  "cluster": "prod-eu"}},
    "exposed": {
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
            "hosts": ["gatebot.example.com", "gatebot.example.org"],
            "tls": [{"secretName": "gatebot-tls", "hosts": ["gatebot.example.com"]}],
        },
        "serviceMonitor": {"enabled": True, "interval": "15s",
                           "additionalLabels": {"release": "prometheus"}},
        "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
    },
    "postgres": {
        "replicaCount": 3,
        "postgres": {"url": "postgres://gatebot:hunter2@db.example:5432/gatebot"},
        "github": {"token": "ghp_example", "webhookSecret": "whsec", "repository": "acme/shop"},
        "slack": {"signingSecret": "sss", "botToken": "xoxb-1", "channel": "C0123",
                  "approvers": ["U0ALICE", "S0DEPLOY"]},
        "adminToken": "admin",
        "apiTokens": ["alice=" + "a1" * 32, "bob=" + "b2" * 32],
        "approvalTTL": "24h",
    },
    "existing-secret": {
        "existingSecret": "gatebot-secrets",
        "existingSecretKeys": {"githubToken": "token"},
        "postgres": {"existingSecret": "gatebot-secrets", "existingSecretKey": "db"},
        "replicaCount": 2,
    },
    "templates": {
        "policy": "[github.commands.promote]\nteams = [\"acme/release\"]\n",
        "templates": {"overrides": {
            "github/status.md.j2": "Gate {{ gate }} is waiting\n",
            "slack/wait.j2": "{\"blocks\": []}\n",
        }},
        "logFormat": "text",
        "logLevel": "info,gatebot=debug",
    },
    "github-app": {
        "github": {"appId": 123456, "appPrivateKey": PEM, "webhookSecret": "whsec",
                   "apiUrl": "https://ghe.example.com/api/v3"},
        "persistence": {"enabled": True, "existingClaim": "my-claim"},
    },
    "no-persistence": {"persistence": {"enabled": False}},
    "no-network-policy": {"networkPolicy": {"enabled": False}},
    "network-policy-istio": {
        "networkPolicy": {
            "flaggerNamespace": "istio-system",
            "flaggerPodSelector": {"app.kubernetes.io/name": "flagger"},
            "ingressNamespace": "",
            "metricsNamespace": "",
            "extraFrom": [{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": "ci"}}}],
        },
    },
    "observability": {
        "prometheusRule": {"enabled": True, "additionalLabels": {"release": "prometheus"},
                           "alertLabels": {"team": "delivery"}},
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Flagger"}},
        "prometheusScrapeAnnotations": True,
    },
    "private-cluster": {
        "loadtester": {"openAccess": True},
        "slack": {"botToken": "xoxb-1", "appToken": "xapp-1-A0-1-secret", "channel": "C0123"},
        "networkPolicy": {"ingressNamespace": ""},
        "volumes": [{"name": "ca", "configMap": {"name": "corporate-ca"}}],
        "volumeMounts": [{"name": "ca", "mountPath": "/etc/gatebot/ca", "readOnly": True}],
    },
    "teams": {
        "teams": {"appId": "0b6fe6d1-fece-44f7-9a48-56465e2d5ab8", "appPassword": "teams-secret-1",
                  "tenants": ["50612dbb-0237-4969-b378-8d42590f9c00", "72f988bf-86f1-41af-91ab-2d7cd011db47"],
                  "approvers": ["b15a9416-0ad3-4172-9210-7beb711d3f70"]},
    },
    "change": {
        "change": {"user": "svc-gatebot", "password": "change-secret-1",
                   "webhookSecret": "change-hook-secret-1", "webhook": True},
        "policy": "[change]\nprovider = \"servicenow\"\nurl = \"https://acme.service-now.com\"\n"
                  "mode = \"create\"\n",
        "ingress": {"enabled": True, "hosts": ["gatebot.example.com"],
                    "tls": [{"secretName": "gatebot-tls", "hosts": ["gatebot.example.com"]}]},
    },
    "limits": {"limits": {"headerReadTimeout": "3s", "idleTimeout": "75s", "maxConnections": 256,
                          "bodyReadTimeout": "5s", "requestTimeout": "8s"},
               "retention": {"audit": "0", "history": "30d"},
               "evidence": {"refresh": "1m", "username": "gate bot"},
               "metricsServer": "http://prometheus.istio-system:9090",
               "policy": "[github]\nforbid_self_approval = true\n"},
    "kubernetes-lookup": {
        "github": {"repository": "acme/shop", "token": "ghp_x", "webhookSecret": "s"},
        "kubernetes": {"lookup": {"enabled": True, "container": "app"}},
    },
    "app-secret": {"kubernetes": {"appSecret": {"enabled": True}}},
    "internal-lb": {
        "service": {"type": "LoadBalancer",
                    "annotations": {"networking.gke.io/load-balancer-type": "Internal"},
                    "loadBalancerSourceRanges": ["10.20.0.0/16"]},
        "flaggerTokens": {"remoteClusters": ["staging-eu"]},
        "networkPolicy": {"extraFrom": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]},
    },
}


# --------------------------------------------------------------------------- harness

class Checks:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def run(self, name: str, fn: Callable[[], str | None]) -> Any:
        try:
            detail = fn()
        except Exception as exc:  # noqa: BLE001 - every failure is reported, not raised
            self.failed += 1
            msg = str(exc).strip().replace("\n", " | ") or type(exc).__name__
            print(f"FAIL {name}: {msg[:600]}")
            if os.environ.get("DEPLOY_CHECK_DEBUG"):
                traceback.print_exc()
            return None
        self.passed += 1
        print(f"ok   {name}" + (f" ({detail})" if detail else ""))
        return True


def expect(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


# --------------------------------------------------------------------------- helpers

def render(chart: Path, values: dict[str, Any], *, image: bool = True) -> dict[str, str]:
    """The chart rendered with `values`, and with IMAGE unless `image` is False."""
    if image:
        values = deep_merge(IMAGE, values)
    with helm.Chart.load(chart) as c:
        return c.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    docs = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        try:
            loaded = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise AssertionError(f"{path} is not valid YAML: {exc}") from exc
        for doc in loaded:
            if doc is None:
                continue
            expect(isinstance(doc, dict), f"{path}: a document is not a mapping")
            docs.append(doc)
    return docs


def notes(rendered: dict[str, str]) -> str:
    return next((t for p, t in rendered.items() if p.endswith("NOTES.txt")), "")


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def flagger_token_secret(d: dict[str, Any]) -> bool:
    return d.get("kind") == "Secret" and d["metadata"]["name"].endswith("-flagger-token")


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    # The generated Flagger token has a Secret of its own, beside the chart's.
    found = [d for d in of_kind(docs, kind) if not flagger_token_secret(d)]
    expect(len(found) == 1, f"expected one {kind}, found {len(found)}")
    return found[0]


def validate_k8s(docs: list[dict[str, Any]]) -> str:
    """Schema-validate every object strictly; ServiceMonitor (a CRD) is checked by hand."""
    kinds = []
    for doc in docs:
        expect("apiVersion" in doc and "kind" in doc, f"object without apiVersion/kind: {doc}")
        name = f"{doc['kind']}/{doc.get('metadata', {}).get('name')}"
        if doc["kind"] == "ServiceMonitor":
            check_service_monitor(doc)
        elif doc["kind"] == "PrometheusRule":
            check_prometheus_rule(doc)
        else:
            try:
                kv.validate(doc, KUBE_VERSION, strict=True)
            except kv.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                raise AssertionError(f"{name}: {path}: {exc.message}") from None
            except kv.SchemaNotFoundError as exc:
                raise AssertionError(exc.message) from None
        kinds.append(name)
    return ", ".join(kinds)


def check_prometheus_rule(rule: dict[str, Any]) -> None:
    expect(rule.get("apiVersion") == "monitoring.coreos.com/v1", "PrometheusRule apiVersion")
    md = rule.get("metadata", {})
    expect(bool(md.get("name")) and bool(md.get("namespace")), "PrometheusRule name/namespace")
    spec = rule.get("spec", {})
    expect(set(spec) == {"groups"}, f"PrometheusRule spec fields {sorted(spec)}")
    for group in spec["groups"]:
        expect(set(group) <= {"name", "interval", "rules"} and group.get("name"),
               f"rule group fields {sorted(group)}")
        for r in group["rules"]:
            expect(set(r) <= {"alert", "record", "expr", "for", "labels", "annotations"},
                   f"rule fields {sorted(r)}")
            expect(bool(r.get("alert")) != bool(r.get("record")), f"alert or record: {r}")
            expect(isinstance(r.get("expr"), str) and r["expr"].strip(), f"expr of {r}")
            expect(re.fullmatch(r"[0-9]+(s|m|h)", str(r.get("for", "1m"))) is not None,
                   f"for of {r.get('alert')}")
            for k in ("labels", "annotations"):
                expect(all(isinstance(v, str) for v in (r.get(k) or {}).values()),
                       f"{k} of {r.get('alert')} must be strings")
            expect(r["expr"].count("(") == r["expr"].count(")"), f"parentheses in {r['expr']}")


def check_service_monitor(sm: dict[str, Any]) -> None:
    expect(sm.get("apiVersion") == "monitoring.coreos.com/v1", "ServiceMonitor apiVersion")
    expect(sm.get("kind") == "ServiceMonitor", "ServiceMonitor kind")
    md = sm.get("metadata", {})
    expect(bool(md.get("name")) and bool(md.get("namespace")), "ServiceMonitor name/namespace")
    spec = sm.get("spec", {})
    expect(isinstance(spec.get("selector", {}).get("matchLabels"), dict)
           and spec["selector"]["matchLabels"], "ServiceMonitor spec.selector.matchLabels")
    eps = spec.get("endpoints")
    expect(isinstance(eps, list) and len(eps) >= 1, "ServiceMonitor spec.endpoints")
    for ep in eps:
        expect(ep.get("port") == "http", f"ServiceMonitor endpoint port {ep.get('port')!r}")
        expect(ep.get("path") == "/metrics", f"ServiceMonitor endpoint path {ep.get('path')!r}")
        expect(re.fullmatch(r"[0-9]+(ms|s|m|h)", str(ep.get("interval", "30s"))) is not None,
               "ServiceMonitor interval")
    allowed = {"endpoints", "selector", "namespaceSelector", "jobLabel", "targetLabels",
               "podTargetLabels", "sampleLimit", "attachMetadata"}
    extra = set(spec) - allowed
    expect(not extra, f"ServiceMonitor unexpected spec fields {sorted(extra)}")


def env_map(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for e in container.get("env", []) or []:
        expect(e["name"] not in out, f"env {e['name']} set twice")
        out[e["name"]] = e
    return out


def policy_of(docs: list[dict[str, Any]]) -> str:
    """The policy file the chart wrote (its ConfigMap), or "" when it wrote none."""
    for d in docs:
        if d["kind"] == "ConfigMap" and "policy.toml" in d.get("data", {}):
            return d["data"]["policy.toml"]
    return ""


def toml_tables(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The policy file the chart wrote, read as TOML."""
    import tomllib
    return tomllib.loads(policy_of(docs))


def check_deployment(dep: dict[str, Any], *, sqlite: bool, policy: str = "") -> str:
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    psc = pod.get("securityContext", {}) or {}
    # Only kubernetes.lookup (a read-only ClusterRole) and kubernetes.appSecret (one Secret)
    # call the API.
    import tomllib
    kubernetes = tomllib.loads(policy).get("kubernetes", {})
    reads_cluster = bool(kubernetes.get("lookup") or kubernetes.get("app_secret"))
    expect(pod.get("automountServiceAccountToken") is reads_cluster,
           "automountServiceAccountToken must be false without kubernetes.lookup")
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    expect(bool(containers), "no containers")
    volumes = {v["name"]: v for v in pod.get("volumes", []) or []}
    for c in containers:
        sc = c.get("securityContext", {}) or {}
        who = f"container {c['name']}"
        run_as_non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        expect(run_as_non_root is True, f"{who}: runAsNonRoot must be true")
        uid = sc.get("runAsUser", psc.get("runAsUser"))
        expect(uid is not None and uid != 0, f"{who}: runAsUser must be set and non-zero")
        expect(sc.get("readOnlyRootFilesystem") is True, f"{who}: readOnlyRootFilesystem")
        expect(sc.get("allowPrivilegeEscalation") is False, f"{who}: allowPrivilegeEscalation")
        expect(sc.get("privileged") in (None, False), f"{who}: privileged")
        drop = (sc.get("capabilities") or {}).get("drop") or []
        expect("ALL" in drop, f"{who}: capabilities must drop ALL")
        expect(not (sc.get("capabilities") or {}).get("add"), f"{who}: adds capabilities")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        expect(seccomp == "RuntimeDefault", f"{who}: seccompProfile must be RuntimeDefault")
    main = containers[0]
    ports = {p.get("name"): p["containerPort"] for p in main.get("ports", [])}
    expect(ports.get("http") == 8080, "container port http must be 8080")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = (main.get(probe) or {}).get("httpGet") or {}
        expect(get.get("path") == path, f"{probe} must GET {path}, got {get.get('path')!r}")
        expect(get.get("port") in ("http", 8080), f"{probe} port {get.get('port')!r}")
    mounts = {m["mountPath"]: m for m in main.get("volumeMounts", [])}
    expect("/tmp" in mounts, "no volume mounted at /tmp")
    expect("emptyDir" in volumes.get(mounts["/tmp"]["name"], {}), "/tmp must be an emptyDir")
    envs = env_map(main)
    unknown = {n for n in envs if (n.startswith("GATEBOT_") or n == "RUST_LOG")} - KNOWN_ENV
    expect(not unknown, f"unknown environment variables {sorted(unknown)}")
    for name in SECRET_ENV & set(envs):
        expect("valueFrom" in envs[name] and "secretKeyRef" in envs[name]["valueFrom"],
                   f"{name} must come from a Secret, not a plain value")
    db = envs.get("GATEBOT_DATABASE_URL", {})
    if "value" in db:
        expect(db["value"].startswith("sqlite:"), "a non-SQLite database URL in plain text")
    strategy = (spec.get("strategy") or {}).get("type")
    if sqlite:
        expect(strategy == "Recreate", f"SQLite needs strategy Recreate, got {strategy!r}")
        expect(spec.get("replicas", 1) <= 1, "SQLite with more than one replica")
        expect("/data" in mounts, "SQLite needs a volume at /data")
    return f"{main['name']}, strategy {strategy}"


def secret_refs(container: dict[str, Any]) -> dict[str, tuple[str, str, bool]]:
    out = {}
    for name, e in env_map(container).items():
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            out[name] = (ref["name"], ref["key"], bool(ref.get("optional")))
    return out


def container_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


# --------------------------------------------------------------------------- chart checks

def chart_checks(ck: Checks, chart: Path) -> None:
    values_text = (chart / "values.yaml").read_text()
    defaults = yaml.safe_load(values_text)

    def lint(values: dict[str, Any] | None, label: str) -> None:
        def fn() -> str:
            report = helm.lint(chart, deep_merge(IMAGE, values or {}), strict=True,
                               namespace=NAMESPACE,
                               kube_version=f"v{KUBE_VERSION}")
            bad = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
            errors = report.get("errors") or []
            expect(not bad and not errors,
                   "; ".join([f"{m['path']}: {m['error']}" for m in bad] + list(errors)))
            return f"{report.get('total_charts_linted')} chart, {len(report['messages'])} info"
        ck.run(f"helm lint --strict ({label})", fn)

    lint(None, "defaults")
    lint(SCENARIOS["exposed"], "exposed")
    lint(SCENARIOS["postgres"], "postgres")

    def chart_yaml() -> str:
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        expect(meta.get("apiVersion") == "v2", "Chart.yaml apiVersion must be v2")
        expect(meta.get("name") == "gatebot", "chart name")
        for f in ("_helpers.tpl", "NOTES.txt"):
            expect((chart / "templates" / f).is_file(), f"templates/{f} missing")
        helpers = (chart / "templates" / "_helpers.tpl").read_text()
        for d in ("gatebot.name", "gatebot.fullname", "gatebot.labels", "gatebot.selectorLabels"):
            expect(f'define "{d}"' in helpers, f"_helpers.tpl lacks {d}")
        return f"{meta['name']} {meta['version']}"
    ck.run("Chart.yaml and helpers", chart_yaml)

    def schema_valid() -> str:
        schema = json.loads((chart / "values.schema.json").read_text())
        expect(schema.get("additionalProperties") is False,
               "values.schema.json must set additionalProperties: false at the top level")
        jsonschema.Draft7Validator.check_schema(schema)
        jsonschema.Draft7Validator(schema).validate(defaults)
        missing = set(defaults) - set(schema.get("properties", {}))
        expect(not missing, f"values without a schema entry: {sorted(missing)}")
        extra = set(schema.get("properties", {})) - set(defaults)
        expect(not extra, f"schema entries without a default in values.yaml: {sorted(extra)}")
        for name, scenario in SCENARIOS.items():
            merged = deep_merge(defaults, scenario)
            try:
                jsonschema.Draft7Validator(schema).validate(merged)
            except jsonschema.ValidationError as exc:
                raise AssertionError(f"scenario {name}: {exc.message}") from None
        return f"{len(defaults)} top-level keys"
    ck.run("values.yaml validates against values.schema.json", schema_valid)

    def comments() -> str:
        lines = values_text.splitlines()
        missing = []
        k8s_objects = {"resources", "podSecurityContext", "securityContext"}
        parent = None
        for i, line in enumerate(lines):
            m = re.match(r"^( {0,2})([A-Za-z][A-Za-z0-9]*):", line)
            if not m:
                continue
            top = m.group(1) == ""
            if top:
                parent = m.group(2)
            elif parent in k8s_objects:
                continue
            prev = lines[i - 1].strip() if i else ""
            if not prev.startswith("#"):
                # A section heading such as `image:` is described by its children.
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                if top and line.rstrip().endswith(":") and nxt.startswith("  "):
                    continue
                missing.append(m.group(2) if top else f"{parent}.{m.group(2)}")
        expect(not missing, f"values without a comment: {missing}")
        return "every value commented"
    ck.run("values.yaml comments", comments)

    def tables_written_once() -> str:
        # A table of the policy file that the values write too would be written twice,
        # which TOML refuses: gatebot would not start. The render says so instead.
        for policy, values in (("[limits]\noutbox_lease = \"2m\"\n", {"evidence": {"refresh": "10s"}}),
                               ("limits.outbox_lease = \"2m\"\n", {"limits": {"idleTimeout": "75s"}}),
                               ("[kubernetes]\nlookup = true\n",
                                {"kubernetes": {"appSecret": {"enabled": True}}}),
                               ("[github]\nforbid_self_approval = true\n",
                                {"github": {"minPermission": "maintain"}}),
                               ("[slack]\napprovers = [\"U1\"]\n", {"slack": {"approvers": ["U2"]}}),
                               ("[ 'github' ]\nbot_login = \"x\"\n", {"github": {"minPermission": "admin"}}),
                               ("limits.outbox_lease = \"2m\"\n", {"retention": {"audit": "0"}})):
            try:
                render(chart, {"policy": policy, **values})
            except helm.HelmError as exc:
                expect("write it in one place" in str(exc), f"unexpected error: {exc}")
                continue
            raise AssertionError(f"{policy!r} with {values} rendered a table twice")
        # `teams = …` in a table of the policy's is no [teams] table.
        teams = toml_tables(manifests(render(chart, {
            "policy": "[github.commands.promote]\nteams = [\"acme/rel\"]\n[users.alice]\nslack = \"U1\"\n",
            "slack": {"approvers": ["U0ALICE"]},
            "teams": {"approvers": ["b15a9416-0ad3-4172-9210-7beb711d3f70"]}})))
        expect(teams["slack"]["approvers"] == ["U0ALICE"], f"teams = in a table: {teams}")
        # A sub-table of the policy's may come before the values' table: valid TOML.
        both = toml_tables(manifests(render(chart, {"policy": "[github.commands.promote]\nteams = [\"acme/r\"]\n",
                                                    "github": {"minPermission": "maintain"}})))
        expect(both["github"]["min_permission"] == "maintain"
               and both["github"]["commands"]["promote"]["teams"] == ["acme/r"], f"merged: {both}")
        alone = policy_of(manifests(render(chart, {"policy": "[limits]\noutbox_lease = \"2m\"\n"})))
        expect(alone.strip() == '[limits]\noutbox_lease = "2m"', f"the policy's own [limits]: {alone!r}")
        for bad in ("0", "08", "0100", 0, 70000):
            try:
                render(chart, {"limits": {"maxConnections": bad}})
            except helm.HelmError:
                continue
            raise AssertionError(f"limits.maxConnections {bad!r} rendered")
        return "a table in policy and in values is refused at render; maxConnections is a number"
    ck.run("policy tables written once", tables_written_once)

    def typo_rejected() -> str:
        for bad in ({"replicaCont": 1}, {"image": {"repo": "x"}}, {"logFormat": "xml"}):
            try:
                render(chart, bad)
            except helm.HelmError as exc:
                expect("replicaCont" in str(exc) or "repo" in str(exc) or "xml" in str(exc)
                       or "logFormat" in str(exc), f"unexpected error for {bad}: {exc}")
                continue
            raise AssertionError(f"values {bad} rendered although the schema forbids them")
        return "misspelt keys and bad enums refused"
    ck.run("schema refuses typos", typo_rejected)

    rendered: dict[str, list[dict[str, Any]]] = {}
    raw: dict[str, dict[str, str]] = {}
    for name, values in SCENARIOS.items():
        def do(name: str = name, values: dict[str, Any] = values) -> str:
            out = render(chart, values)
            raw[name] = out
            docs = manifests(out)
            rendered[name] = docs
            return validate_k8s(docs)
        ck.run(f"render + kubernetes-validate --strict {KUBE_VERSION} [{name}]", do)

    for name, docs in rendered.items():
        sqlite = not (SCENARIOS[name].get("postgres") or {})
        ck.run(f"deployment security invariants [{name}]",
               lambda docs=docs, sqlite=sqlite: check_deployment(one(docs, "Deployment"),
                                                                  sqlite=sqlite,
                                                                  policy=policy_of(docs)))

    def need(name: str) -> list[dict[str, Any]]:
        expect(name in rendered, f"scenario {name} did not render")
        return rendered[name]

    def defaults_check() -> str:
        docs = need("defaults")
        kinds = sorted(d["kind"] for d in docs)
        expect(kinds == ["Deployment", "NetworkPolicy", "PersistentVolumeClaim", "Secret",
                         "Service", "ServiceAccount"], f"default objects {kinds}")
        c = container_of(docs)
        envs = env_map(c)
        expect(envs["GATEBOT_DATABASE_URL"].get("value") == SQLITE_URL, "default database URL")
        expect(envs["GATEBOT_LISTEN"].get("value") == "0.0.0.0:8080", "GATEBOT_LISTEN")
        expect(envs["GATEBOT_LOG_FORMAT"].get("value") == "json", "GATEBOT_LOG_FORMAT json")
        expect(envs["RUST_LOG"].get("value") == "info", "RUST_LOG")
        expect(not SECRET_ENV & set(envs), "secret env without any secret configured")
        dep = one(docs, "Deployment")
        pod = dep["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        claim = vols[mounts["/data"]].get("persistentVolumeClaim", {}).get("claimName")
        pvc = one(docs, "PersistentVolumeClaim")
        expect(claim == pvc["metadata"]["name"], "the Deployment does not mount the chart's PVC")
        expect(dep["spec"]["replicas"] == 1, "default replicas")
        svc = one(docs, "Service")
        expect(svc["spec"]["ports"][0]["port"] == 80 and svc["spec"]["ports"][0]["targetPort"]
               == "http", "service port 80 → http")
        expect(svc["metadata"]["name"] == "gatebot", "service name must be gatebot")
        sa = one(docs, "ServiceAccount")
        expect(sa.get("automountServiceAccountToken") is False, "ServiceAccount automount")
        expect(pod["serviceAccountName"] == sa["metadata"]["name"], "serviceAccountName")
        ann = dep["spec"]["template"]["metadata"]["annotations"]
        expect({"checksum/config", "checksum/secret"} <= set(ann), "checksum annotations")
        expect(not [d for d in docs if d["kind"] in ("Role", "ClusterRole", "RoleBinding",
                                                      "ClusterRoleBinding")], "RBAC rendered")
        return "SQLite on a PVC, no Secret, no RBAC"
    ck.run("defaults: SQLite on PVC, service gatebot:80", defaults_check)

    def no_persistence() -> str:
        docs = need("no-persistence")
        expect(not of_kind(docs, "PersistentVolumeClaim"), "PVC rendered with persistence off")
        pod = one(docs, "Deployment")["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in pod["volumes"]}
        expect("emptyDir" in vols["data"], "/data must be an emptyDir without persistence")
        return "emptyDir at /data"
    ck.run("persistence.enabled=false", no_persistence)

    def policy_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The NetworkPolicy's rules, after checking what every rule must hold."""
        pol = one(docs, "NetworkPolicy")
        spec = pol["spec"]
        pods = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
        sel = spec["podSelector"]["matchLabels"]
        expect(sel and all(pods.get(k) == v for k, v in sel.items()),
               f"NetworkPolicy podSelector {sel} does not select gatebot's pods")
        expect(spec.get("policyTypes") == ["Ingress"], f"policyTypes {spec.get('policyTypes')}")
        names = {p["name"] for p in container_of(docs).get("ports", [])}
        for rule in spec["ingress"]:
            # A rule without `from` (or with an empty peer) would admit everyone.
            expect(rule.get("from"), f"a rule admits every source: {rule}")
            for peer in rule["from"]:
                # Other clusters are admitted by address (extraFrom); never every address.
                if "ipBlock" in peer:
                    cidr = peer["ipBlock"].get("cidr", "")
                    expect(cidr and not cidr.endswith("/0"), f"an ipBlock admitting everyone: {peer}")
                    continue
                expect(peer.get("namespaceSelector"), f"a peer without a namespace: {peer}")
            expect(rule.get("ports") == [{"port": "http", "protocol": "TCP"}],
                   f"rule ports {rule.get('ports')}")
        expect("http" in names, "the container has no port named http")
        return spec["ingress"]

    def peer_namespaces(rule: dict[str, Any]) -> list[str]:
        return [p["namespaceSelector"]["matchLabels"].get("kubernetes.io/metadata.name", "?")
                for p in rule["from"]]

    def network_policy_default() -> str:
        rules = policy_rules(need("defaults"))
        got = [peer_namespaces(r) for r in rules]
        expect(got == [["flagger-system"], ["ingress-nginx"], ["monitoring"]],
               f"admitted namespaces {got}")
        expect(all("podSelector" not in p for r in rules for p in r["from"]),
               "default peers must be whole namespaces")
        return "on by default: flagger-system, ingress-nginx, monitoring on port http only"
    ck.run("networkPolicy: rendered by default", network_policy_default)

    def network_policy_custom() -> str:
        rules = policy_rules(need("network-policy-istio"))
        got = [peer_namespaces(r) for r in rules]
        expect(got == [["istio-system"], ["ci"]], f"admitted namespaces {got}")
        flagger = rules[0]["from"][0]
        expect(flagger.get("podSelector") == {"matchLabels": {"app.kubernetes.io/name": "flagger"}},
               f"Flagger pod selector {flagger.get('podSelector')}")
        return "istio-system Flagger pods, extraFrom; no ingress or metrics rule when empty"
    ck.run("networkPolicy: namespaces and selectors configurable", network_policy_custom)

    def network_policy_off() -> str:
        docs = need("no-network-policy")
        expect(not of_kind(docs, "NetworkPolicy"), "NetworkPolicy rendered although disabled")
        return "networkPolicy.enabled=false renders none"
    ck.run("networkPolicy: can be turned off", network_policy_off)

    def ingress_check() -> str:
        docs = need("exposed")
        ing = one(docs, "Ingress")
        spec = ing["spec"]
        expect(spec.get("ingressClassName") == "nginx", "ingressClassName")
        hosts = []
        for rule in spec["rules"]:
            hosts.append(rule.get("host"))
            paths = rule["http"]["paths"]
            got = sorted((p["path"], p["pathType"]) for p in paths)
            expect(got == sorted((p, "Exact") for p in WEBHOOK_PATHS),
                   f"Ingress must route exactly the webhook paths (Exact), got {got}")
            for p in paths:
                be = p["backend"]["service"]
                expect(be["name"] == "gatebot" and be["port"]["number"] == 80, "backend")
        expect(hosts == ["gatebot.example.com", "gatebot.example.org"], f"hosts {hosts}")
        expect(spec["tls"][0]["secretName"] == "gatebot-tls", "tls")
        text = notes(raw["exposed"])
        for p in WEBHOOK_PATHS:
            expect(f"https://gatebot.example.com{p}" in text, f"NOTES lacks the URL for {p}")
        return f"{len(WEBHOOK_PATHS)} Exact webhook paths per host; /gates and /api not exposed"
    ck.run("ingress exposes only the webhooks", ingress_check)

    def sm_pdb() -> str:
        docs = need("exposed")
        sm = one(docs, "ServiceMonitor")
        check_service_monitor(sm)
        expect(sm["metadata"]["labels"].get("release") == "prometheus", "additionalLabels")
        expect(sm["spec"]["endpoints"][0]["interval"] == "15s", "interval")
        svc = one(docs, "Service")
        sel = sm["spec"]["selector"]["matchLabels"]
        expect(all(svc["metadata"]["labels"].get(k) == v for k, v in sel.items()),
               "ServiceMonitor selector does not match the Service")
        pdb = one(docs, "PodDisruptionBudget")
        expect(pdb["spec"]["minAvailable"] == 1, "PDB minAvailable")
        tmpl = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
        expect(all(tmpl.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items()),
               "PDB selector does not match the pods")
        return "ServiceMonitor /metrics, PDB"
    ck.run("serviceMonitor and podDisruptionBudget", sm_pdb)

    def postgres_check() -> str:
        docs = need("postgres")
        dep = one(docs, "Deployment")
        expect(dep["spec"]["replicas"] == 3, "replicas")
        expect(dep["spec"]["strategy"]["type"] == "RollingUpdate", "RollingUpdate on PostgreSQL")
        expect(not of_kind(docs, "PersistentVolumeClaim"), "PVC rendered on PostgreSQL")
        c = container_of(docs)
        refs = secret_refs(c)
        expect(refs.get("GATEBOT_DATABASE_URL") == ("gatebot", "database-url", False),
               f"database URL must come from the chart's Secret, got {refs.get('GATEBOT_DATABASE_URL')}")
        secret = one(docs, "Secret")
        keys = set(secret["data"])
        for env, (sname, key, _) in refs.items():
            if env == "GATEBOT_FLAGGER_TOKENS":
                continue  # the generated token's own Secret (the Flagger tokens check)
            expect(sname == "gatebot" and key in keys, f"{env} refers to a missing key {key}")
        expect(set(refs) == SECRET_ENV - {"GATEBOT_GITHUB_APP_PRIVATE_KEY", "GATEBOT_SLACK_APP_TOKEN",
                                          "GATEBOT_TEAMS_APP_PASSWORD", "GATEBOT_CHANGE_PASSWORD",
                                          "GATEBOT_CHANGE_WEBHOOK_SECRET"}
               | {"GATEBOT_DATABASE_URL", "GATEBOT_FLAGGER_TOKENS"}, f"secret env {sorted(refs)}")
        expect(base64.b64decode(secret["data"]["database-url"]).decode()
               == SCENARIOS["postgres"]["postgres"]["url"], "database-url content")
        envs = env_map(c)
        expect(toml_tables(docs).get("slack", {}).get("approvers") == ["U0ALICE", "S0DEPLOY"],
               "approvers in the policy file's [slack]")
        expect(envs["GATEBOT_APPROVAL_TTL"]["value"] == "24h", "approval TTL")
        expect(envs["GATEBOT_GITHUB_REPOSITORY"]["value"] == "acme/shop", "repository")
        # Named tokens are hashes: a plain value, one comma-separated setting.
        expect(envs["GATEBOT_API_TOKENS"].get("value")
               == f"alice={'a1' * 32},bob={'b2' * 32}", "named API tokens")
        text = json.dumps(dep)
        for secret_value in ("hunter2", "ghp_example", "xoxb-1", "whsec"):
            expect(secret_value not in text, "a secret value appears in the Deployment")
        return "3 replicas, RollingUpdate, URL from Secret"
    ck.run("postgres: replicas and secrets", postgres_check)

    def existing_secret() -> str:
        docs = need("existing-secret")
        expect(not [d for d in of_kind(docs, "Secret") if not flagger_token_secret(d)],
               "a Secret is rendered although existingSecret is set")
        refs = secret_refs(container_of(docs))
        for env in SECRET_ENV:
            expect(env in refs and refs[env][0] == "gatebot-secrets" and refs[env][2],
                   f"{env} must come from existingSecret (optional), got {refs.get(env)}")
        expect(refs["GATEBOT_GITHUB_TOKEN"][1] == "token", "custom key name not used")
        expect(refs["GATEBOT_DATABASE_URL"][:2] == ("gatebot-secrets", "db"), "database URL ref")
        return "all secrets from gatebot-secrets"
    ck.run("existingSecret", existing_secret)

    def each_inline_secret_alone() -> str:
        # The Secret is rendered when any inline secret is set: each one alone must
        # render it, with the key its environment variable refers to.
        helpers = (chart / "templates" / "_helpers.tpl").read_text()
        table = helpers.split('define "gatebot.secretEnv"')[1].split("{{- end }}")[0]
        rows = re.findall(r"^(GATEBOT_\w+): \[([\w.]+), (\w+)\]$", table, re.M)
        expect(len(rows) >= 13, f"gatebot.secretEnv rows: {rows}")
        for env, path, _ in rows:
            values: dict[str, Any] = {}
            node = values
            *parents, leaf = path.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = {"appPrivateKey": PEM, "appToken": "xapp-1-s3cret",
                          "workflowUrl": "https://prod.example.com/workflows/1"}.get(leaf, "s3cret")
            if path == "github.appPrivateKey":
                values["github"]["appId"] = "12345"
            docs = manifests(render(chart, values))
            secrets = [d for d in of_kind(docs, "Secret") if not flagger_token_secret(d)]
            expect(len(secrets) == 1, f"{path} alone renders {len(secrets)} Secrets")
            ref = secret_refs(container_of(docs)).get(env)
            expect(ref is not None and ref[0] == secrets[0]["metadata"]["name"]
                   and ref[1] in secrets[0].get("data", {}),
                   f"{path} alone: {env} refers to {ref}, Secret keys {sorted(secrets[0].get('data', {}))}")
        return f"{len(rows)} inline secrets, each alone in the chart's Secret"
    ck.run("each inline secret alone renders the Secret", each_inline_secret_alone)

    def templates_check() -> str:
        docs = need("templates")
        cms = {cm["metadata"]["name"]: cm for cm in of_kind(docs, "ConfigMap")}
        tcm = cms.get("gatebot-templates")
        expect(tcm is not None, f"no templates ConfigMap in {sorted(cms)}")
        overrides = SCENARIOS["templates"]["templates"]["overrides"]
        expect(set(tcm["data"]) == {k.replace("/", "__") for k in overrides},
               f"ConfigMap keys {sorted(tcm['data'])}")
        for k, v in overrides.items():
            expect(tcm["data"][k.replace("/", "__")] == v, f"content of {k}")
        pcm = cms.get("gatebot-policy")
        expect(pcm is not None and pcm["data"]["policy.toml"].strip()
               == SCENARIOS["templates"]["policy"].strip()
               + '\n[templates]\ndir = "/etc/gatebot/templates"', "policy ConfigMap")
        dep = one(docs, "Deployment")
        pod = dep["spec"]["template"]["spec"]
        c = container_of(docs)
        envs = env_map(c)
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        vols = {v["name"]: v for v in pod["volumes"]}
        tdir = toml_tables(docs)["templates"]["dir"]
        tvol = next(n for n, m in mounts.items() if m["mountPath"] == tdir)
        items = {i["key"]: i["path"] for i in vols[tvol]["configMap"]["items"]}
        expect(vols[tvol]["configMap"]["name"] == "gatebot-templates", "templates volume")
        expect(items == {k.replace("/", "__"): k for k in overrides}, f"items {items}")
        policy = envs["GATEBOT_POLICY"]["value"]
        pvol = next(n for n, m in mounts.items() if policy.startswith(m["mountPath"] + "/"))
        expect(vols[pvol]["configMap"]["name"] == "gatebot-policy", "policy volume")
        expect(policy.endswith("/policy.toml"), "policy file name")
        expect(envs["GATEBOT_LOG_FORMAT"]["value"] == "text", "logFormat text")
        expect(envs["RUST_LOG"]["value"] == "info,gatebot=debug", "logLevel")
        for m in (mounts[tvol], mounts[pvol]):
            expect(m.get("readOnly") is True, "config mounts must be read-only")
        return f"{len(items)} templates under {tdir}, policy at {policy}"
    ck.run("templates.overrides and policy", templates_check)

    def github_app() -> str:
        docs = need("github-app")
        c = container_of(docs)
        envs = env_map(c)
        expect(envs["GATEBOT_GITHUB_APP_ID"]["value"] == "123456", "GATEBOT_GITHUB_APP_ID")
        expect(envs["GATEBOT_GITHUB_API_URL"]["value"] == "https://ghe.example.com/api/v3", "api")
        refs = secret_refs(c)
        expect(refs.get("GATEBOT_GITHUB_APP_PRIVATE_KEY", ("",))[0] == "gatebot", "private key")
        expect("GATEBOT_GITHUB_TOKEN" not in envs, "token set with a GitHub App")
        expect(not of_kind(docs, "PersistentVolumeClaim"), "PVC rendered with existingClaim")
        pod = one(docs, "Deployment")["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in pod["volumes"]}
        expect(vols["data"]["persistentVolumeClaim"]["claimName"] == "my-claim", "existingClaim")
        return "app id + private key from Secret"
    ck.run("github app", github_app)

    def limits_check() -> str:
        docs = need("limits")
        cms = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
        text = cms["gatebot-policy"]["data"]["policy.toml"]
        want = ['body_read_timeout = "5s"', 'header_read_timeout = "3s"', 'idle_timeout = "75s"',
                'request_timeout = "8s"', "max_connections = 256", 'retention_audit = "0"',
                'retention_history = "30d"', 'evidence_refresh = "1m"']
        expect(text.startswith("[github]\nforbid_self_approval = true\n[limits]\n"), f"policy then [limits]: {text!r}")
        for line in want:
            expect(line in text.splitlines(), f"{line} not in {text!r}")
        envs = env_map(container_of(docs))
        expect(envs["GATEBOT_POLICY"]["value"].endswith("/policy.toml"), "GATEBOT_POLICY")
        moved = [k for k in envs if k.startswith(("GATEBOT_RETENTION_", "GATEBOT_EVIDENCE_"))
                 or k in ("GATEBOT_HEADER_READ_TIMEOUT", "GATEBOT_IDLE_TIMEOUT", "GATEBOT_MAX_CONNECTIONS",
                          "GATEBOT_BODY_READ_TIMEOUT", "GATEBOT_REQUEST_TIMEOUT", "GATEBOT_PROMETHEUS_TIMEOUT")]
        expect(not moved, f"limits as variables: {moved}")
        defaults = need("defaults")
        expect(not any(d["kind"] == "ConfigMap" and "policy.toml" in d.get("data", {}) for d in defaults),
               "a policy ConfigMap although nothing sets one")
        url = envs["GATEBOT_PROMETHEUS_URL"]["value"]
        expect(url == "http://gate%20bot@prometheus.istio-system:9090",
               f"evidence.username as metricsServer's user part: {url}")
        return ("limits.*, retention.*, evidence.refresh into the policy file's [limits]; none by "
                "default; evidence.username in metricsServer")
    ck.run("limits (timeouts and connection limit)", limits_check)

    def checksums() -> str:
        def ann(values: dict[str, Any]) -> dict[str, str]:
            dep = one(manifests(render(chart, values)), "Deployment")
            return dep["spec"]["template"]["metadata"]["annotations"]
        base = ann({"policy": "a: 1\n", "adminToken": "one"})
        expect(ann({"policy": "a: 2\n", "adminToken": "one"})["checksum/config"]
               != base["checksum/config"], "checksum/config does not follow the policy")
        expect(ann({"policy": "a: 1\n", "adminToken": "two"})["checksum/secret"]
               != base["checksum/secret"], "checksum/secret does not follow the secrets")
        return "config and secret changes roll the pods"
    ck.run("checksum annotations", checksums)

    def flagger_tokens_check() -> str:
        import base64
        import hashlib
        docs = need("defaults")
        secret = next(d for d in of_kind(docs, "Secret") if flagger_token_secret(d))
        expect(secret["metadata"].get("annotations", {}).get("helm.sh/resource-policy") == "keep",
               "the Flagger token Secret must be kept (helm.sh/resource-policy: keep)")
        data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        expect(len(data.get("token", "")) >= 32, "the generated Flagger token is at least 32 characters")
        want = "default=" + hashlib.sha256(data["token"].encode()).hexdigest()
        expect(data.get("tokens") == want, "GATEBOT_FLAGGER_TOKENS holds the token's SHA-256, not the token")
        env = env_map(one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0])
        ref = env["GATEBOT_FLAGGER_TOKENS"]["valueFrom"]["secretKeyRef"]
        expect(ref == {"name": "gatebot-flagger-token", "key": "tokens"}, f"GATEBOT_FLAGGER_TOKENS from {ref}")
        off = need("flagger-tokens-off")
        expect(not [d for d in of_kind(off, "Secret") if flagger_token_secret(d)], "a token Secret with tokens off")
        expect("GATEBOT_FLAGGER_TOKENS" not in env_map(one(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]),
               "GATEBOT_FLAGGER_TOKENS set with tokens off")
        mine = need("flagger-tokens-existing")
        expect(not [d for d in of_kind(mine, "Secret") if flagger_token_secret(d)], "a token Secret beside flaggerTokens.existingSecret")
        ref = env_map(one(mine, "Deployment")["spec"]["template"]["spec"]["containers"][0])["GATEBOT_FLAGGER_TOKENS"]["valueFrom"]["secretKeyRef"]
        expect(ref == {"name": "flagger", "key": "setting"}, f"GATEBOT_FLAGGER_TOKENS from {ref}")
        return "on by default: a generated token kept across upgrades, its SHA-256 in GATEBOT_FLAGGER_TOKENS"
    ck.run("Flagger tokens", flagger_tokens_check)

    def notes_check() -> str:
        text = notes(raw["defaults"])
        for kind in ("start", "promote", "traffic", "rollback"):
            url = f"http://gatebot.{NAMESPACE}/gates/t/$FLAGGER_TOKEN/{kind}/pr/42"
            expect(url in text, f"NOTES lacks {url}")
        expect(f"http://gatebot.{NAMESPACE}/flagger/events?token=$FLAGGER_TOKEN" in text,
               "NOTES lacks /flagger/events with the token")
        expect("get secret gatebot-flagger-token -o jsonpath='{.data.token}'" in text,
               "NOTES does not say where the Flagger token is")
        admin = notes(raw["existing-secret"])
        expect("get secret gatebot-secrets -o jsonpath='{.data.admin-token}'" in admin
               and 'curl -s -H "Authorization: Bearer $GATEBOT_ADMIN_TOKEN" http://localhost:8080/api/v1/gates' in admin,
               "NOTES: with an admin token, the API call must send it")
        off = notes(raw["flagger-tokens-off"])
        expect(f"http://gatebot.{NAMESPACE}/gates/promote/pr/42" in off and "WARNING: flaggerTokens.enabled=false" in off,
               "NOTES without tokens: plain URLs and a warning")
        for p in WEBHOOK_PATHS:
            expect(p in text, f"NOTES lacks {p}")
        return "gate, event and webhook URLs"
    ck.run("NOTES.txt", notes_check)

    def refuses(values: dict[str, Any], needle: str, *, image: bool = True) -> Callable[[], str]:
        def fn() -> str:
            try:
                render(chart, values, image=image)
            except helm.HelmError as exc:
                expect(needle in str(exc), f"failed, but without {needle!r}: {exc}")
                return needle
            raise AssertionError(f"rendered although it must fail: {values}")
        return fn

    ck.run("an empty image.repository fails, saying what to set",
           refuses({"image": {"repository": ""}}, "image.repository is empty: leave it unset for "
                   f"the published {PUBLISHED_IMAGE}, or build the image from the repository's "
                   "Dockerfile, push it, and pass --set image.repository=", image=False))

    def default_image() -> str:
        c = container_of(manifests(render(chart, {}, image=False)))
        app_version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
        want = f"{PUBLISHED_IMAGE}:{app_version}"
        expect(c["image"] == want, f"the default image is {c['image']}, not {want}")
        return want
    ck.run("the default image is the published one at the chart's appVersion", default_image)
    ck.run("replicaCount 2 on SQLite fails",
           refuses({"replicaCount": 2},
                   "replicaCount is 2 but the store is SQLite, which only one pod may use"))
    ck.run("inline secret with existingSecret fails",
           refuses({"existingSecret": "s", "slack": {"botToken": "xoxb"}},
                   "slack.botToken is set inline but existingSecret"))
    ck.run("postgres.url with existingSecret fails",
           refuses({"existingSecret": "s", "postgres": {"url": "postgres://a:b@c/d"}},
                   "postgres.url is a secret"))
    ck.run("apiTokens with a token in place of its hash fails",
           refuses({"apiTokens": ["alice=the-token-itself"]}, "apiTokens"))

    observability_checks(ck, chart, need)

    def private_cluster() -> str:
        docs = need("private-cluster")
        c = container_of(docs)
        envs = env_map(c)
        expect(toml_tables(docs).get("loadtester") == {"open_access": True},
               "loadtester.openAccess sets [loadtester] open_access")
        expect("loadtester" not in toml_tables(need("defaults")), "open access is off by default")
        pod = one(docs, "Deployment")["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in pod["volumes"]}
        expect(vols.get("ca") == {"name": "ca", "configMap": {"name": "corporate-ca"}}, "volumes")
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        expect(mounts.get("ca", {}).get("mountPath") == "/etc/gatebot/ca", "volumeMounts")
        expect("/tmp" in {m["mountPath"] for m in c["volumeMounts"]}, "the chart's mounts stay")
        # Socket Mode: the app token from the chart's Secret, never in the Deployment.
        refs = secret_refs(c)
        expect(refs.get("GATEBOT_SLACK_APP_TOKEN") == ("gatebot", "slack-app-token", False),
               f"app token from the Secret, got {refs.get('GATEBOT_SLACK_APP_TOKEN')}")
        secret = one(docs, "Secret")
        expect(base64.b64decode(secret["data"]["slack-app-token"]).decode() == "xapp-1-A0-1-secret",
               "slack-app-token content")
        expect("xapp-1-A0-1-secret" not in json.dumps(one(docs, "Deployment")),
               "the app token appears in the Deployment")
        return "loadtester.openAccess, extra volumes and mounts, Socket Mode token"

    def teams() -> str:
        docs = need("teams")
        c = container_of(docs)
        envs = env_map(c)
        values = SCENARIOS["teams"]["teams"]
        expect(envs.get("GATEBOT_TEAMS_APP_ID", {}).get("value") == values["appId"], "app id")
        expect(envs.get("GATEBOT_TEAMS_TENANTS", {}).get("value") == ",".join(values["tenants"]),
               "tenants, comma-separated")
        expect(toml_tables(docs).get("teams", {}).get("approvers") == values["approvers"],
               "approvers in the policy file's [teams]")
        expect("GATEBOT_TEAMS_TENANT" not in envs, "no single tenant unless set")
        expect(not any(n.startswith("GATEBOT_TEAMS_") for n in env_map(container_of(need("defaults")))),
               "Teams is off by default")
        refs = secret_refs(c)
        expect(refs.get("GATEBOT_TEAMS_APP_PASSWORD") == ("gatebot", "teams-app-password", False),
               f"app password from the Secret, got {refs.get('GATEBOT_TEAMS_APP_PASSWORD')}")
        secret = one(docs, "Secret")
        expect(base64.b64decode(secret["data"]["teams-app-password"]).decode() == "teams-secret-1",
               "teams-app-password content")
        expect("teams-secret-1" not in json.dumps(one(docs, "Deployment")),
               "the app password appears in the Deployment")
        return "app id and tenants in env, approvers in the policy file; the password from the Secret"
    ck.run("loadtester.openAccess, volumes and volumeMounts, Socket Mode", private_cluster)
    ck.run("Teams: settings in env and the policy file, the app password from the Secret", teams)

    def change() -> str:
        docs = need("change")
        c = container_of(docs)
        envs = env_map(c)
        values = SCENARIOS["change"]["change"]
        expect(envs.get("GATEBOT_CHANGE_USER") == {"name": "GATEBOT_CHANGE_USER", "value": values["user"]},
               f"the user as a plain value, got {envs.get('GATEBOT_CHANGE_USER')}")
        refs = secret_refs(c)
        secret = one(docs, "Secret")
        for env, key, value in (("GATEBOT_CHANGE_PASSWORD", "change-password", values["password"]),
                                ("GATEBOT_CHANGE_WEBHOOK_SECRET", "change-webhook-secret",
                                 values["webhookSecret"])):
            expect(refs.get(env) == ("gatebot", key, False), f"{env} from the Secret, got {refs.get(env)}")
            expect(base64.b64decode(secret["data"].get(key, "")).decode() == value, f"{key} content")
            expect(value not in json.dumps(one(docs, "Deployment")), f"{env}'s value appears in the Deployment")
        expect(not any(n.startswith("GATEBOT_CHANGE_") for n in env_map(container_of(need("defaults")))),
               "GATEBOT_CHANGE_* set by default")
        expect("provider" in toml_tables(docs).get("change", {}), "the policy's [change] table kept")
        # With existingSecret the keys are read from it (optional), like every other secret.
        mine = secret_refs(container_of(manifests(render(chart, {
            "existingSecret": "gatebot-secrets", "change": {"user": "svc", "webhook": True}}))))
        for env, key in (("GATEBOT_CHANGE_PASSWORD", "change-password"),
                         ("GATEBOT_CHANGE_WEBHOOK_SECRET", "change-webhook-secret")):
            expect(mine.get(env) == ("gatebot-secrets", key, True), f"{env} from existingSecret, got {mine.get(env)}")
        return "the user in env; password and webhook secret from the Secret; none by default"
    ck.run("change: the user in env, the password and webhook secret from the Secret", change)

    def change_ingress() -> str:
        ing = one(need("change"), "Ingress")
        for rule in ing["spec"]["rules"]:
            got = sorted((p["path"], p["pathType"]) for p in rule["http"]["paths"])
            expect(got == sorted((p, "Exact") for p in WEBHOOK_PATHS + [CHANGE_WEBHOOK_PATH]),
                   f"with change.webhook the Ingress routes the webhooks and {CHANGE_WEBHOOK_PATH}, got {got}")
        expect(f"https://gatebot.example.com{CHANGE_WEBHOOK_PATH}" in notes(raw["change"]),
               "NOTES lacks the change webhook's URL")
        exposed = one(need("exposed"), "Ingress")
        expect(all(p["path"] != CHANGE_WEBHOOK_PATH for r in exposed["spec"]["rules"]
                   for p in r["http"]["paths"]), f"{CHANGE_WEBHOOK_PATH} routed without change.webhook")
        expect(CHANGE_WEBHOOK_PATH not in notes(raw["exposed"]) and CHANGE_WEBHOOK_PATH not in notes(raw["defaults"]),
               f"NOTES names {CHANGE_WEBHOOK_PATH} although it is not routed")
        return f"{CHANGE_WEBHOOK_PATH} (Exact) only with change.webhook, and its URL in NOTES"
    ck.run("ingress routes /webhooks/change only with change.webhook", change_ingress)
    ck.run("change.webhook without a webhook secret fails",
           refuses({"change": {"webhook": True}, "ingress": {"enabled": True}},
                   "change.webhook is true but no webhook secret is set: set change.webhookSecret, "
                   "or existingSecret with the secret under key \"change-webhook-secret\""))
    ck.run("change.password inline with existingSecret fails",
           refuses({"existingSecret": "s", "change": {"password": "p"}},
                   "change.password is set inline but existingSecret"))

    def kubernetes_lookup() -> str:
        docs = need("kubernetes-lookup")
        k = toml_tables(docs).get("kubernetes", {})
        expect(k.get("lookup") is True, "kubernetes.lookup.enabled sets [kubernetes] lookup")
        expect(k.get("container") == "app", "kubernetes.lookup.container")
        expect(k.get("commit_annotation") == "gatebot.dev/commit", "the commit annotation's default")
        sa = one(docs, "ServiceAccount")
        expect(sa.get("automountServiceAccountToken") is True, "the token is mounted")
        role = one(docs, "ClusterRole")
        rules = {(g, r): sorted(rule["verbs"]) for rule in role["rules"]
                 for g in rule["apiGroups"] for r in rule["resources"]}
        expect(rules == {("flagger.app", "canaries"): ["get"], ("apps", "deployments"): ["get"],
                         ("apps", "daemonsets"): ["get"]}, f"read-only rules, got {rules}")
        binding = one(docs, "ClusterRoleBinding")
        expect(binding["roleRef"]["name"] == role["metadata"]["name"], "binding's role")
        expect(binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                        "namespace": sa["metadata"].get("namespace", "default")}]
               or binding["subjects"][0]["name"] == sa["metadata"]["name"], "binding's subject")
        expect("kubernetes" not in toml_tables(need("defaults")), "off by default")
        return "ClusterRole get on canaries, deployments, daemonsets; token mounted; [kubernetes] set"
    ck.run("kubernetes.lookup: read-only ClusterRole, binding, env", kubernetes_lookup)
    def app_secret() -> str:
        docs = need("app-secret")
        expect(toml_tables(docs).get("kubernetes", {}).get("app_secret") == "gatebot-github-app",
               "kubernetes.appSecret sets [kubernetes] app_secret")
        secrets = {d["metadata"]["name"]: d for d in of_kind(docs, "Secret")}
        kept = secrets.get("gatebot-github-app", {})
        expect(kept.get("metadata", {}).get("annotations", {}).get("helm.sh/resource-policy")
               == "keep" and not kept.get("data"), "an empty Secret, kept on uninstall")
        role = one(docs, "Role")
        expect(role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                                  "resourceNames": ["gatebot-github-app"],
                                  "verbs": ["get", "patch"]}], f"one Secret only: {role['rules']}")
        expect(one(docs, "RoleBinding")["roleRef"]["name"] == role["metadata"]["name"], "binding")
        expect(not of_kind(docs, "ClusterRole"), "no ClusterRole without kubernetes.lookup")
        expect(one(docs, "ServiceAccount").get("automountServiceAccountToken") is True, "token")
        return "an empty kept Secret, a Role on it alone (get, patch), env set"
    ck.run("kubernetes.appSecret: one Secret, a Role on it", app_secret)
    def internal_lb() -> str:
        docs = need("internal-lb")
        svc = one(docs, "Service")
        expect(svc["metadata"].get("annotations") == {"networking.gke.io/load-balancer-type": "Internal"},
               f"service.annotations: {svc['metadata'].get('annotations')}")
        expect(svc["spec"]["type"] == "LoadBalancer"
               and svc["spec"].get("loadBalancerSourceRanges") == ["10.20.0.0/16"], "type and source ranges")
        expect("loadBalancerSourceRanges" not in one(need("defaults"), "Service")["spec"], "ClusterIP: no ranges")
        rules = policy_rules(docs)
        expect(rules[-1]["from"] == [{"ipBlock": {"cidr": "10.20.0.0/16"}}], f"extraFrom ipBlock: {rules[-1]}")
        expect(not of_kind(docs, "Ingress"), "no Ingress for a load balancer")
        text = notes(raw["internal-lb"])
        expect("http://<load balancer address of service gatebot>/gates/t/$FLAGGER_TOKEN/promote/pr/42" in text,
               "NOTES: the other cluster's URL through the load balancer")
        return "annotations, source ranges, an ipBlock peer, the remote URL in NOTES"
    ck.run("service: an internal load balancer for other clusters", internal_lb)
    ck.run("gatesIngress without Flagger tokens fails",
           refuses({"flaggerTokens": {"enabled": False}, "gatesIngress": {"enabled": True, "hosts": ["g.example"]}},
                   "exposes the gates beyond the cluster, but flaggerTokens.enabled is false"))
    ck.run("a LoadBalancer without Flagger tokens fails",
           refuses({"flaggerTokens": {"enabled": False}, "service": {"type": "LoadBalancer"}},
                   "exposes the gates beyond the cluster, but flaggerTokens.enabled is false"))
    ck.run("remoteClusters beside flaggerTokens.existingSecret fails",
           refuses({"flaggerTokens": {"existingSecret": "s", "remoteClusters": ["prod-us"]}},
                   "flaggerTokens.remoteClusters is set but flaggerTokens.existingSecret too"))
    ck.run("remoteClusters naming this cluster fails",
           refuses({"flaggerTokens": {"cluster": "prod-eu", "remoteClusters": ["prod-eu"]}},
                   "flaggerTokens.remoteClusters lists \"prod-eu\", which is this cluster"))
    ck.run("kubernetes.lookup without GitHub credentials fails",
           refuses({"kubernetes": {"lookup": {"enabled": True}}}, "kubernetes.lookup.enabled"))

    # The example values files shipped with the chart must render and pass the same checks.
    for example in sorted((ROOT / "deploy" / "examples").glob("values-*.yaml")):
        def ex(example: Path = example) -> str:
            values = yaml.safe_load(example.read_text()) or {}
            docs = manifests(render(chart, values))
            validate_k8s(docs)
            sqlite = not (values.get("postgres") or {})
            return check_deployment(one(docs, "Deployment"), sqlite=sqlite,
                                    policy=policy_of(docs))
        ck.run(f"example {example.relative_to(ROOT)}", ex)


# --------------------------------------------------------------------------- observability

ALERTS = {"GatebotNotificationsFailing", "GatebotNotificationsDropped", "GatebotWaitPastDeadline",
          "GatebotSignatureFailures", "GatebotStoreNotReady", "GatebotSlackSocketModeDown",
          "GatebotClockSkew", "GatebotStoreFilling", "GatebotDeliveriesOverdue",
          "GatebotBudgetRefused"}
DASHBOARD_PANELS = {"Waits open", "Waits started", "Approvals by channel", "Time to decision",
                    "Oldest pending notification", "Queue depth",
                    "GitHub and Slack calls by result", "Gate checks by kind and result",
                    "Gate check latency", "Slack Socket Mode connections",
                    "Slack Socket Mode envelopes", "Clock offset to the database",
                    "Store size", "Store rows by table"}
METRIC = re.compile(r"\bgatebot_[a-z0-9_]+")


def exported_series(binary: str) -> set[str]:
    """Every series name the real binary's /metrics can carry (counters as `_total`,
    histograms as `_bucket`/`_sum`/`_count`), from its `# TYPE` lines."""
    import socket
    import tempfile
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        env = {"PATH": os.environ.get("PATH", ""), "GATEBOT_LISTEN": f"127.0.0.1:{port}",
               "GATEBOT_DATABASE_URL": f"sqlite://{tmp}/gatebot.db"}
        # Its logs go to a file: a pipe nobody reads could fill and stall it.
        log = open(Path(tmp) / "log", "w+")  # noqa: SIM115 - closed below
        proc = subprocess.Popen([binary, "serve"], cwd=tmp, env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
        # Straight to 127.0.0.1, whatever http_proxy says.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                        text = r.read().decode()
                    break
                except OSError:
                    if proc.poll() is not None:
                        log.seek(0)
                        raise AssertionError(f"gatebot exited: {log.read()}")
                    expect(time.monotonic() < deadline, "gatebot did not serve /metrics in 20 s")
                    time.sleep(0.05)
        finally:
            proc.kill()
            proc.wait()
            log.close()
    names: set[str] = set()
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"],
                "gauge": [""], "info": ["_info"]}
    for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M):
        name, kind = m.groups()
        for suffix in suffixes.get(kind, [""]):
            names.add(name + suffix)
    expect(names, "no # TYPE lines in /metrics")
    return names


def observability_checks(ck: Checks, chart: Path,
                         need: Callable[[str], list[dict[str, Any]]]) -> None:
    dashboard_file = chart / "dashboards" / "gatebot.json"

    def chart_metadata() -> str:
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        expect(str(meta.get("home", "")).startswith("https://"), "Chart.yaml home")
        expect(meta.get("sources") and all(str(u).startswith("https://")
                                            for u in meta["sources"]), "Chart.yaml sources")
        expect(meta.get("maintainers") and all(m.get("name") for m in meta["maintainers"]),
               "Chart.yaml maintainers")
        return "home, sources, maintainers"
    ck.run("Chart.yaml home, sources, maintainers", chart_metadata)

    def readme() -> str:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import chart_readme  # noqa: PLC0415 - beside this file
        want = chart_readme.render(chart)
        path = chart / "README.md"
        expect(path.is_file() and path.read_text() == want,
               f"{path.relative_to(ROOT)} is not what values.yaml's `# --` comments give: "
               "run bash .ci/deploy-check.sh --write-readme")
        return f"{len(chart_readme.described((chart / 'values.yaml').read_text()))} values"
    ck.run("chart README.md generated from values.yaml", readme)

    def default_off() -> str:
        docs = need("defaults")
        kinds = {d["kind"] for d in docs}
        expect("PrometheusRule" not in kinds, "PrometheusRule rendered by default")
        expect(not [d for d in of_kind(docs, "ConfigMap")
                    if "grafana_dashboard" in d["metadata"].get("labels", {})],
               "dashboard ConfigMap rendered by default")
        ann = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        expect(not any(k.startswith("prometheus.io/") for k in ann), "scrape annotations by default")
        return "no rule, no dashboard, no scrape annotations"
    ck.run("observability is opt-in", default_off)

    state: dict[str, Any] = {}

    def rule() -> str:
        docs = need("observability")
        pr = one(docs, "PrometheusRule")
        expect(pr["metadata"]["labels"].get("release") == "prometheus", "additionalLabels")
        rules = [r for g in pr["spec"]["groups"] for r in g["rules"]]
        names = {r["alert"] for r in rules}
        expect(names == ALERTS, f"alerts {sorted(names)}")
        for r in rules:
            expect(r["labels"].get("team") == "delivery", f"alertLabels on {r['alert']}")
            expect(METRIC.search(r["expr"]), f"{r['alert']} names no gatebot metric")
        state["exprs"] = {r["alert"]: r["expr"] for r in rules}
        return ", ".join(sorted(names))
    ck.run("PrometheusRule alerts", rule)

    def dashboard() -> str:
        docs = need("observability")
        cms = [d for d in of_kind(docs, "ConfigMap")
               if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
        expect(len(cms) == 1, f"one ConfigMap labelled grafana_dashboard, found {len(cms)}")
        cm = cms[0]
        expect(cm["metadata"].get("annotations") == {"grafana_folder": "Flagger"}, "annotations")
        shipped = json.loads(dashboard_file.read_text())
        expect(json.loads(cm["data"]["gatebot.json"]) == shipped,
               "the ConfigMap's dashboard differs from dashboards/gatebot.json")
        titles = {p["title"] for p in shipped["panels"]}
        expect(DASHBOARD_PANELS <= titles, f"panels missing: {sorted(DASHBOARD_PANELS - titles)}")
        ids = [p["id"] for p in shipped["panels"]]
        expect(len(ids) == len(set(ids)), "panel ids repeat")
        exprs = [t["expr"] for p in shipped["panels"] for t in p.get("targets", [])]
        state["dashboard"] = exprs
        return f"{len(shipped['panels'])} panels, {len(exprs)} queries"
    ck.run("Grafana dashboard ConfigMap", dashboard)

    def scrape() -> str:
        ann = one(need("observability"), "Deployment")["spec"]["template"]["metadata"]["annotations"]
        want = {"prometheus.io/scrape": "true", "prometheus.io/port": "8080",
                "prometheus.io/path": "/metrics"}
        expect({k: ann.get(k) for k in want} == want, f"scrape annotations {ann}")
        return "prometheus.io/scrape, port, path"
    ck.run("prometheus.io pod annotations", scrape)

    def metrics_exist() -> str:
        binary = os.environ.get("GATEBOT_BIN", "")
        expect(binary and Path(binary).is_file(), f"GATEBOT_BIN {binary!r} is not the binary")
        exported = exported_series(binary)
        used: dict[str, set[str]] = {}
        for where, exprs in (("alert", state.get("exprs", {}).values()),
                             ("dashboard", state.get("dashboard", []))):
            for e in exprs:
                for name in METRIC.findall(e):
                    used.setdefault(name, set()).add(where)
        expect(used, "no metric names found in the rules and the dashboard")
        missing = sorted(f"{n} ({', '.join(sorted(w))})" for n, w in used.items()
                         if n not in exported)
        expect(not missing, f"not exported by {binary}: {missing}")
        return f"{len(used)} metric names, all in /metrics"
    ck.run("alerts and dashboard use only exported metrics", metrics_exist)


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


# --------------------------------------------------------------------------- kustomize

def assemble_kustomization(base: Path) -> list[dict[str, Any]]:
    """What `kustomize build` gives for this base: its resources, with `images` applied.

    Only the fields the base uses are supported; anything else is refused so that the
    fallback never silently differs from kustomize.
    """
    kz = yaml.safe_load((base / "kustomization.yaml").read_text())
    supported = {"apiVersion", "kind", "resources", "images"}
    extra = set(kz) - supported
    expect(not extra, f"kustomization.yaml uses {sorted(extra)}, which the fallback cannot apply")
    docs: list[dict[str, Any]] = []
    for res in kz.get("resources", []):
        path = base / res
        expect(path.is_file(), f"resource {res} is not a file of the base")
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    images = {i["name"]: i for i in kz.get("images", [])}
    for d in docs:
        pod = d.get("spec", {}).get("template", {}).get("spec", {})
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            name, _, tag = c["image"].partition(":")
            if name in images:
                img = images[name]
                c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag or 'latest')}"
    return docs


def kustomize_checks(ck: Checks, base: Path, kubectl: str | None) -> None:
    state: dict[str, list[dict[str, Any]]] = {}

    def build() -> str:
        assembled = assemble_kustomization(base)
        state["docs"] = assembled
        if not kubectl:
            return f"assembled in Python from kustomization.yaml: {len(assembled)} objects"
        out = subprocess.run([kubectl, "kustomize", str(base)], check=False,
                             capture_output=True, text=True, timeout=120)
        expect(out.returncode == 0, f"kubectl kustomize failed: {out.stderr.strip()}")
        docs = [d for d in yaml.safe_load_all(out.stdout) if d]
        key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
        expect(sorted(map(key, docs)) == sorted(map(key, assembled)),
               "kubectl kustomize and the Python assembly disagree on the objects")
        expect(sorted(json.dumps(d, sort_keys=True) for d in docs)
               == sorted(json.dumps(d, sort_keys=True) for d in assembled),
               "kubectl kustomize and the Python assembly disagree on the content")
        state["docs"] = docs
        return f"kubectl kustomize: {len(docs)} objects, identical to the Python assembly"
    if not ck.run("kustomize build deploy/kustomize/base", build):
        return
    docs = state["docs"]
    ck.run(f"kustomize kubernetes-validate --strict {KUBE_VERSION}", lambda: validate_k8s(docs))
    ck.run("kustomize deployment security invariants",
           lambda: check_deployment(one(docs, "Deployment"), sqlite=True))

    def shape() -> str:
        kinds = sorted(d["kind"] for d in docs)
        for k in ("Deployment", "Service", "ServiceAccount", "PersistentVolumeClaim"):
            expect(k in kinds, f"kustomize base lacks a {k}")
        c = container_of(docs)
        sources = c.get("envFrom", [])
        secret = [s["secretRef"] for s in sources if "secretRef" in s]
        expect(secret and secret[-1]["name"] == "gatebot" and secret[-1].get("optional") is True,
               "envFrom must end with the Secret gatebot, optional: true")
        expect("secretRef" in sources[-1], "the Secret must come last in envFrom (it wins)")
        cm_names = [s["configMapRef"]["name"] for s in sources if "configMapRef" in s]
        settings: dict[str, str] = {}
        for cm in of_kind(docs, "ConfigMap"):
            if cm["metadata"]["name"] in cm_names:
                settings.update(cm.get("data", {}))
        settings.update({n: e.get("value") for n, e in env_map(c).items()})
        expect(settings.get("GATEBOT_DATABASE_URL") == SQLITE_URL, "database URL")
        unknown = {n for n in settings if n.startswith("GATEBOT_") or n == "RUST_LOG"} - KNOWN_ENV
        expect(not unknown, f"unknown settings {sorted(unknown)}")
        expect(not (SECRET_ENV & set(settings)), "secrets in plain configuration")
        svc = one(docs, "Service")
        expect(svc["metadata"]["name"] == "gatebot" and svc["spec"]["ports"][0]["port"] == 80,
               "Service gatebot:80")
        return ", ".join(kinds)
    ck.run("kustomize base shape", shape)


# --------------------------------------------------------------------------- manifests

def app_manifest_checks(ck: Checks) -> None:
    def slack() -> str:
        m = yaml.safe_load((ROOT / "deploy" / "slack-app-manifest.yaml").read_text())
        expect(m["display_information"]["name"] == "gatebot", "display name")
        scopes = m["oauth_config"]["scopes"]
        expect(sorted(scopes.get("bot", [])) == ["chat:write", "commands", "usergroups:read"],
               f"bot scopes {scopes.get('bot')}")
        expect(not scopes.get("user"), "user scopes must not be requested")
        st = m["settings"]
        expect(st["interactivity"]["is_enabled"] is True and st["interactivity"]["request_url"]
               == "https://gatebot.example.com/webhooks/slack/interactions", "interactivity")
        expect(st["org_deploy_enabled"] is False and st["socket_mode_enabled"] is False,
               "org_deploy_enabled / socket_mode_enabled must be false")
        expect("event_subscriptions" not in st, "no event subscriptions are needed")
        cmds = m["features"]["slash_commands"]
        expect(len(cmds) == 1, "one slash command")
        cmd = cmds[0]
        expect(cmd["command"] == "/gatebot", "command name")
        expect(cmd["url"] == "https://gatebot.example.com/webhooks/slack/commands", "command url")
        expect(cmd["usage_hint"] == "promote 42 | status | help", "usage hint")
        return "3 bot scopes, /gatebot, interactivity"
    ck.run("slack app manifest", slack)

    def slack_socket_mode() -> str:
        http = yaml.safe_load((ROOT / "deploy" / "slack-app-manifest.yaml").read_text())
        m = yaml.safe_load((ROOT / "deploy" / "slack-app-manifest.socket-mode.yaml").read_text())
        expect(m["oauth_config"] == http["oauth_config"], "the same bot scopes as the HTTP app")
        expect(m["display_information"] == http["display_information"], "the same app")
        st = m["settings"]
        expect(st["socket_mode_enabled"] is True, "socket_mode_enabled must be true")
        expect(st["interactivity"] == {"is_enabled": True},
               f"interactivity without a request URL, got {st['interactivity']}")
        expect(st["org_deploy_enabled"] is False and "event_subscriptions" not in st,
               "no org deploy, no event subscriptions")
        cmds = m["features"]["slash_commands"]
        expect([c["command"] for c in cmds] == ["/gatebot"] and "url" not in cmds[0],
               "/gatebot without a URL")
        expect("example.com" not in (ROOT / "deploy" / "slack-app-manifest.socket-mode.yaml")
               .read_text(), "no host to replace in Socket Mode")
        return "Socket Mode on, no URLs, the same scopes"
    ck.run("slack app manifest (Socket Mode)", slack_socket_mode)

    def github() -> str:
        m = json.loads((ROOT / "deploy" / "github-app-manifest.json").read_text())
        expect(m["default_permissions"] == {"actions": "read",
                                            "issues": "write", "pull_requests": "read",
                                            "checks": "write", "deployments": "write",
                                            "metadata": "read", "members": "read"},
               f"permissions {m['default_permissions']}")
        expect(sorted(m["default_events"]) == ["check_run", "deployment_protection_rule",
                                               "issue_comment", "pull_request",
                                               "pull_request_review"],
               f"events {m['default_events']}")
        expect(m["hook_attributes"]["url"] == "https://gatebot.example.com/webhooks/github",
               "hook url")
        expect(m["public"] is False, "public must be false")
        expect(m.get("url", "").startswith("https://"), "url")
        return "6 permissions, 5 events"
    ck.run("github app manifest", github)

    def teams() -> str:
        d = ROOT / "deploy" / "teams"
        m = json.loads((d / "manifest.json").read_text())
        placeholder = "00000000-0000-0000-0000-000000000000"
        expect(m["id"] == placeholder, "the app id is the placeholder docs/teams.md says to replace")
        bots = m["bots"]
        expect(len(bots) == 1 and bots[0]["botId"] == placeholder, "one bot, its id the placeholder")
        expect(sorted(bots[0]["scopes"]) == ["groupChat", "personal", "team"],
               f"scopes {bots[0]['scopes']}")
        expect(m["validDomains"] == ["gatebot.example.com"], f"valid domains {m['validDomains']}")
        for name, size in ((m["icons"]["color"], 192), (m["icons"]["outline"], 32)):
            head = (d / name).read_bytes()[:24]
            expect(head[:8] == b"\x89PNG\r\n\x1a\n", f"{name} is a PNG")
            w, h = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
            expect((w, h) == (size, size), f"{name} is {size}x{size}, got {w}x{h}")
        return "one bot in 3 scopes, icons 192 and 32"
    ck.run("teams app manifest", teams)

    def canary() -> str:
        docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "examples" / "canary.yaml")
                                              .read_text()) if d]
        c = one(docs, "Canary")
        expect(c["apiVersion"] == "flagger.app/v1beta1", "Canary apiVersion")
        hooks = {h["type"]: h for h in c["spec"]["analysis"]["webhooks"]}
        base = "http://gatebot.flagger-system"
        token = "${FLAGGER_TOKEN}"
        want = {"confirm-rollout": f"/gates/t/{token}/start/pr/42",
                "confirm-promotion": f"/gates/t/{token}/promote/pr/42",
                "rollback": f"/gates/t/{token}/rollback/pr/42", "event": f"/flagger/events?token={token}"}
        for t, path in want.items():
            expect(t in hooks and hooks[t]["url"] == base + path, f"{t} hook url")
        for t in ("confirm-rollout", "confirm-promotion"):
            expect(hooks[t].get("muteAlert") is True, f"{t} muteAlert")
        expect(hooks["event"].get("metadata") == {"pr": "42"}, "event metadata pr")
        return "start, promote, rollback, event"
    ck.run("example Canary", canary)


# --------------------------------------------------------------------------- install as written

def sh_commands(block: str) -> list[list[str]]:
    """The commands of a ```sh block: `\` continuations joined, comments and blanks left out."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(shlex.split(line, comments=True))
    return out


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)


def install_section(readme: str) -> str:
    section = readme.split("\n## Install on Kubernetes\n", 1)
    expect(len(section) == 2, 'README.md has no "## Install on Kubernetes" section')
    return section[1].split("\n## ", 1)[0]


class HelmRun:
    """One `helm install` or `helm upgrade [--install]` command line, as Helm reads it."""

    def __init__(self, args: list[str], previous: dict[str, Any] | None) -> None:
        expect(args[:1] == ["helm"], f"not a helm command: {args}")
        rest = args[1:]
        if rest[:2] == ["upgrade", "--install"]:
            rest = rest[2:]
        elif rest[:1] in (["upgrade"], ["install"]):
            rest = rest[1:]
        else:
            raise AssertionError(f"unexpected helm command: {' '.join(args)}")
        self.namespace = "default"
        self.version: str | None = None
        self.values: dict[str, Any] = {}
        positional: list[str] = []
        it = iter(rest)
        for a in it:
            if a in ("--namespace", "-n"):
                self.namespace = next(it)
            elif a == "--set":
                self.values = deep_merge(self.values, helm.parse_set_string(next(it)))
            elif a in ("-f", "--values"):
                path = ROOT / next(it)
                expect(path.is_file(), f"values file {path.relative_to(ROOT)} does not exist")
                self.values = deep_merge(self.values, yaml.safe_load(path.read_text()) or {})
            elif a == "--version":
                self.version = next(it)
            elif a == "--reuse-values":
                expect(previous is not None, "--reuse-values before any install")
                self.values = deep_merge(previous or {}, self.values)
            elif a.startswith("-"):
                raise AssertionError(f"option {a} is not understood by this check: {' '.join(args)}")
            else:
                positional.append(a)
        expect(len(positional) == 2, f"helm wants RELEASE CHART, got {positional}")
        self.release, chart = positional
        local = ROOT / "deploy" / "helm" / "gatebot"
        if chart == PUBLISHED_CHART:
            # Not published until a tag is released: the chart of this checkout stands in,
            # at the version the command names.
            version = yaml.safe_load((local / "Chart.yaml").read_text())["version"]
            expect(self.version == version, f"{chart} --version {self.version}, the chart is {version}")
            chart = str(local)
        self.chart = (ROOT / chart).resolve()
        expect(self.chart == (ROOT / "deploy" / "helm" / "gatebot").resolve(),
               f"chart path {chart} is not deploy/helm/gatebot")

    def render(self) -> list[dict[str, Any]]:
        with helm.Chart.load(self.chart) as c:
            out = c.render(values=self.values, name=self.release, namespace=self.namespace,
                           is_install=True)
        docs = manifests(out)
        validate_k8s(docs)
        return docs


def created_secrets(commands: list[list[str]]) -> dict[str, tuple[str, set[str]]]:
    """`kubectl [-n NS] create secret generic NAME --from-…=KEY=…`: name -> (namespace, keys)."""
    out: dict[str, tuple[str, set[str]]] = {}
    for c in commands:
        if c[:1] == ["kubectl"] and "create" in c and c[c.index("create") + 1:][:2] == ["secret", "generic"]:
            i = c.index("create")
            ns = c[c.index("-n") + 1] if "-n" in c else "default"
            keys = {a.split("=", 2)[1] for a in c if a.startswith("--from-")}
            out[c[i + 3]] = (ns, keys)
    return out


def helm_runs(commands: list[list[str]]) -> list[HelmRun]:
    runs: list[HelmRun] = []
    for c in commands:
        if c[:1] == ["helm"]:
            runs.append(HelmRun(c, runs[-1].values if runs else None))
    return runs


def install_checks(ck: Checks) -> None:
    readme = (ROOT / "README.md").read_text()
    state: dict[str, Any] = {}

    def install_block(block: str) -> str:
        commands = sh_commands(block)
        pushed = [c[2] for c in commands if c[:2] == ["docker", "push"]]
        builds = [c for c in commands if c[:2] == ["docker", "build"]]
        expect(len(builds) == len(pushed) <= 1, "at most one docker build, and its docker push")
        if builds:
            build = builds[0]
            expect(build[-1] == "." and (ROOT / "Dockerfile").is_file(),
                   "docker build from the repository root, where the Dockerfile is")
            expect(build[build.index("-t") + 1] == pushed[0], "docker push pushes what docker build tagged")
        secrets = created_secrets(commands)
        runs = helm_runs(commands)
        expect(len(runs) == 1, f"one helm install, found {len(runs)}")
        run = runs[0]
        docs = run.render()
        dep = one(docs, "Deployment")
        c = container_of(docs)
        if pushed:
            expect(c["image"] == pushed[0], f"the chart runs {c['image']}, README pushes {pushed[0]}")
        else:
            expect(c["image"].startswith(PUBLISHED_IMAGE + ":"),
                   f"nothing built, so the published image; the chart runs {c['image']}")
        existing = run.values.get("existingSecret")
        expect(existing in secrets, f"existingSecret={existing}, README creates {sorted(secrets)}")
        ns, keys = secrets[existing]
        expect(ns == run.namespace, f"the Secret is in {ns}, the release in {run.namespace}")
        read = {key for name, key, _ in secret_refs(c).values() if name == existing}
        expect(keys <= read, f"keys the chart does not read from {existing}: {sorted(keys - read)}")
        known = {"docker", "helm"}
        for cmd in commands:
            if cmd[0] in known or cmd[:1] == ["kubectl"] and "secret" in cmd and "create" in cmd:
                continue
            line = " ".join(cmd)
            if cmd[:1] == ["kubectl"] and "rollout" in cmd:
                expect(f"deployment/{dep['metadata']['name']}" in cmd
                       and cmd[cmd.index("-n") + 1] == run.namespace, f"{line}: the Deployment")
            elif cmd[:1] == ["export"] and cmd[1].startswith("FLAGGER_TOKEN="):
                token = next(d for d in of_kind(docs, "Secret") if flagger_token_secret(d))
                expect(f"get secret {token['metadata']['name']} " in cmd[1]
                       and f"-n {run.namespace} " in cmd[1] and "{.data.token}" in cmd[1]
                       and "token" in token["data"], f"{line}: the chart's Flagger token Secret")
            elif cmd[:1] == ["envsubst"]:
                path = ROOT / cmd[cmd.index("<") + 1]
                expect(path.is_file() and "${FLAGGER_TOKEN}" in path.read_text(),
                       f"{line}: a Canary that uses $FLAGGER_TOKEN")
                expect(cmd[-4:] == ["kubectl", "apply", "-f", "-"], f"{line}: applied")
            else:
                raise AssertionError(f"README command not checked here: {line}")
        state["secret"] = existing
        return (f"{len(commands)} commands; image {c['image']}, Secret {existing} "
                f"({len(keys)} keys), release {run.release} in {run.namespace}")

    def readme_install() -> str:
        # The published chart first; then, for forks, the build-it-yourself block.
        blocks = [b for b in sh_blocks(install_section(readme)) if "helm " in b]
        expect(len(blocks) == 2, f"README.md's Kubernetes section: two helm blocks, found {len(blocks)}")
        expect(PUBLISHED_CHART in blocks[0] and "docker build" not in blocks[0],
               f"the first install is helm install {PUBLISHED_CHART}")
        expect("docker build" in blocks[1], "the second install builds the image")
        return "; ".join(install_block(b) for b in blocks)
    ck.run("README's Kubernetes install renders as written", readme_install)

    def guide() -> str:
        text = (ROOT / "docs" / "install-kubernetes.md").read_text()
        commands = [c for b in sh_blocks(text) for c in sh_commands(b)]
        secrets = created_secrets(commands)
        runs = helm_runs(commands)
        expect(runs, "docs/install-kubernetes.md has no helm command")
        for run in runs:
            run.render()
            existing = run.values.get("existingSecret")
            expect(existing is None or existing in secrets,
                   f"existingSecret={existing}, the guide creates {sorted(secrets)}")
        names = {r.values.get("existingSecret") for r in runs} - {None}
        expect(names == {state.get("secret")},
               f"the guide's existingSecret {sorted(names)}, README's {state.get('secret')}")
        return f"{len(runs)} helm commands render; the Secret is {state.get('secret')} everywhere"
    ck.run("docs/install-kubernetes.md's helm commands render", guide)

    def guide_secret_once() -> str:
        # Created once, and so that running it again (to add a key) works: the guide's other
        # sections say to run it again rather than create the Secret a second time.
        text = (ROOT / "docs" / "install-kubernetes.md").read_text()
        creates = [ln for b in sh_blocks(text) for ln in re.sub(r"\\\n\s*", " ", b).splitlines()
                   if " create secret generic " in ln]
        expect(len(creates) == 1, f"the guide creates a Secret {len(creates)} times: {creates}")
        expect(creates[0].rstrip().endswith("--dry-run=client -o yaml | kubectl apply -f -"),
               f"not idempotent: {creates[0]}")
        return "one `create secret generic`, applied with --dry-run=client -o yaml | kubectl apply"
    ck.run("docs/install-kubernetes.md: the Secret is created once, idempotently", guide_secret_once)

    def guide_check_up() -> str:
        text = (ROOT / "docs" / "install-kubernetes.md").read_text()
        block = next((b for b in sh_blocks(text) if "rollout status" in b and "curl" in b), None)
        expect(block is not None, "no \"Check it is up\" block")
        runs = helm_runs([c for b in sh_blocks(text) for c in sh_commands(b)])
        docs = runs[0].render()
        secret = runs[0].values["existingSecret"]
        name, key, _ = secret_refs(container_of(docs))["GATEBOT_ADMIN_TOKEN"]
        binary = os.environ.get("GATEBOT_BIN", "")
        expect(binary and Path(binary).is_file(), f"GATEBOT_BIN {binary!r} is not the binary")
        admin = "an-admin-token-for-the-check"
        server = Served(binary, {"GATEBOT_ADMIN_TOKEN": admin})
        said = []
        try:
            for ln in block.strip().splitlines():
                if ln.startswith("kubectl -n flagger-system rollout status deployment/gatebot") \
                        or ln.startswith("kubectl -n flagger-system port-forward svc/gatebot 8080:80"):
                    continue
                m = re.fullmatch(r"export GATEBOT_ADMIN_TOKEN=\$\(kubectl -n (\S+) get secret (\S+) -o "
                                 r"jsonpath='\{\.data\.(\S+)\}' \| base64 -d\)", ln)
                if m:
                    expect(m.group(1) == runs[0].namespace and (m.group(2), m.group(3)) == (name, key)
                           and name == secret, f"{ln}: not where the chart reads GATEBOT_ADMIN_TOKEN ({name}, {key})")
                    continue
                expect(ln.startswith("curl ") and "localhost:8080" in ln, f"command not checked here: {ln}")
                res = subprocess.run(["bash", "-c", ln.replace("localhost:8080", f"127.0.0.1:{server.port}")],
                                     capture_output=True, text=True, timeout=20,
                                     env={"PATH": os.environ.get("PATH", ""), "GATEBOT_ADMIN_TOKEN": admin,
                                          "NO_PROXY": "127.0.0.1"})
                out = res.stdout.strip()
                expect(res.returncode == 0 and out and f"`{out}`" in text,
                       f"{ln}: answered {out!r}, which the guide does not say")
                said.append(out)
        finally:
            server.close()
        return "answered " + ", ".join(said)
    ck.run("docs/install-kubernetes.md: \"Check it is up\" against gatebot with the admin token", guide_check_up)

    def guide_probe() -> str:
        # `kubectl exec` into the chart's Deployment, running the image's binary: the same
        # command line run here against the binary, with nothing configured, must work.
        text = (ROOT / "docs" / "install-kubernetes.md").read_text()
        lines = [ln for b in sh_blocks(text) for ln in b.splitlines() if "check-config --probe" in ln]
        expect(len(lines) == 1, f"one probe command in the guide, found {lines}")
        runs = helm_runs([c for b in sh_blocks(text) for c in sh_commands(b)])
        docs = runs[0].render()
        dep = one(docs, "Deployment")["metadata"]["name"]
        entry = re.search(r'^ENTRYPOINT \["([^"]+)"\]', (ROOT / "Dockerfile").read_text(), re.M)
        expect(entry is not None, "the Dockerfile has no ENTRYPOINT")
        want = f"kubectl -n {runs[0].namespace} exec deployment/{dep} -- {entry.group(1)} check-config --probe"
        expect(lines[0].strip() == want, f"{lines[0]!r}: not {want!r}")
        binary = os.environ.get("GATEBOT_BIN", "")
        expect(binary and Path(binary).is_file(), f"GATEBOT_BIN {binary!r} is not the binary")
        with tempfile.TemporaryDirectory() as tmp:
            res = subprocess.run([binary, "check-config", "--probe"], capture_output=True, text=True,
                                 timeout=30, cwd=tmp,
                                 env={"PATH": os.environ.get("PATH", ""),
                                      "GATEBOT_DATABASE_URL": f"sqlite://{tmp}/g.db"})
        expect(res.returncode == 0 and "probe:" in res.stdout,
               f"check-config --probe exited {res.returncode}: {res.stdout[-400:]}{res.stderr[-400:]}")
        return want
    ck.run("docs/install-kubernetes.md: the probe runs the image's binary in the chart's Deployment", guide_probe)


# --------------------------------------------------------------------------- docs/gitops.md

GITOPS_TOKEN = "t0ken-for-the-check"


def expect_pr_hooks(canary: dict[str, Any], pr: str, token: str) -> None:
    """The Canary's gate URLs and event metadata name pull request `pr`, with the token."""
    expect(canary.get("kind") == "Canary", f"not a Canary: {canary.get('kind')}")
    hooks = {h["type"]: h for h in canary["spec"]["analysis"]["webhooks"]}
    base = "http://gatebot.flagger-system"
    for kind, hook in (("start", "confirm-rollout"), ("promote", "confirm-promotion"),
                       ("rollback", "rollback")):
        want = f"{base}/gates/t/{token}/{kind}/pr/{pr}"
        expect(hooks.get(hook, {}).get("url") == want, f"{hook}: {hooks.get(hook)} is not {want}")
    expect(hooks["event"]["url"] == f"{base}/flagger/events?token={token}", "event hook URL")
    expect(hooks["event"].get("metadata") == {"pr": pr}, f"event metadata {hooks['event'].get('metadata')}")


def gitops_checks(ck: Checks, chart: Path) -> None:
    text = (ROOT / "docs" / "gitops.md").read_text()
    blocks = re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)
    plain = [d for b in blocks if "{{" not in b for d in yaml.safe_load_all(b) if d]
    commands = [c for b in sh_blocks(text) for c in sh_commands(b)]

    def flux() -> str:
        ks = next(d for d in plain if d.get("apiVersion", "").startswith("kustomize.toolkit.fluxcd.io"))
        canary = next(b for b in blocks if "kind: Canary" in b and "${PR_NUMBER}" in b)
        variables = dict(ks["spec"]["postBuild"]["substitute"])
        secrets = created_secrets(commands)
        for source in ks["spec"]["postBuild"]["substituteFrom"]:
            expect(source["kind"] == "Secret" and source["name"] in secrets,
                   f"substituteFrom {source}: the guide creates {sorted(secrets)}")
            ns, keys = secrets[source["name"]]
            expect(ns == ks["metadata"]["namespace"], f"the Secret is in {ns}, not beside the Kustomization")
            variables.update({k: GITOPS_TOKEN for k in keys})
        token = next(d for d in manifests(render(chart, {})) if flagger_token_secret(d))
        copy_cmd = " ".join(next(c for c in commands if "create" in c))
        expect(f"-n {NAMESPACE} get secret {token['metadata']['name']} " in copy_cmd
               and "{.data.token}" in copy_cmd, "the token is copied from the chart's Secret")
        unknown = set(re.findall(r"\$\{(\w+)\}", canary)) - set(variables)
        expect(not unknown, f"variables Flux has no value for: {sorted(unknown)}")
        out = re.sub(r"\$\{(\w+)\}", lambda m: str(variables[m.group(1)]), canary)
        expect_pr_hooks(yaml.safe_load(out), "42", GITOPS_TOKEN)
        return f"Kustomization {ks['metadata']['name']}: PR_NUMBER and FLAGGER_TOKEN substituted"
    ck.run("docs/gitops.md: Flux substitutes the PR and the token", flux)

    def argo() -> str:
        import tempfile
        app = next(d for d in plain if d.get("kind") == "Application")
        values = json.loads(json.dumps(app["spec"]["source"]["helm"]["valuesObject"])
                            .replace("${FLAGGER_TOKEN}", GITOPS_TOKEN))
        defaults = next(b for b in blocks if b.startswith("image:") and "gatebot:" in b)
        template = next(b for b in blocks if "{{" in b)
        with tempfile.TemporaryDirectory() as tmp:
            app_chart = Path(tmp) / "podinfo"
            (app_chart / "templates").mkdir(parents=True)
            (app_chart / "Chart.yaml").write_text("apiVersion: v2\nname: podinfo\nversion: 0.1.0\n")
            (app_chart / "values.yaml").write_text(defaults)
            (app_chart / "templates" / "canary.yaml").write_text(template)

            def canary(v: dict[str, Any]) -> dict[str, Any]:
                with helm.Chart.load(app_chart) as c:
                    out = c.render(values=v, name=app["metadata"]["name"],
                                   namespace=app["spec"]["destination"]["namespace"], is_install=True)
                return one(manifests(out), "Canary")
            expect_pr_hooks(canary(values), "42", GITOPS_TOKEN)
            try:
                canary(deep_merge(values, {"gatebot": {"pr": ""}}))
            except helm.HelmError as exc:
                expect("gatebot.pr" in str(exc), f"refused without saying gatebot.pr: {exc}")
            else:
                raise AssertionError("the chart rendered a Canary without a PR number")
        return f"Application {app['metadata']['name']}: the chart's Canary names PR 42; no PR, no render"
    ck.run("docs/gitops.md: Argo CD's Helm values put the PR in the Canary", argo)


# --------------------------------------------------------------------------- one gatebot, several clusters

HUB_VALUES = ROOT / "deploy" / "examples" / "values-hub.yaml"
HUB_SECTION = "\n## One gatebot for staging and production\n"


class Served:
    """The real binary serving on 127.0.0.1 with `env`, until closed."""

    def __init__(self, binary: str, env: dict[str, str]) -> None:
        import socket
        import tempfile
        import time
        import urllib.request

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.tmp = tempfile.TemporaryDirectory()
        full = {"PATH": os.environ.get("PATH", ""), **env,
                "GATEBOT_LISTEN": f"127.0.0.1:{self.port}",
                "GATEBOT_DATABASE_URL": f"sqlite://{self.tmp.name}/gatebot.db"}
        self.log = open(Path(self.tmp.name) / "log", "w+")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([binary, "serve"], cwd=self.tmp.name, env=full,
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + 20
        while True:
            try:
                with opener.open(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    self.log.seek(0)
                    text = self.log.read()
                    self.close()
                    raise AssertionError(f"gatebot exited: {text[-600:]}")
                if time.monotonic() > deadline:
                    self.close()
                    raise AssertionError("gatebot did not serve /healthz in 20 s")
                time.sleep(0.05)

    def request(self, method: str, path: str, body: bytes) -> tuple[int, str]:
        import urllib.error
        import urllib.request
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, method=method,
                                     headers={"content-type": "application/json"})
        try:
            with opener.open(req, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()
        self.tmp.cleanup()


def hub_checks(ck: Checks, chart: Path) -> None:
    text = (ROOT / "docs" / "environments.md").read_text()
    parts = text.split(HUB_SECTION, 1)
    section = parts[1].split("\n## ", 1)[0] if len(parts) == 2 else ""
    values = yaml.safe_load(HUB_VALUES.read_text())
    state: dict[str, Any] = {}

    def example() -> str:
        expect(section, f"docs/environments.md has no {HUB_SECTION.strip()!r} section")
        rendered = render(chart, values)
        docs = manifests(rendered)
        validate_k8s(docs)
        ings = of_kind(docs, "Ingress")
        expect([i["metadata"]["name"] for i in ings] == ["gatebot-gates"], f"Ingresses {ings}")
        spec = ings[0]["spec"]
        hosts = values["gatesIngress"]["hosts"]
        expect([r["host"] for r in spec["rules"]] == hosts, "one rule per gatesIngress host")
        for rule in spec["rules"]:
            got = sorted((p["path"], p["pathType"]) for p in rule["http"]["paths"])
            expect(got == [("/flagger/events", "Exact"), ("/gates/t", "Prefix")],
                   f"the gates Ingress must route only /gates/t/… and /flagger/events, got {got}")
            for p in rule["http"]["paths"]:
                be = p["backend"]["service"]
                expect(be == {"name": "gatebot", "port": {"number": 80}}, f"backend {be}")
        expect(spec.get("ingressClassName") == values["gatesIngress"]["className"], "className")
        expect(spec.get("tls") == values["gatesIngress"]["tls"], "tls")
        secrets = {d["metadata"]["name"]: d for d in of_kind(docs, "Secret")}
        tokens = {}
        for cluster in [values["flaggerTokens"]["cluster"], *values["flaggerTokens"]["remoteClusters"]]:
            name = "gatebot-flagger-token" + ("" if cluster == values["flaggerTokens"]["cluster"] else f"-{cluster}")
            expect(name in secrets, f"no Secret {name}")
            expect(secrets[name]["metadata"].get("annotations", {}).get("helm.sh/resource-policy") == "keep",
                   f"{name} is not kept")
            tokens[cluster] = base64.b64decode(secrets[name]["data"]["token"]).decode()
            expect(len(tokens[cluster]) >= 32, f"{name}: a short token")
        expect(len(set(tokens.values())) == len(tokens), "two clusters share a token")
        import hashlib
        setting = base64.b64decode(secrets["gatebot-flagger-token"]["data"]["tokens"]).decode()
        want = ",".join(f"{c}={hashlib.sha256(t.encode()).hexdigest()}" for c, t in tokens.items())
        expect(setting == want, f"GATEBOT_FLAGGER_TOKENS is {setting}, not every cluster's hash")
        out = notes(rendered)
        for cluster in values["flaggerTokens"]["remoteClusters"]:
            expect(f"get secret gatebot-flagger-token-{cluster} -o jsonpath='{{.data.token}}'" in out,
                   f"NOTES does not say where {cluster}'s token is")
        expect(f"https://{hosts[0]}/gates/t/$FLAGGER_TOKEN/promote/pr/42" in out, "NOTES: the remote URL")
        state.update(docs=docs, secrets=secrets, tokens=tokens, spec=spec)
        return (f"Ingress gatebot-gates: /gates/t (Prefix), /flagger/events (Exact) on {hosts}; "
                f"{len(tokens)} tokens, their hashes in GATEBOT_FLAGGER_TOKENS")
    ck.run("hub: deploy/examples/values-hub.yaml", example)

    def routed(url: str) -> str:
        """The path of `url`, after checking the gates Ingress serves its host over TLS and routes it."""
        from urllib.parse import urlsplit
        u = urlsplit(url)
        spec = state["spec"]
        expect(u.scheme == "https" and any(u.hostname in t["hosts"] for t in spec["tls"]),
               f"{url}: not HTTPS on a host of gatesIngress.tls")
        expect(u.hostname in [r["host"] for r in spec["rules"]], f"{url}: not a gatesIngress host")
        expect(u.path.startswith("/gates/t/") or u.path == "/flagger/events",
               f"{url}: the gates Ingress does not route {u.path}")
        return u.path + (f"?{u.query}" if u.query else "")

    def doc_commands() -> str:
        expect("docs" in state, "the example did not render")
        blocks = sh_blocks(section)
        lines = [ln for b in blocks for ln in re.sub(r"\\\n\s*", " ", b).splitlines()
                 if ln.strip() and not ln.startswith("#")]
        runs = helm_runs([shlex.split(ln) for ln in lines if ln.startswith("helm ")])
        expect(len(runs) == 1, f"one helm command, found {len(runs)}")
        expect(runs[0].values == deep_merge(IMAGE, values), "the helm command does not install values-hub.yaml")
        runs[0].render()
        binary = os.environ.get("GATEBOT_BIN", "")
        expect(binary and Path(binary).is_file(), f"GATEBOT_BIN {binary!r} is not the binary")
        expect(shutil.which("curl") is not None, "curl is needed to run the section's curl command")
        dep = one(state["docs"], "Deployment")
        env = {e["name"]: e["value"] for e in container_of(state["docs"])["env"] if "value" in e}
        cm = next(d for d in state["docs"] if d["kind"] == "ConfigMap" and "policy.toml" in d.get("data", {}))
        server = None
        checked = []
        try:
            import tempfile
            tmp = tempfile.mkdtemp()
            policy = Path(tmp) / "policy.toml"
            policy.write_text(cm["data"]["policy.toml"])
            setting = base64.b64decode(state["secrets"]["gatebot-flagger-token"]["data"]["tokens"]).decode()
            env.update(GATEBOT_POLICY=str(policy), GATEBOT_FLAGGER_TOKENS=setting)
            server = Served(binary, env)
            token = None
            for ln in lines:
                if ln.startswith("helm "):
                    continue
                m = re.fullmatch(r"FLAGGER_TOKEN=\$\(kubectl -n (\S+) get secret (\S+) -o "
                                 r"jsonpath='\{\.data\.token\}' \| base64 -d\)", ln)
                if m:
                    expect(m.group(1) == dep["metadata"]["namespace"], f"{ln}: the release's namespace")
                    cluster = next((c for c, t in state["tokens"].items()
                                    if m.group(2) == "gatebot-flagger-token" + ("" if c == values["flaggerTokens"]["cluster"] else f"-{c}")), None)
                    expect(cluster is not None, f"{ln}: no such Secret in the render")
                    token = state["tokens"][cluster]
                    checked.append(f"token of {cluster}")
                    continue
                if ln.startswith("kubectl --context ") and " create secret generic " in ln:
                    expect(ln.endswith("--dry-run=client -o yaml | kubectl --context "
                                       + ln.split()[2] + " apply -f -"), f"{ln}: not idempotent")
                    made = created_secrets([shlex.split(ln.split(" | ")[0])])
                    flux = re.search(r"substituteFrom:\n\s+- kind: Secret\n\s+name: (\S+)",
                                     (ROOT / "docs" / "gitops.md").read_text())
                    expect(flux and list(made) == [flux.group(1)], f"{ln}: not the Secret of docs/gitops.md")
                    expect(made[flux.group(1)][1] == {"FLAGGER_TOKEN"}, f"{ln}: key FLAGGER_TOKEN")
                    checked.append("the copy into the cluster")
                    continue
                if ln.startswith("curl "):
                    expect(token is not None, f"{ln}: $FLAGGER_TOKEN is not set before")
                    url = next(a for a in shlex.split(ln) if a.startswith("https://"))
                    routed(url.replace("$FLAGGER_TOKEN", token))
                    base = url.split("/", 3)[:3]
                    local = ln.replace("/".join(base), f"http://127.0.0.1:{server.port}")
                    res = subprocess.run(["bash", "-c", local], capture_output=True, text=True, timeout=20,
                                         env={"PATH": os.environ.get("PATH", ""), "FLAGGER_TOKEN": token,
                                              "NO_PROXY": "127.0.0.1"})
                    answer = res.stdout.strip()
                    expect(f"```text\n{answer}\n```" in section, f"{ln}: answered {answer!r}, not what the doc says")
                    bad = subprocess.run(["bash", "-c", local], capture_output=True, text=True, timeout=20,
                                         env={"PATH": os.environ.get("PATH", ""), "FLAGGER_TOKEN": "not-a-token",
                                              "NO_PROXY": "127.0.0.1"})
                    expect(bad.stdout.strip().endswith("\n401") and "not one of this gatebot's" in bad.stdout,
                           f"a wrong token: {bad.stdout!r}")
                    checked.append(f"curl: {answer.splitlines()[-1]}, a wrong token 401")
                    continue
                raise AssertionError(f"docs/environments.md command not checked here: {ln}")
            # The other cluster's Canary, as Flux fills it in, against the same gatebot.
            canary = next(b for b in re.findall(r"^```yaml\n(.*?)^```", section, re.S | re.M)
                          if "kind: Canary" in b)
            filled = yaml.safe_load(canary.replace("${FLAGGER_TOKEN}", token or "")
                                    .replace("${PR_NUMBER}", "42").replace("${COMMIT_SHA}", "85d557f" + "0" * 33))
            hooks = {h["type"]: h for h in filled["spec"]["analysis"]["webhooks"]}
            expect(set(hooks) == {"confirm-rollout", "confirm-promotion", "rollback", "event"}, f"hooks {set(hooks)}")
            body = json.dumps({"name": "podinfo", "namespace": "test", "phase": "Promoting",
                               "checksum": "abc", "metadata": hooks["confirm-promotion"].get("metadata", {})}).encode()
            code, said = server.request("POST", routed(hooks["confirm-promotion"]["url"]), body)
            # The token names the cluster, whatever the Canary says: the wait is prod-us's.
            expect(code == 403 and "/pr/42@prod-us" in said, f"prod-us's promote check: {code} {said!r}")
            for kind in ("confirm-rollout", "rollback"):
                routed(hooks[kind]["url"])
            code, said = server.request("POST", routed(hooks["event"]["url"]), b"{}")
            expect(code == 400, f"the event hook: {code} {said!r}")
            checked.append("the Canary's promote check 403, a wait of prod-us")
        finally:
            if server:
                server.close()
        # The load balancer block renders, in place of the Ingress.
        lb = next(b for b in re.findall(r"^```yaml\n(.*?)^```", section, re.S | re.M) if b.startswith("service:"))
        docs = manifests(render(chart, deep_merge(values, {**yaml.safe_load(lb), "gatesIngress": {"enabled": False}})))
        validate_k8s(docs)
        expect(one(docs, "Service")["spec"]["type"] == "LoadBalancer", "the load balancer block")
        return "; ".join(checked) + "; the load balancer values render"
    ck.run("hub: docs/environments.md's commands and Canary, against gatebot", doc_commands)


# --------------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chart", type=Path, default=ROOT / "deploy" / "helm" / "gatebot",
                    help="chart directory to check (default: deploy/helm/gatebot)")
    ap.add_argument("--kustomize", type=Path, default=ROOT / "deploy" / "kustomize" / "base",
                    help="kustomize base to check (default: deploy/kustomize/base)")
    ap.add_argument("--kubectl", default=os.environ.get("KUBECTL", shutil.which("kubectl") or ""),
                    help="kubectl used for `kubectl kustomize`; empty: assemble in Python")
    args = ap.parse_args()

    ck = Checks()
    helm.disable_logging()
    print(f"deploy checks: chart {args.chart}, Kubernetes {KUBE_VERSION}, "
          f"helm SDK {helm.helm_sdk_version()}, kubernetes-validate schemas up to "
          f"{kv.latest_version()}")
    chart_checks(ck, args.chart.resolve())
    kustomize_checks(ck, args.kustomize.resolve(), args.kubectl or None)
    app_manifest_checks(ck)
    install_checks(ck)
    gitops_checks(ck, args.chart.resolve())
    hub_checks(ck, args.chart.resolve())
    print(f"deploy: {ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
