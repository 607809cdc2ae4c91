//! The layers of docs/architecture.md, checked: each top-level module of
//! `src/` uses only modules of lower layers (and itself), and no channel uses
//! another channel, and the modules of one folder never use each other in a
//! circle. Reads the `crate::…` and `super::…` paths of every source file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Top-level modules by layer, lowest first.
const LAYERS: &[(&str, &[&str])] = &[
    ("domain", &["gate"]),
    ("domain", &["command", "clock"]),
    (
        "support",
        &["cache", "config", "metrics", "outbound", "templates"],
    ),
    ("support", &["kubernetes", "policy", "store", "telemetry"]),
    ("support", &["notify", "http"]),
    ("support", &["evidence", "change"]),
    ("core", &["core"]),
    (
        "channels",
        &["flagger", "api", "github", "slack", "teams", "web"],
    ),
    ("bootstrap", &["bootstrap"]),
    // Entry points for the fuzz targets in fuzz/: may use every module.
    ("fuzzing", &["fuzzing"]),
    // What tests and benches reach inside for: may name every module.
    ("testing", &["testing"]),
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

fn is_channel(module: &str) -> bool {
    rank(module).is_some_and(|r| LAYERS[r].0 == "channels")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`src/core/check.rs` → `core`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src/");
    let first = rel.components().next().expect("a component");
    let name = first.as_os_str().to_string_lossy();
    name.trim_end_matches(".rs").to_string()
}

/// Every `crate::<module>` named in code (comments skipped), including inside
/// `use crate::{a, b}` groups.
fn used_modules(text: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            if let Some(group) = after.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        used.insert(name);
                    }
                }
            } else {
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    used.insert(name);
                }
            }
            rest = after;
        }
    }
    used
}

#[test]
fn modules_use_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut broken = Vec::new();
    let mut seen = BTreeSet::new();
    for file in &files {
        let module = module_of(&src, file);
        if module == "lib" || module == "main" {
            continue;
        }
        seen.insert(module.clone());
        let Some(own) = rank(&module) else {
            broken.push(format!(
                "src/{module}: not in any layer (add it to LAYERS and docs/architecture.md)"
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read source");
        for used in used_modules(&text) {
            if used == module {
                continue;
            }
            // Items of the crate root (re-exports) are not modules; only modules rank.
            let Some(theirs) = rank(&used) else { continue };
            let what = file.strip_prefix(&src).expect("under src/").display();
            if theirs > own {
                broken.push(format!(
                    "src/{what} ({}) uses crate::{used} ({}), a higher layer",
                    LAYERS[own].0, LAYERS[theirs].0
                ));
            } else if is_channel(&module) && is_channel(&used) {
                broken.push(format!(
                    "src/{what} uses crate::{used}: channels only translate and never use each other"
                ));
            }
        }
    }
    assert!(broken.is_empty(), "layering broken:\n{}", broken.join("\n"));
    // Every layer is real: a module renamed away must be renamed here too.
    for (_, modules) in LAYERS {
        for m in *modules {
            assert!(
                seen.contains(*m),
                "LAYERS names src/{m}, which does not exist"
            );
        }
    }
}

#[test]
fn the_scanner_sees_groups_and_paths() {
    let used = used_modules(
        "use crate::{gate, store::Store};\n// crate::slack in a comment\nlet x = crate::core::Engine::new();",
    );
    assert_eq!(
        used.into_iter().collect::<Vec<_>>(),
        vec!["core", "gate", "store"]
    );
}

/// Cycles inside a folder that are still to be broken, each as its files.
/// The test fails on any other, and on one of these once it is gone (then
/// strike it here).
const KNOWN_CYCLES: &[&[&str]] = &[];

/// The sibling modules of `top` a file names: `crate::<top>::x`, and
/// `super::x` from a file directly in the folder.
fn siblings_used(text: &str, top: &str, direct: bool) -> BTreeSet<String> {
    let own = format!("crate::{top}::");
    let mut used = BTreeSet::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let mut prefixes = vec![own.as_str()];
        if direct {
            prefixes.push("super::");
        }
        for prefix in prefixes {
            let mut rest = code;
            while let Some(at) = rest.find(prefix) {
                let after = &rest[at + prefix.len()..];
                let names: Vec<&str> = match after.strip_prefix('{') {
                    Some(group) => group[..group.find('}').unwrap_or(group.len())]
                        .split(',')
                        .collect(),
                    None => vec![after],
                };
                for item in names {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    used.insert(name);
                }
                rest = after;
            }
        }
    }
    used
}

/// `core/unit` for src/core/unit.rs, `core/memory` for src/core/memory/compact.rs;
/// None for files at the top and a folder's mod.rs.
fn node_of(src: &Path, file: &Path) -> Option<(String, String, bool)> {
    let rel = file.strip_prefix(src).ok()?;
    let parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    match parts.as_slice() {
        [top, name] if name != "mod" => Some((top.clone(), format!("{top}/{name}"), true)),
        [top, folder, _, ..] => Some((top.clone(), format!("{top}/{folder}"), false)),
        _ => None,
    }
}

#[test]
fn no_cycles_inside_a_folder() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let nodes: BTreeSet<String> = files
        .iter()
        .filter_map(|f| node_of(&src, f))
        .map(|n| n.1)
        .collect();
    let mut edges: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for file in &files {
        let Some((top, node, direct)) = node_of(&src, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read source");
        for name in siblings_used(&text, &top, direct) {
            let target = format!("{top}/{name}");
            if target != node && nodes.contains(&target) {
                edges.entry(node.clone()).or_default().insert(target);
            }
        }
    }
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in edges.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reached: std::collections::BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (n, reach(n))).collect();
    let mut cycles = BTreeSet::new();
    for n in &nodes {
        let cycle: Vec<String> = nodes
            .iter()
            .filter(|m| *m == n || (reached[n].contains(*m) && reached[*m].contains(n)))
            .cloned()
            .collect();
        if cycle.len() > 1 {
            cycles.insert(cycle);
        }
    }
    let known: BTreeSet<Vec<String>> = KNOWN_CYCLES
        .iter()
        .map(|c| c.iter().map(|s| s.to_string()).collect())
        .collect();
    let new: Vec<_> = cycles.difference(&known).collect();
    assert!(
        new.is_empty(),
        "modules of one folder use each other: {new:?}"
    );
    let gone: Vec<_> = known.difference(&cycles).collect();
    assert!(
        gone.is_empty(),
        "broken already, strike from KNOWN_CYCLES: {gone:?}"
    );
}

#[test]
fn the_sibling_scanner_reads_super_and_crate_paths() {
    let used = siblings_used(
        "use super::{inbox::X, blocks};\n// super::sink in a comment\nlet y = crate::slack::record::get();",
        "slack",
        true,
    );
    assert_eq!(
        used.into_iter().collect::<Vec<_>>(),
        vec!["blocks", "inbox", "record"]
    );
}

/// Channel files that still reach the store itself, and why. Every other
/// channel file reads through the core (`core::Records`, `core::read`) and may
/// name only the store's outbox and receipt plumbing and its error.
const STORE_USERS: &[(&str, &str)] = &[
    ("api/cli.rs", "check-config proves the store reachable"),
    ("api/health.rs", "readiness probes a store write"),
];

/// Whether a line of code names the `Store` type or reads a `store` field
/// (`state.store`, `&self.store,`, a chain that starts on the next line).
fn reaches_store(code: &str) -> bool {
    // `CommandError::Store(_)` is an error's variant, not the store.
    let code = code.replace("Error::Store", "");
    let names_type = code
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|word| word == "Store");
    names_type || reads_store_field(&code)
}

/// `.store` not followed by more of a name, and not called (`.store(delivery)`).
fn reads_store_field(code: &str) -> bool {
    code.match_indices(".store").any(|(at, found)| {
        let rest = &code[at + found.len()..];
        let ends_name = !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        ends_name && !rest.trim_start().starts_with('(')
    })
}

#[test]
fn channels_ask_the_core_not_the_store() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut broken = Vec::new();
    for file in &files {
        if !is_channel(&module_of(&src, file)) {
            continue;
        }
        let rel = file.strip_prefix(&src).expect("under src/");
        let rel = rel.to_string_lossy().replace('\\', "/");
        if STORE_USERS.iter().any(|(f, _)| *f == rel) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if !code.starts_with("//") && reaches_store(code) {
                broken.push(format!("src/{rel}:{}: {code}", n + 1));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "channels reach the store (read it through the core instead):\n{}",
        broken.join("\n")
    );
}

/// Whether a line of code opens a transaction or names the core's unit.
fn opens_a_unit(code: &str) -> bool {
    code.contains(".begin()") || code.contains("core::unit") || code.contains("Unit<")
}

/// Issue 43: a channel reads, asks and renders; the core decides, writes and
/// settles (`core::intake`, `core::dispatch::run`), so no channel opens a
/// transaction or holds a unit.
#[test]
fn no_channel_opens_a_transaction() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let broken: Vec<String> = code_lines(opens_a_unit)
        .into_iter()
        .filter(|(rel, _, _)| is_channel(&module_of(&src, &src.join(rel))))
        .map(|(rel, n, code)| format!("src/{rel}:{n}: {code}"))
        .collect();
    assert!(
        broken.is_empty(),
        "channels open transactions (hand the core what to write: core::intake::take):\n{}",
        broken.join("\n")
    );
    assert!(opens_a_unit(
        "let mut unit = engine.commands().begin().await?;"
    ));
    assert!(opens_a_unit("    unit: &mut Unit<'_>,"));
    assert!(!opens_a_unit(
        "intake::take(engine, SOURCE, &request, authorized, None, say).await?;"
    ));
}

#[test]
fn the_store_scanner_sees_types_and_fields() {
    assert!(reaches_store("use crate::store::{NewJob, Store};"));
    assert!(reaches_store(
        "let rows = state.store.waits().list(None, true, 5)"
    ));
    assert!(reaches_store("        .store"));
    assert!(reaches_store("let pr = view(&self.state.store, repo)"));
    assert!(reaches_store("let store = &self.state.store;"));
    assert!(!reaches_store("state.stores_nothing()"));
    assert!(!reaches_store("use crate::store::{StoreError, QueueItem};"));
    assert!(!reaches_store(".store(delivery)"));
    assert!(!reaches_store("CommandError::Store(_) => 503"));
}

/// The files that read a claim from Flagger's side as data
/// (`Claim::recorded`), and why. Anything that routes a side effect takes
/// an `Admitted` value from `src/core/admit.rs` instead.
const CLAIM_READERS: &[(&str, &str)] = &[
    ("core/admit.rs", "admission itself"),
    (
        "core/check.rs",
        "stores a check's checksum, phase and metadata with its wait",
    ),
    (
        "core/events.rs",
        "stores an event's row and folds its message into progress",
    ),
    (
        "flagger/mod.rs",
        "an event's message, type and time, kept as data",
    ),
    ("fuzzing.rs", "fuzz targets parse what they are given"),
];

/// Where a line of code reads a claim's value: `.recorded()`, or a claim's
/// inner field.
fn reads_claim(code: &str) -> bool {
    code.contains(".recorded()") || code.contains("Claim(") || code.contains("Admitted(")
}

/// Every line of code under src/ (comments skipped) that `matches`, as
/// (file relative to src/, line number, the line trimmed).
fn code_lines(matches: impl Fn(&str) -> bool) -> Vec<(String, usize, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src/");
        let rel = rel.to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if !code.starts_with("//") && matches(code) {
                out.push((rel.clone(), n + 1, code.to_string()));
            }
        }
    }
    out
}

#[test]
fn claims_route_nothing_without_admission() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (rel, n, code) in code_lines(reads_claim) {
        let builds_admitted = code.contains("Admitted(") || code.contains("Claim(");
        let listed = match builds_admitted {
            true => rel == "core/admit.rs",
            false => CLAIM_READERS.iter().any(|(f, _)| *f == rel),
        };
        if !listed {
            broken.push(format!("src/{rel}:{n}: {code}"));
        }
    }
    assert!(
        broken.is_empty(),
        "a claim from Flagger's side is read outside admission (route it through \
         core::admit::Admit, or list a record-keeper in CLAIM_READERS with why):\n{}",
        broken.join("\n")
    );
    // What Flagger sends stays a claim from the parse on, and what the lookup
    // found stays admitted: a field turned back into a plain value would let
    // anything route on it.
    let input = std::fs::read_to_string(src.join("core/mod.rs")).expect("read core/mod.rs");
    for field in [
        "pub checksum: admit::Claim<String>,",
        "pub phase: admit::Claim<String>,",
        "pub metadata: admit::Claim<admit::Metadata>,",
        "pub found_commit: Option<admit::Admitted<String>>,",
    ] {
        assert!(
            input.contains(field),
            "CheckInput no longer declares `{field}`"
        );
    }
}

#[test]
fn the_claim_scanner_sees_reads_and_constructions() {
    assert!(reads_claim("let m = input.metadata.recorded();"));
    assert!(reads_claim("Some(Admitted(c.to_ascii_lowercase()))"));
    assert!(reads_claim("pub struct Claim(T);"));
    assert!(!reads_claim("let c = Claim::new(self.checksum);"));
    assert!(!reads_claim(
        "let pr = self.admit().event_pr(&input.metadata);"
    ));
}

/// Once stored, a check's metadata is a plain JSON value again (a wait's,
/// an observation's, a message's record): the type no longer says it is a
/// claim. So the places that read it are listed here with what they read
/// and why that routes nothing, or through which named function; a new
/// reader must be added with its reason (issue 41, C).
const STORED_CLAIM_READERS: &[(&str, &str)] = &[
    ("api/cli.rs", "check-config names each waiting canary's evidence provider: a line of text"),
    ("core/admit.rs", "admission itself"),
    (
        "core/created.rs",
        "the canary's numbers for a change's description, read only for waits a Flagger token vouched for, through `Evidence::fetch`",
    ),
    (
        "core/deadlines.rs",
        "a deadline in metadata counts only for a check a Flagger token vouched for (`gate::deadline`)",
    ),
    (
        "core/evidence.rs",
        "evidence is read only for canaries `is_real` admits, within the cluster's budget",
    ),
    (
        "core/path.rs",
        "the `commit` of a passage, only when it names a commit (`valid_commit`), as `Admit::commit`",
    ),
    (
        "evidence/mod.rs",
        "`provider` picks among Flagger's known providers (`Provider::from_flagger`); `target` is escaped into the query as a label value",
    ),
    ("fuzzing.rs", "fuzz targets parse what they are given"),
    (
        "gate/deadline.rs",
        "parses a deadline; whether it counts is `core/deadlines.rs`'s",
    ),
    (
        "github/sink.rs",
        "`pr` and `repository` of a named gate's announcement, which gatebot itself wrote",
    ),
    (
        "slack/blocks.rs",
        "a PR link and a named gate's links (which gatebot wrote) shown in a message",
    ),
    (
        "slack/sink.rs",
        "`commit` compared with another message's, to thread an environment's path",
    ),
    ("teams/card.rs", "a title and a PR link shown on the card, escaped"),
    ("teams/sink.rs", "the evidence line shown on the card"),
    ("web/view.rs", "a PR link on the page"),
];

/// Where a line of code reads stored metadata.
fn reads_stored_metadata(code: &str) -> bool {
    [
        "metadata.get(",
        "metadata[",
        "evidence::strings(",
        "metadata.as_object()",
    ]
    .iter()
    .any(|p| code.contains(p))
}

#[test]
fn stored_claims_are_read_only_where_listed() {
    let mut broken = Vec::new();
    let mut used = BTreeSet::new();
    for (rel, n, code) in code_lines(reads_stored_metadata) {
        match STORED_CLAIM_READERS.iter().find(|(f, _)| *f == rel) {
            Some((f, _)) => {
                used.insert(*f);
            }
            None => broken.push(format!("src/{rel}:{n}: {code}")),
        }
    }
    assert!(
        broken.is_empty(),
        "stored metadata (a claim from Flagger's side) is read in a file not listed in \
         STORED_CLAIM_READERS: route it through core::admit::Admit or a named check, \
         and list the file with why:\n{}",
        broken.join("\n")
    );
    let stale: Vec<&str> = STORED_CLAIM_READERS
        .iter()
        .map(|(f, _)| *f)
        .filter(|f| !used.contains(f))
        .collect();
    assert!(
        stale.is_empty(),
        "listed but no longer reading stored metadata: {stale:?}"
    );
}

/// The rows of docs/architecture.md's "File by file" trace, in order: the
/// file each step opens and what it does there.
fn traced_rows(heading: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let section = doc
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("docs/architecture.md has no \"{heading}\" trace"));
    section
        .lines()
        .skip_while(|l| !l.starts_with("| #"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let file = cells.get(2).unwrap_or(&"").trim_matches('`').to_string();
            (file, cells.get(3).unwrap_or(&"").to_string())
        })
        .collect()
}

/// Every way in is traced file by file to the commit of its decision:
/// each trace names files that exist, and once the core's unit is open no
/// file of the channel runs before the commit (issue 43). A GitHub
/// `/promote`, a Slack Approve and a Teams card's Approve take at most
/// twelve files.
#[test]
fn the_promote_trace_is_short_and_does_not_return_to_the_channel() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let traces: [(&str, &str, Option<usize>); 10] = [
        ("### File by file", "src/github/", Some(12)),
        ("### A Slack Approve, file by file", "src/slack/", Some(12)),
        (
            "### A Teams card's Approve, file by file",
            "src/teams/",
            Some(12),
        ),
        (
            "### A Slack slash command, file by file",
            "src/slack/",
            None,
        ),
        ("### A Teams message, file by file", "src/teams/", None),
        (
            "### A check run's Promote button, file by file",
            "src/github/",
            None,
        ),
        ("### An approving review, file by file", "src/github/", None),
        ("### The page's Approve, file by file", "src/web/", None),
        ("### The API and the CLI, file by file", "src/api/", None),
        (
            "### The loadtester's route, file by file",
            "src/flagger/",
            None,
        ),
    ];
    for (heading, channel, most) in traces {
        let rows = traced_rows(heading);
        assert!(rows.len() >= 5, "{heading}: too few rows: {rows:?}");
        for (f, _) in &rows {
            assert!(
                root.join(f).is_file(),
                "{heading} names {f}, which does not exist"
            );
        }
        let distinct: BTreeSet<_> = rows.iter().map(|(f, _)| f).collect();
        if let Some(most) = most {
            assert!(
                distinct.len() <= most,
                "{heading}: {} files: {distinct:?}",
                distinct.len()
            );
        }
        let unit = rows
            .iter()
            .position(|(_, what)| what.contains("one unit"))
            .unwrap_or_else(|| panic!("{heading}: the trace says where the unit opens"));
        let back: Vec<_> = rows[unit..]
            .iter()
            .filter(|(f, _)| f.starts_with(channel))
            .collect();
        assert!(
            back.is_empty(),
            "{heading}: back in the channel inside the unit: {back:?}"
        );
    }
    let check = traced_rows("### Then, for every way in: Flagger's next check");
    assert!(
        check.iter().all(|(f, _)| root.join(f).is_file()),
        "{check:?}"
    );
}

/// The parts a `parts!` table in `mod_rs` declares: (module, type, accessor).
fn parts_of(mod_rs: &str) -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(mod_rs).expect("read mod.rs");
    let table = text
        .split_once("parts! {\n")
        .map(|(_, rest)| rest.split_once("\n}").map_or(rest, |(t, _)| t))
        .unwrap_or_default();
    table
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_suffix(';')?;
            let (path, name) = l.split_once(" by ")?;
            let (module, part) = path.split_once("::")?;
            Some((module.into(), part.into(), name.into()))
        })
        .collect()
}

/// The files under `src/{within}` with an `impl` block of `ty` (`impl Engine {`,
/// `impl<'e> Checks<'e> {`), and how many blocks each has. Parts of the core
/// and of the store may share a name (`Freezes`), so each is looked for in its folder.
fn impls_of(ty: &str, within: &str) -> Vec<(String, usize)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src.join(within), &mut files);
    let heads = [
        format!("impl {ty} {{"),
        format!("impl super::{ty} {{"),
        format!("impl<'e> {ty}<'e> {{"),
        format!("impl<'e> super::{ty}<'e> {{"),
        format!("impl<'s> {ty}<'s> {{"),
        format!("impl<'s> super::{ty}<'s> {{"),
    ];
    let mut found: Vec<(String, usize)> = files
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).expect("read source");
            let n = text
                .lines()
                .filter(|l| heads.iter().any(|h| l.starts_with(h.as_str())))
                .count();
            let rel = f
                .strip_prefix(&src)
                .expect("under src")
                .display()
                .to_string();
            (n > 0).then_some((rel, n))
        })
        .collect();
    found.sort();
    found
}

/// Issue 43, point 3: the engine and the store are each read in one place.
/// `Engine` keeps the state its parts share in `core/mod.rs`, and `Store` its
/// connection in `store/mod.rs`; each part (checks, commands, deadlines,
/// reads; gates, waits, queues, …) is its own type with one `impl` block in
/// its own file.
#[test]
fn the_engine_the_store_and_each_of_their_parts_are_read_in_one_place() {
    let root = env!("CARGO_MANIFEST_DIR");
    let doc = std::fs::read_to_string(format!("{root}/docs/architecture.md")).expect("doc");
    for (folder, ty) in [("core", "Engine"), ("store", "Store")] {
        let parts = parts_of(&format!("{root}/src/{folder}/mod.rs"));
        assert!(
            parts.len() >= 10,
            "{folder}'s parts! table not found: {parts:?}"
        );
        assert_eq!(impls_of(ty, ""), [(format!("{folder}/mod.rs"), 1)], "{ty}");
        for (module, part, name) in &parts {
            assert_eq!(
                impls_of(part, folder),
                [(format!("{folder}/{module}.rs"), 1)],
                "{part} must be written in one block of {folder}/{module}.rs"
            );
            let row = format!("| `{name}()` → `{part}` | `src/{folder}/{module}.rs` |");
            assert!(doc.contains(&row), "docs/architecture.md lacks {row}");
        }
    }
}

/// Issue 43, point 1: a channel hands the core data (`Replies`, `Mark`s, a
/// job to fill in), never code that runs inside the core's unit: no public
/// function of the intake takes a closure.
#[test]
fn the_intake_takes_data_not_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("src/core/intake.rs")).unwrap();
    let mut offending = Vec::new();
    for (i, chunk) in text.split("\npub async fn ").enumerate().skip(1) {
        let signature = chunk.split_once('{').map_or(chunk, |(s, _)| s);
        if signature.contains("impl FnOnce") || signature.contains("impl Fn(") {
            offending.push(format!("#{i}: {}", signature.lines().next().unwrap_or("")));
        }
    }
    assert!(
        offending.is_empty(),
        "intake functions that take code: {offending:?}"
    );
}
