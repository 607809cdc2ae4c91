#!/usr/bin/env bash
# Offline checks of the deployment files (Helm chart, kustomize base, app manifests).
#
#   bash .ci/deploy-check.sh [--chart PATH] [--kustomize PATH]
#   bash .ci/deploy-check.sh --write-readme     # regenerate the chart's README.md
#
# The metric names that the chart's alerts and dashboard use are checked against the
# /metrics of the real binary: $GATEBOT_BIN, or target/debug/gatebot built here.
#
# Needs PyPI only, to fill a virtualenv the first time; everything after that is offline:
#   helm-python-sdk      Helm's Go SDK as a shared library (lint and render, no helm binary)
#   kubernetes-validate  the Kubernetes OpenAPI schemas, for strict validation
#
# kustomize output: `kubectl kustomize` when kubectl is on the PATH (the machines ship it;
# if it is missing and Debian offers a kubectl, that is installed). deploy_check.py also
# assembles the base in Python from kustomization.yaml's `resources` and `images`, and
# compares the two; without any kubectl the Python assembly is what gets validated. No
# PyPI package ships the kustomize Go binary.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"

# Versions checked to work together (Helm SDK v4.2.3, schemas up to Kubernetes 1.37).
requirements=(
  helm-python-sdk==0.2.2
  kubernetes-validate==1.37.0
  PyYAML==6.0.4
  jsonschema==4.26.0
)

python="${PYTHON:-python3}"
venv="${DEPLOY_CHECK_VENV:-${TMPDIR:-/tmp}/gatebot-deploy-check-venv}"
stamp="$venv/.requirements"
if [[ ! -x "$venv/bin/python" ]] || [[ "$(cat "$stamp" 2>/dev/null)" != "${requirements[*]}" ]]; then
  echo "deploy-check: preparing $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"
  echo "${requirements[*]}" > "$stamp"
fi

if ! command -v kubectl >/dev/null 2>&1; then
  # Debian bookworm ships kubectl in the package kubernetes-client; install it only when
  # apt can and we are root. Otherwise the Python assembly of the base is used.
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    for pkg in kubectl kubernetes-client; do
      candidate="$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')"
      if [[ -n "$candidate" && "$candidate" != "(none)" ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null 2>&1 || true
        break
      fi
    done
  fi
  command -v kubectl >/dev/null 2>&1 \
    || echo "deploy-check: no kubectl; the kustomize base is assembled in Python"
fi

cd "$root"
if [[ "${1:-}" == "--write-readme" ]]; then
  exec "$venv/bin/python" "$here/chart_readme.py" --write
fi
if [[ -z "${GATEBOT_BIN:-}" ]]; then
  cargo build --locked --quiet --bin gatebot
  export GATEBOT_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/gatebot"
fi
exec "$venv/bin/python" "$here/deploy_check.py" "$@"
