//! Citations of the design: every `docs/design.md#...` in the repository is a heading of
//! docs/design.md (and so is every `(#...)` link inside it), and nothing cites a document the
//! repository does not hold.

use crate::{repository, texts};

/// The anchors of a Markdown text's headings, as GitHub makes them: the heading's text in
/// lower case, each space a `-`, every other character but letters, digits, `-` and `_`
/// dropped; a repeated anchor gets `-1`, `-2`... Lines in fenced code are no headings.
fn heading_anchors(markdown: &str) -> Vec<String> {
    let mut anchors: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.starts_with("```") || line.starts_with("~~~") {
            fenced = !fenced;
        }
        let hashes = line.len() - line.trim_start_matches('#').len();
        let Some(text) = line[hashes..].strip_prefix(' ') else {
            continue;
        };
        if fenced || !(1..=6).contains(&hashes) {
            continue;
        }
        let slug: String = text
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let repeats = anchors
            .iter()
            .filter(|a| {
                **a == slug
                    || a.strip_prefix(&format!("{slug}-"))
                        .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .count();
        anchors.push(match repeats {
            0 => slug,
            n => format!("{slug}-{n}"),
        });
    }
    anchors
}

/// The anchors `line` cites after each `prefix`, as far as anchor characters go (an empty
/// one, a placeholder such as `<anchor>`, is none).
fn cited<'a>(line: &'a str, prefix: &str) -> Vec<&'a str> {
    line.match_indices(prefix)
        .map(|(i, _)| {
            let rest = &line[i + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .unwrap_or(rest.len());
            rest[..end].trim_end_matches('-')
        })
        .filter(|a| !a.is_empty())
        .collect()
}

/// What `line` cites that the repository does not hold: the upper-case design document
/// this project had before docs/design.md, the texts it started from, or a path beside the
/// repository. Each word is spelt in pieces here, so that this file does not cite them.
fn outside_citation(file: &str, line: &str) -> Option<&'static str> {
    const OLD_DESIGN: &str = concat!("DES", "IGN.md");
    const STARTED_FROM: [&str; 3] = [
        concat!("se", "ed 00"),
        concat!("se", "ed's"),
        concat!("the se", "ed"),
    ];
    const BESIDE: &str = concat!("../", "shared");
    // nix-check evaluates against the copy of nixpkgs' lib beside the repository when
    // NIXPKGS_LIB is unset, and README.md says so: a fallback it names, not a citation.
    const NIXPKGS_LIB: &str = concat!("../", "shared/nixpkgs-lib");
    if line.contains(OLD_DESIGN) {
        return Some(OLD_DESIGN);
    }
    let lower = line.to_lowercase();
    for word in STARTED_FROM {
        let whole = lower.match_indices(word).any(|(i, w)| {
            let before = lower[..i].chars().next_back();
            let after = lower[i + w.len()..].chars().next();
            !before.is_some_and(char::is_alphanumeric)
                && (w.ends_with("00") || !after.is_some_and(char::is_alphanumeric))
        });
        if whole {
            return Some(word);
        }
    }
    let allowed = matches!(file, "nixos/checks/nix-check.sh" | "README.md")
        && line.matches(BESIDE).count() == line.matches(NIXPKGS_LIB).count();
    if line.contains(BESIDE) && !allowed {
        return Some(BESIDE);
    }
    None
}

/// Every `docs/design.md#...` in the repository is a heading of docs/design.md (and so is
/// every `(#...)` link inside it), and nothing cites a document the repository lacks.
#[test]
fn every_design_citation_is_a_heading_of_docs_design_md() {
    let Some(root) = repository("docs") else {
        return;
    };
    let design = std::fs::read_to_string(root.join("docs/design.md")).expect("docs/design.md");
    let headings = heading_anchors(&design);
    let tops = [
        "crates",
        "tests",
        "scripts",
        "nixos",
        "vm-tests",
        "docs",
        "dist",
        "runbook",
        "README.md",
        "CONTRIBUTING.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
    ];
    let (mut wrong, mut anchors) = (Vec::new(), 0);
    for (file, text) in texts(&root, &tops) {
        for (n, line) in text.lines().enumerate() {
            let mut cites = cited(line, "docs/design.md#");
            if file == "docs/design.md" {
                cites.extend(cited(line, "](#"));
            }
            for anchor in cites {
                anchors += 1;
                if !headings.iter().any(|h| h == anchor) {
                    wrong.push(format!(
                        "{file}:{}: #{anchor} is no heading of docs/design.md",
                        n + 1
                    ));
                }
            }
            if let Some(what) = outside_citation(&file, line) {
                wrong.push(format!(
                    "{file}:{}: cites {what:?}, which the repository does not hold",
                    n + 1
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(anchors > 100, "the walk found the citations: {anchors}");
}

#[test]
fn headings_become_anchors_as_on_github() {
    let md = "# boxmaker: design\n## Life of a call\n### `[grants.NAME]`\n\
        ### http_fetch and its egress proxy\n```\n# not a heading\n```\n\
        ## Sweep\n## Sweep\n#nospace\n";
    assert_eq!(
        heading_anchors(md),
        [
            "boxmaker-design",
            "life-of-a-call",
            "grantsname",
            "http_fetch-and-its-egress-proxy",
            "sweep",
            "sweep-1",
        ]
    );
    assert_eq!(
        cited(
            "see docs/design.md#sweep, and docs/design.md#<anchor>",
            "docs/design.md#"
        ),
        ["sweep"]
    );
    let old = concat!("DES", "IGN.md");
    let word = concat!("se", "ed");
    for (file, line, bad) in [
        ("crates/x.rs", format!("/// See {old} \"Audit\"."), true),
        ("crates/x.rs", format!("/// {word} 003 section 6"), true),
        (
            "crates/x.rs",
            format!("/// Fixed by the {word}; kept."),
            true,
        ),
        ("crates/x.rs", format!("/// The {word}'s order."), true),
        ("crates/x.rs", "/// docs/design.md#audit".to_string(), false),
        ("crates/x.rs", format!("checksum-{word}= 4,ipv4"), false),
        ("crates/x.rs", format!("the {word}ed generator"), false),
        (
            "nixos/checks/nix-check.sh",
            format!("[ -f ../{}/nixpkgs-lib/lib ]", "shared"),
            false,
        ),
        (
            "nixos/checks/nix-check.sh",
            format!("cat ../{}/other", "shared"),
            true,
        ),
        (
            "scripts/x.sh",
            format!("[ -f ../{}/nixpkgs-lib/lib ]", "shared"),
            true,
        ),
    ] {
        assert_eq!(
            outside_citation(file, &line).is_some(),
            bad,
            "{file}: {line}"
        );
    }
}
