//! docs/security.md names, for every way in, the tests that prove its row:
//! each of them must exist, so that the table can't point at a test that was
//! renamed or removed.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The backticked names in `doc` that look like test functions: snake case
/// with at least three words (settings, metrics and paths are not).
fn test_names(doc: &str) -> Vec<&str> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && s.matches('_').count() >= 3
                && !s.starts_with("gatebot_")
        })
        .collect()
}

#[test]
fn every_test_named_in_docs_security_md_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/security.md")).unwrap();
    let mut files = Vec::new();
    sources(&root.join("tests"), &mut files);
    sources(&root.join("src"), &mut files);
    let code: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let names = test_names(&doc);
    assert!(names.len() >= 10, "the scanner found {names:?}");
    let missing: Vec<&&str> = names
        .iter()
        .filter(|n| !code.contains(&format!("fn {n}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/security.md names tests that do not exist: {missing:?}"
    );
}

#[test]
fn the_scanner_takes_test_names_only() {
    let doc = "| `tests/a.rs` `a_test_that_exists` `GATEBOT_X` `gatebot_budget_refused_total` `what=\"wait\"` `two_words` |";
    assert_eq!(test_names(doc), ["a_test_that_exists"]);
}
