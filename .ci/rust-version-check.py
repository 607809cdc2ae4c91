#!/usr/bin/env python3
"""Fails when a locked dependency needs a newer Rust than the workspace's `rust-version`.

`cargo metadata --locked` lists every package of Cargo.lock (all platforms) with the
`rust-version` its manifest declares; the workspace members must declare at least the
highest of them, and all the same one. Our own code is held to that version by clippy's
`incompatible_msrv` lint, which reads `rust-version` too.
"""

from __future__ import annotations

import json
import subprocess
import sys


def parse(v: str) -> tuple[int, int, int]:
    parts = [int(p) for p in v.split(".")]
    return tuple((parts + [0, 0])[:3])  # type: ignore[return-value]


def main() -> int:
    out = subprocess.run(
        ["cargo", "metadata", "--locked", "--format-version", "1"],
        check=True, capture_output=True, text=True,
    ).stdout
    meta = json.loads(out)
    members = set(meta["workspace_members"])
    ours = {p["name"]: p["rust_version"] for p in meta["packages"] if p["id"] in members}
    deps = [p for p in meta["packages"] if p["id"] not in members and p["rust_version"]]
    need = max(deps, key=lambda p: parse(p["rust_version"]))
    failed = False
    for name, declared in sorted(ours.items()):
        if not declared:
            print(f"FAIL {name} declares no rust-version; the lock needs {need['rust_version']}")
            failed = True
        elif parse(declared) < parse(need["rust_version"]):
            over = sorted(f"{p['name']} {p['version']} ({p['rust_version']})" for p in deps
                          if parse(p["rust_version"]) > parse(declared))
            print(f"FAIL {name} says rust-version {declared}, but locked dependencies need more: "
                  + ", ".join(over))
            failed = True
    if len(set(ours.values())) > 1:
        print(f"FAIL the workspace members disagree on rust-version: {ours}")
        failed = True
    if not failed:
        print(f"ok   rust-version {ours['gatebot']} covers {len(deps)} locked packages "
              f"(the highest need: {need['name']} {need['version']}, {need['rust_version']})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
