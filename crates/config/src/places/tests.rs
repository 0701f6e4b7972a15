use std::path::Path;

use super::super::owners::tests::Fake;
use super::super::{load, parse};

/// Grant directories nested where either is writable, and grant directories over
/// brokerd's own places, are refused with both paths; read-only nesting and the same
/// directory in two grants are fine. Symlinks in the config are followed first.
#[test]
fn grant_directories_stay_apart_from_each_other_and_from_brokerd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(dir.path()).expect("canonical");
    let d = base.display().to_string();
    for sub in ["p/ro", "q/r", "home/x", "state", "other"] {
        std::fs::create_dir_all(base.join(sub)).expect("mkdir");
    }
    std::os::unix::fs::symlink(base.join("p"), base.join("link")).expect("symlink");
    let config = base.join("state/brokerd.toml");
    let head = format!(
        "[broker]\naudit_log = \"{d}/state/audit.jsonl\"\n[runner]\nbackend = \"bwrap\"\nhome = \"{d}/home\"\n[bwrap]\ntools_root = \"{d}/other/root\"\n"
    );
    let grants = |a: &str, b: &str| {
        format!("{head}[grants.a]\ntools = [\"shell\"]\npaths = [ {a} ]\n[grants.b]\ntools = [\"shell\"]\npaths = [ {b} ]\n")
    };
    let nested = |inner: &str, outer: &str, other: &str, line: usize, col: usize| {
        format!("brokerd.toml:{line}:{col}: grants.b.paths: \"{d}/{inner}\" lies inside \"{d}/{outer}\" (see also grants.a.paths) and one of them is writable: a sandbox could swap the inner directory for a symbolic link between calls; grant directories may nest only when both are read-only{other}")
    };
    let state = |path: &str, place: &str, what: &str| {
        format!("brokerd.toml:13:20: grants.b.paths: \"{path}\" overlaps \"{place}\", {what}: no grant may reach brokerd's own state")
    };
    let ok = || Ok(());
    let cases: Vec<(String, Result<(), String>)> = vec![
        // (a's paths, b's paths)
        (grants(&format!("{{ path = \"{d}/p\", write = true }}"), &format!("{{ path = \"{d}/p/ro\" }}")), Err(nested("p/ro", "p", "", 13, 20))),
        (grants(&format!("{{ path = \"{d}/p/ro\" }}"), &format!("{{ path = \"{d}/p\", write = true }}")), Err(nested("p/ro", "p", "", 13, 20))),
        (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}/q/r\", write = true }}")), Err(nested("q/r", "q", "", 13, 20))),
        // Through a symlink in the config: compared as mounted.
        (grants(&format!("{{ path = \"{d}/p\", write = true }}"), &format!("{{ path = \"{d}/link/ro\" }}")), Err(nested("link/ro", "p", "", 13, 20))),
        (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}/q/r\" }}")), ok()),
        (grants(&format!("{{ path = \"{d}/p\", write = true }}"), &format!("{{ path = \"{d}/p\" }}")), ok()),
        (grants(&format!("{{ path = \"{d}/p\", write = true }}"), &format!("{{ path = \"{d}/q\", write = true }}")), ok()),
        // brokerd's own places.
        (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}/home/x\" }}")), Err(state(&format!("{d}/home/x"), &format!("{d}/home"), "the service home (runner.home: Podman's storage and configuration, the egress sockets)"))),
        (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}\" }}")), Err(state(&d, &format!("{d}/home"), "the service home (runner.home: Podman's storage and configuration, the egress sockets)"))),
        (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}/state\" }}")), Err(state(&format!("{d}/state"), &format!("{d}/state/audit.jsonl"), "the audit log (broker.audit_log)"))),
        (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}/other\" }}")), Err(state(&format!("{d}/other"), &format!("{d}/other/root"), "the sandboxes' tools root (bwrap.tools_root)"))),
    ];
    let mut cases = cases;
    // Only where /run exists (Nix's build sandbox has none).
    if Path::new("/run").is_dir() {
        cases.push((
            grants(&format!("{{ path = \"{d}/q\" }}"), "{ path = \"/run\" }"),
            Err(state(
                "/run",
                "/run/boxmaker",
                "brokerd's runtime directory",
            )),
        ));
    }
    for (text, want) in cases {
        std::fs::write(&config, &text).expect("write");
        let origin = format!("{d}/state/");
        let got = load(&config, &Fake::none()).map(|_| ()).map_err(|e| {
            let e = e.to_string();
            e.strip_prefix(&origin).map_or(e.clone(), str::to_owned)
        });
        assert_eq!(got, want, "{text}");
    }
    // More directories than a sandbox mounts by descriptor.
    let many: Vec<String> = (0..=super::super::MAX_GRANT_PATHS)
        .map(|_| format!("{{ path = \"{d}/q\" }}"))
        .collect();
    let text = format!(
        "[grants.a]\ntools = [\"shell\"]\npaths = [ {} ]\n",
        many.join(", ")
    );
    let e = parse(&text, "c.toml").expect_err("too many").to_string();
    assert!(
        e.ends_with("grants.a.paths: 55 directories are more than the 54 a sandbox mounts"),
        "{e}"
    );

    // The config file itself, once the audit log is elsewhere.
    let text = format!("[broker]\naudit_log = \"{d}/q/audit.jsonl\"\n[grants.a]\ntools = [\"shell\"]\npaths = [ {{ path = \"{d}/state\" }} ]\n");
    std::fs::write(&config, &text).expect("write");
    let e = load(&config, &Fake::none())
        .expect_err("the config's directory")
        .to_string();
    assert!(e.ends_with(&format!("grants.a.paths: \"{d}/state\" overlaps \"{d}/state/brokerd.toml\", the config file: no grant may reach brokerd's own state")), "{e}");
    assert!(parse(&text, "c.toml").is_ok(), "a text alone names no file");
}
