#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora, fuzz/corpus/<target>/, from the
repository's real payloads (tests/fixtures/, the TOML of docs/*.md) plus a few
hand-written inputs. The corpora are not in git: run this before fuzzing
(.ci/run does). Existing files are kept, so a grown corpus stays."""

import hashlib
import json
import pathlib
import re
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
CORPUS = ROOT / "fuzz" / "corpus"


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def fixture(path):
    return (FIXTURES / path).read_bytes()


github = sorted((FIXTURES / "github").glob("*.json"))
for f in github:
    put("github", f.read_bytes())
    body = (json.loads(f.read_bytes()).get("comment") or {}).get("body")
    if body:
        put("comment", body)
for comment in [
    "/promote looks good\n",
    "LGTM\n/hold cancel the fix is out\n\n/Status\n",
    "> /promote\nlazy /rollback\n\n```\n/promote\n```\n    /promote\n/freeze for 2h release day\n/unfreeze\n",
    "/usr/bin/env\n/api/v1\n/deploy-now please \\\n/traffic  \r\n<!-- /promote -->\n",
]:
    put("comment", comment)

slack = FIXTURES / "slack"
slash_body = fixture("slack/slash_command.signing-docs-example.body")
put("slack", slash_body)
for f in ["block_actions.docs-example.json", "block_actions_payload.all-fields-sample.json"]:
    put("slack", "payload=" + urllib.parse.quote(fixture("slack/" + f).decode()))
for f in sorted((slack / "socket_mode").glob("*.json")):
    put("socket_frame", f.read_bytes())
for f in ["block_actions.docs-example.json", "slash_command_payload.all-fields-sample.json"]:
    payload = json.loads(fixture("slack/" + f))
    kind = "interactive" if "block_actions" in f else "slash_commands"
    put("socket_frame", json.dumps({"envelope_id": "e1", "type": kind, "payload": payload}))

for text in [
    "promote 42 looks good",
    "hold cancel acme/shop#7",
    "/rollback <https://github.com/acme/shop/pull/42|#42> broken",
    "status canary/test/podinfo",
    "traffic /gates/traffic/acme/shop/pr/42",
    "start ns/test",
    "promote named/release-2026 go",
    "freeze ns/test for 2h release day",
    "unfreeze acme/shop",
    "help",
]:
    put("slash", text)

keys = set(re.findall(r"/(?:gates|loadtester)/[A-Za-z0-9_./-]+", (ROOT / "README.md").read_text()))
keys |= {"promote/pr/42", "/gates/start/acme/shop/pr/7", "traffic/canary/test/podinfo",
         "/gates/rollback/test", "promote/named/release", "/loadtester/gate/test/podinfo"}
for key in sorted(keys)[:30]:
    put("gate_key", key)

for f in sorted((FIXTURES / "flagger").glob("*.json")):
    put("flagger", f.read_bytes())

for doc in sorted((ROOT / "docs").glob("*.md")):
    for block in re.findall(r"```toml\n(.*?)```", doc.read_text(), re.S):
        put("policy", block)

for value in [
    "octocat.github.1900000000000.0123456789abcdef0123456789abcdef.id1.-",
    "ops.admin.1900000000000.c5rf.id2.0123456789abcdef0123456789abcdef",
    "gatebot_session=octocat.github.1.x.y.-.00; other=1",
]:
    put("session", value)

for form in [
    "gate=%2Fgates%2Fpromote%2Facme%2Fshop%2Fpr%2F42&action=approve&canary=test%2Fpodinfo&revision=85d557f47b&reason=ok&csrf=x&confirmed=yes",
    "token=s3cret&csrf=abc.def",
    "actor=%40octocat&repo=acme%2Fshop&gate=promote%2Fpr%2F42&since=2026-12-01&until=2026-12-01T10%3A00&before=5",
    "code=abc&state=xyz&error_description=denied&org=acme&name=gatebot",
    "env=production&cluster=prod-eu&before=5",
]:
    put("web_form", form)

print("seeds in", CORPUS)
