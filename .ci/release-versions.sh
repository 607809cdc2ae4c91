#!/usr/bin/env bash
# The version in Cargo.toml, the chart's version, its appVersion (the default image tag)
# and the kustomize base's image tag must be one, and equal to $1 when given (the release
# tag without its "v").
#
#   bash .ci/release-versions.sh [VERSION]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
chart_version=$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' deploy/helm/gatebot/Chart.yaml)
app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' deploy/helm/gatebot/Chart.yaml)
kustomize_tag=$(sed -n 's/^    newTag: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' deploy/kustomize/base/kustomization.yaml)
want="${1:-$cargo_version}"
fail=0
for pair in "Cargo.toml version=$cargo_version" "Chart.yaml version=$chart_version" "Chart.yaml appVersion=$app_version" \
  "kustomize base newTag=$kustomize_tag"; do
  if [[ "${pair#*=}" != "$want" ]]; then
    echo "release-versions: ${pair%%=*} is '${pair#*=}', expected '$want'" >&2
    fail=1
  fi
done
[[ $fail == 0 ]] && echo "release-versions: $want everywhere"
exit "$fail"
