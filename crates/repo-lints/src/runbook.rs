//! The runbook's anchors: proto names each once (`crates/proto/src/runbook.rs`, listed in
//! its `ALL`), each is an `<a id="...">` of its runbook file, and every anchor the repository's
//! code, scripts and documents send an operator to is one of them.

use std::collections::BTreeMap;

use crate::{repository, texts};

/// proto's runbook constants as written in `text` (its `runbook.rs`): each `pub const NAME:
/// &str = "...";` by name, and the names `ALL` lists.
fn constants(text: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let mut named = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("pub const ") else {
            continue;
        };
        let Some((name, value)) = rest.split_once(": &str = \"") else {
            continue;
        };
        if let Some(value) = value.strip_suffix("\";") {
            named.insert(name.to_string(), value.to_string());
        }
    }
    let all = text
        .split_once("pub const ALL")
        .and_then(|(_, rest)| rest.split_once("= ["))
        .and_then(|(_, rest)| rest.split_once("];"))
        .map(|(list, _)| {
            list.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    (named, all)
}

/// The runbook anchors `text` names: each `runbook/<file>.md#<id>`, as far as anchor characters
/// go.
fn anchors_in(text: &str) -> Vec<String> {
    let mut used = Vec::new();
    for (i, _) in text.match_indices("runbook/") {
        let rest = &text[i..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || "/._#-".contains(c)))
            .unwrap_or(rest.len());
        let anchor = rest[..end].trim_end_matches(['.', '-']);
        if anchor.contains(".md#") && !anchor.ends_with('#') {
            used.push(anchor.to_string());
        }
    }
    used
}

/// Each anchor names a runbook file that has it (`<a id="...">`), and every anchor the
/// repository's code, scripts and documents send an operator to is one of them.
#[test]
fn every_anchor_is_in_the_runbook() {
    let Some(root) = repository("runbook") else {
        return;
    };
    let source = std::fs::read_to_string(root.join("crates/proto/src/runbook.rs"))
        .expect("crates/proto/src/runbook.rs");
    let (named, all) = constants(&source);
    let listed: Vec<&String> = named.keys().filter(|n| *n != "ALL").collect();
    assert!(listed.len() > 10, "the constants were read: {named:?}");
    for name in &listed {
        assert!(
            all.contains(name),
            "proto's runbook::{name} is not in runbook::ALL ({all:?})"
        );
    }
    for name in &all {
        assert!(
            named.contains_key(name),
            "runbook::ALL lists {name}, no constant"
        );
    }
    let known: Vec<&str> = named.values().map(String::as_str).collect();
    let tops = [
        "crates",
        "scripts",
        "nixos",
        "vm-tests",
        "tests",
        "docs",
        "dist",
        "README.md",
        "CONTRIBUTING.md",
        "BENCHMARKS.md",
    ];
    let mut used = Vec::new();
    for (file, text) in texts(&root, &tops) {
        used.extend(anchors_in(&text).into_iter().map(|a| (file.clone(), a)));
    }
    for (file, anchor) in &used {
        assert!(
            known.contains(&anchor.as_str()),
            "{file} sends the operator to {anchor}, which is not in proto's runbook::ALL"
        );
    }
    assert!(
        used.len() > 10,
        "the walk found the anchors in use: {used:?}"
    );
    for anchor in known {
        let (file, id) = anchor.split_once('#').unwrap_or((anchor, ""));
        let text = std::fs::read_to_string(root.join(file))
            .unwrap_or_else(|e| panic!("{anchor}: {file}: {e}"));
        if !id.is_empty() {
            assert!(
                text.contains(&format!("<a id=\"{id}\"></a>")),
                "{anchor}: no such anchor in {file}"
            );
        }
    }
}

#[test]
fn constants_and_anchors_are_read_as_written() {
    let text = "/// The runner.\npub const RUNNER: &str = \"runbook/runner.md\";\n\
        pub const AUDIT: &str = \"runbook/audit.md#audit-unwritable\";\n\
        pub const ALL: [&str; 2] = [\n    RUNNER,\n    AUDIT,\n];\n";
    let (named, all) = constants(text);
    assert_eq!(named.len(), 2);
    assert_eq!(named["AUDIT"], "runbook/audit.md#audit-unwritable");
    assert_eq!(all, ["RUNNER", "AUDIT"]);
    assert_eq!(
        anchors_in("see runbook/runner.md#dev-net-tun. Or runbook/runner.md, runbook/x.md#"),
        ["runbook/runner.md#dev-net-tun"]
    );
}
