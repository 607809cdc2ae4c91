#!/usr/bin/env python3
"""Writes the chart's README.md from values.yaml's `# --` comments (helm-docs style).

A `# -- text` comment, continued by the `#` lines right below it, describes the key on
the next line; its default is that key's value in values.yaml. Keys without a `# --`
comment (section headings) are not listed.

    bash .ci/deploy-check.sh --write-readme      # regenerate deploy/helm/gatebot/README.md

`bash .ci/deploy-check.sh` fails when the README is not what this script writes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent.parent / "deploy" / "helm" / "gatebot"
KEY = re.compile(r"^(\s*)([A-Za-z0-9_.-]+):(\s|$)")


def described(values_text: str) -> list[tuple[str, str]]:
    """(dotted key, description) of every key with a `# --` comment, in file order."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in values_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = [stripped[4:].strip()]
            continue
        if stripped.startswith("#"):
            if pending is not None:
                pending.append(stripped[1:].strip())
            continue
        m = KEY.match(line)
        if not m:
            if not stripped:
                pending = None
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group(2)))
        if pending is not None:
            out.append((".".join(k for _, k in stack), " ".join(p for p in pending if p)))
            pending = None
    return out


def lookup(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        node = node[part]
    return node


def type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(chart: Path = CHART) -> str:
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    values_text = (chart / "values.yaml").read_text()
    values = yaml.safe_load(values_text)
    lines = [
        f"# {meta['name']}",
        "",
        f"{meta['description']}",
        "",
        f"Chart version {meta['version']}, gatebot {meta['appVersion']}. Source: {meta['home']}",
        "",
        "```sh",
        f"helm upgrade --install gatebot deploy/helm/{meta['name']} --namespace flagger-system \\",
        "  --set github.repository=acme/shop --set existingSecret=gatebot-secrets",
        "```",
        "",
        "The walk-through (secrets, the Canary, webhooks, a first approval) is",
        "`docs/install-kubernetes.md`; the metrics the dashboard and alerts use are in the",
        "repository's README (Operating gatebot, Metrics).",
        "",
        "This file is generated from the `# --` comments of `values.yaml` by `.ci/chart_readme.py`:",
        "edit those and run `bash .ci/deploy-check.sh --write-readme`.",
        "",
        "## Values",
        "",
        "| Key | Type | Default | Description |",
        "| --- | --- | --- | --- |",
    ]
    for key, text in described(values_text):
        value = lookup(values, key)
        default = json.dumps(value, ensure_ascii=False)
        lines.append(f"| `{key}` | {type_of(value)} | `{cell(default)}` | {cell(text)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write README.md (default: print it)")
    ap.add_argument("--chart", type=Path, default=CHART)
    args = ap.parse_args()
    text = render(args.chart)
    if args.write:
        (args.chart / "README.md").write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
