//! `report`'s tests: the tables from JSON, the markers, the numbers and the plot.

use super::*;

const SCALE: &str = r#"{"bench":"scale","backend":"bwrap","cores":2,"default_slots":4,
    "tools":["read_file","shell"],"calls_per_row":8,"rows":[
    {"slots":4,"slots_are":"default","clients":1,"calls":8,"errors":0,"seconds":0.1,
     "calls_per_s":80.0,"p50_ms":6.2,"p95_ms":9.9},
    {"slots":4,"slots_are":"default","clients":2,"calls":8,"errors":0,"seconds":0.1,
     "calls_per_s":120.0,"p50_ms":8.0,"p95_ms":12.5},
    {"slots":2,"slots_are":"cores","clients":1,"calls":8,"errors":0,"seconds":0.1,
     "calls_per_s":79.0,"p50_ms":6.3,"p95_ms":null}]}"#;

const RATIO: &str = r#"{"bench":"ratio","backend":"podman","bare":"bare podman run","calls":3,
    "rows":[{"tool":"read_file","through_p50_ms":133.2,"through_p95_ms":140.0,
    "bare_p50_ms":123.5,"bare_p95_ms":130.1,"ratio_p50":1.0785},
    {"tool":"http_fetch","through_p50_ms":288.0,"through_p95_ms":314.0,
    "bare_p50_ms":387.0,"bare_p95_ms":454.0,"ratio_p50":0.744,
    "beside_p50_ms":251.0,"beside_p95_ms":280.0,"beside_ratio_p50":0.6486}]}"#;

#[test]
fn tables_from_json() {
    let mut r = Results::default();
    r.add(SCALE).unwrap();
    r.add(RATIO).unwrap();
    let s = r.sections().unwrap();
    assert_eq!(
        s.keys().copied().collect::<Vec<_>>(),
        vec!["ratio", "scale"]
    );
    assert!(s["ratio"].contains("| podman | read_file | 133 | 140 | 124 | 130 | 1.08 |"));
    assert!(s["ratio"].contains("| podman | http_fetch | 288 | 314 | 387 | 454 | 0.74 |"));
    // The `beside` side is said apart from the table, never as one of its rows.
    assert!(s["ratio"].contains(
        "in the order brokerd starts an http_fetch (docs/design.md#http_fetch-and-its-egress-proxy): \
         podman http_fetch with the tool container started beside its proxy"
    ));
    assert!(s["ratio"].contains("p50 251 ms, p95 280 ms, 0.65 of the bare sequence."));
    assert!(!s["ratio"].contains("| 251 |"));
    assert!(s["scale"].contains("| 4 (default) | 2 | 120 | 8.00 | 12.5 | 8 | 0 |"));
    // A row without a p95 shows a dash, not a number.
    assert!(s["scale"].contains("| 2 (cores) | 1 | 79.0 | 6.30 | – | 8 | 0 |"));
}

const STAGED: &str = r#"{"bench":"staged","backend":"bwrap","calls":40,"rows":[
    {"tool":"write_file","direct_p50_ms":6.0,"direct_p95_ms":7.0,"staged_p50_ms":6.5,
     "staged_p95_ms":7.5,"ratio_p50":1.0833},
    {"tool":"shell","direct_p50_ms":6.0,"direct_p95_ms":7.0,"staged_p50_ms":7.2,
     "staged_p95_ms":8.0,"ratio_p50":1.2}],
    "changes_paths":1000,"changes_p50_ms":42.0,"changes_p95_ms":51.0,
    "changes_diff_p50_ms":120.0,"changes_diff_p95_ms":130.0}"#;

const CHANGES: &str = r#"{"bench":"changes","backend":"noop","paths":1000,"runs":20,
    "rows":[{"diff":false,"p50_ms":10.1,"p95_ms":10.5,"max_ms":10.6},
            {"diff":true,"p50_ms":13.8,"p95_ms":14.5,"max_ms":15.6}]}"#;

/// The staged section: each row against its backend's target, `changes` against 100 ms.
#[test]
fn the_staged_table_says_whether_each_target_is_met() {
    let mut r = Results::default();
    r.add(STAGED).unwrap();
    let podman = STAGED
        .replace(r#""backend":"bwrap""#, r#""backend":"podman""#)
        .replace(
            r#""ratio_p50":1.0833"#,
            r#""ratio_p50":1.04,"bare_direct_p50_ms":6.0,"bare_direct_p95_ms":7.0,
               "bare_staged_p50_ms":6.18,"bare_staged_p95_ms":7.2,"bare_ratio_p50":1.03"#,
        )
        .replace(r#""changes_p50_ms":42.0"#, r#""changes_p50_ms":100.0"#);
    r.add(&podman).unwrap();
    r.add(CHANGES).unwrap();
    let s = r.sections().unwrap();
    let t = &s["staged"];
    // Podman first, as in every table; 1.04 meets 1.05, 1.08 meets bwrap's 1.10.
    let podman_at = t.find("| podman | write_file |").unwrap();
    let bwrap_at = t.find("| bwrap | write_file |").unwrap();
    assert!(podman_at < bwrap_at, "{t}");
    assert!(
        t.contains(
            "| podman | write_file | 6.00 | 7.00 | 6.50 | 7.50 | 1.04 | ≤ 1.05: met | 1.03 (6.18 / 6.00 ms) |\n"
        ),
        "{t}"
    );
    assert!(
        t.contains("| podman | shell | 6.00 | 7.00 | 7.20 | 8.00 | 1.20 | ≤ 1.05: **not met** |"),
        "{t}"
    );
    assert!(
        t.contains("| bwrap | write_file | 6.00 | 7.00 | 6.50 | 7.50 | 1.08 | ≤ 1.10: met | – |\n"),
        "{t}"
    );
    assert!(t.contains("`changes` of 1000 staged paths on bwrap: p50 42.0 ms, p95 51.0 ms (target under 100 ms: met); with diffs p50 120 ms, p95 130 ms."), "{t}");
    // Exactly the target is not under it.
    assert!(
        t.contains("on podman: p50 100 ms, p95 51.0 ms (target under 100 ms: **not met**)"),
        "{t}"
    );
    assert!(t.contains("brokerd alone (no-op runner, 20 answers each): without p50 10.1 ms, p95 10.5 ms (met); with diffs p50 13.8 ms, p95 14.5 ms (met)."), "{t}");
    assert!(
        t.contains("Calls per tool and side: 40 on podman, 40 on bwrap."),
        "{t}"
    );
    assert!(
        t.contains("Bare ratio: `podman run` of the argument lists"),
        "{t}"
    );
    // The section goes between its own markers, apart from the ratio table's.
    let doc = "<!-- bench:ratio -->\nold ratio\n<!-- /bench:ratio -->\n\
               <!-- bench:staged -->\nold\n<!-- /bench:staged -->\n";
    let mut only = BTreeMap::new();
    only.insert("staged", t.clone());
    let (out, done) = splice(doc, &only).unwrap();
    assert_eq!(done, ["staged"]);
    assert!(
        out.contains("old ratio") && !out.contains("\nold\n"),
        "{out}"
    );
    // brokerd alone is a section on its own too.
    let mut r = Results::default();
    r.add(CHANGES).unwrap();
    assert!(r.sections().unwrap()["staged"].starts_with("`changes` of 1000"));
    // A staged bench missing its numbers is an error.
    let mut r = Results::default();
    r.add(r#"{"bench":"staged","backend":"bwrap","calls":1,"rows":[]}"#)
        .unwrap();
    assert!(r.sections().is_err());
}

/// BENCHMARKS.md has a pair of markers for every section this program writes (Nix's build
/// of the crates leaves the file out: skipped there, never under `CI`).
#[test]
fn benchmarks_md_has_every_section_s_markers() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../BENCHMARKS.md");
    let Ok(doc) = std::fs::read_to_string(path) else {
        assert!(std::env::var_os("CI").is_none(), "no {path}");
        println!("SKIPPED no {path} (a build of the crates alone)");
        return;
    };
    for name in SECTIONS {
        let (b, e) = (begin_marker(name), end_marker(name));
        assert_eq!(doc.matches(&b).count(), 1, "{b}");
        let at = doc.find(&b).unwrap();
        assert!(doc[at..].contains(&e), "{e}");
    }
}

#[test]
fn bad_json_is_an_error_not_a_panic() {
    let mut r = Results::default();
    for bad in [
        "",
        "[]",
        "{}",
        r#"{"bench":"nonsense"}"#,
        r#"{"bench":"scale"}"#,
        r#"{"bench":7}"#,
    ] {
        assert!(r.add(bad).is_err(), "{bad:?}");
    }
    // Accepted, but its rows are missing: the section says so, as an error.
    r.add(r#"{"bench":"scale","backend":"podman"}"#).unwrap();
    assert!(r.sections().is_err());
    assert!(r.svg().is_err());
    let mut r = Results::default();
    r.add(r#"{"bench":"ratio","backend":"x","calls":1,"rows":[{"tool":"shell"}]}"#)
        .unwrap();
    assert!(r.sections().is_err());
}

#[test]
fn splice_replaces_between_markers_only() {
    let doc = "# T\n<!-- bench:ratio -->\nold\n<!-- /bench:ratio -->\ntail\n";
    let mut s = BTreeMap::new();
    s.insert("ratio", "new\n".to_string());
    let (out, done) = splice(doc, &s).unwrap();
    assert_eq!(
        out,
        "# T\n<!-- bench:ratio -->\n\nnew\n\n<!-- /bench:ratio -->\ntail\n"
    );
    assert_eq!(done, vec!["ratio"]);
    // Once more gives the same text.
    assert_eq!(splice(&out, &s).unwrap().0, out);
    assert!(splice("no markers\n", &s).is_err());
    assert!(splice("<!-- bench:ratio -->\n", &s).is_err());
    assert!(splice("<!-- /bench:ratio --><!-- bench:ratio -->", &s).is_err());
    assert!(splice(
        "<!-- bench:ratio --><!-- /bench:ratio --><!-- bench:ratio --><!-- /bench:ratio -->",
        &s
    )
    .is_err());
}

#[test]
fn numbers_keep_about_three_digits() {
    let cases = [
        (Some(1234.4), "1234"),
        (Some(99.96), "100"),
        (Some(9.996), "10.0"),
        (Some(6.004), "6.00"),
        (Some(0.9996), "1.00"),
        (Some(0.4567), "0.457"),
        (None, "–"),
        (Some(f64::NAN), "–"),
    ];
    for (x, want) in cases {
        assert_eq!(fmt_num(x), want, "{x:?}");
    }
}

#[test]
fn nice_axes() {
    let close = |(a, b): (f64, f64), (c, d): (f64, f64)| {
        assert!((a - c).abs() < 1e-9 && (b - d).abs() < 1e-9, "{a} {b}");
    };
    close(nice_axis(9.9, 5), (2.0, 10.0));
    close(nice_axis(133.0, 5), (50.0, 150.0));
    close(nice_axis(0.42, 5), (0.1, 0.5));
    close(nice_axis(0.0, 5), (0.2, 1.0));
    close(nice_axis(f64::NAN, 5), (0.2, 1.0));
}

#[test]
fn the_plot_has_a_panel_a_line_per_series_and_a_legend() {
    let mut r = Results::default();
    r.add(SCALE).unwrap();
    let svg = r.svg().unwrap().unwrap();
    assert!(svg.starts_with("<svg "));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains(">bwrap</text>"));
    assert!(svg.contains("max_concurrent_calls 4 (default)"));
    assert!(svg.contains("max_concurrent_calls 2 (cores)"));
    assert!(svg.contains(">concurrent clients (log scale)</text>"));
    // default: p50 and p95 lines; cores: p50 only (its p95 is null).
    assert_eq!(svg.matches("<polyline").count(), 3);
    assert_eq!(svg.matches("<g>").count(), svg.matches("</g>").count());
    assert!(Results::default().svg().unwrap().is_none());
}

/// The egress section: a row per backend, with what a proxy adds to a shell call; a bench
/// missing a number is an error.
#[test]
fn the_egress_table_shows_what_the_proxy_adds() {
    let mut r = Results::default();
    r.add(
        r#"{"bench":"egress","backend":"bwrap","calls":20,"without_p50_ms":8.0,
            "without_p95_ms":9.5,"with_p50_ms":20.5,"with_p95_ms":24.0,"added_p50_ms":12.5,
            "ratio_p50":2.5625}"#,
    )
    .unwrap();
    r.add(
        r#"{"bench":"egress","backend":"podman","calls":20,"without_p50_ms":400.0,
            "without_p95_ms":450.0,"with_p50_ms":900.0,"with_p95_ms":1000.0,"added_p50_ms":500.0,
            "ratio_p50":2.25}"#,
    )
    .unwrap();
    let t = &r.sections().unwrap()["egress"];
    let rows: Vec<&str> = t.lines().skip(2).collect();
    assert_eq!(
        rows,
        [
            "| podman | 400 | 450 | 900 | 1000 | 500 | 2.25 | 20 |",
            "| bwrap | 8.00 | 9.50 | 20.5 | 24.0 | 12.5 | 2.56 | 20 |",
        ],
        "{t}"
    );
    let mut r = Results::default();
    r.add(r#"{"bench":"egress","backend":"bwrap","calls":1}"#)
        .unwrap();
    assert!(r.sections().is_err());
}

/// The toolset section: each backend's ratio against its target, `make test` both ways, the
/// trees in MB.
#[test]
fn the_toolset_table_says_whether_each_target_is_met() {
    let mut r = Results::default();
    r.add(
        r#"{"bench":"toolset","backend":"podman","calls":20,"base_p50_ms":200.0,
            "base_p95_ms":220.0,"toolset_p50_ms":206.0,"toolset_p95_ms":230.0,"ratio_p50":1.03,
            "make_runs":20,"make_sandbox_p50_ms":150.0,"make_host_p50_ms":120.0,
            "tree_bytes":29000000,"base_tree_bytes":22000000}"#,
    )
    .unwrap();
    r.add(
        r#"{"bench":"toolset","backend":"bwrap","calls":20,"base_p50_ms":10.0,
            "base_p95_ms":12.0,"toolset_p50_ms":12.0,"toolset_p95_ms":13.0,"ratio_p50":1.2,
            "make_runs":20,"make_sandbox_p50_ms":130.0,"make_host_p50_ms":120.0,
            "tree_bytes":29000000,"base_tree_bytes":22000000}"#,
    )
    .unwrap();
    let t = &r.sections().unwrap()["toolset"];
    let rows: Vec<&str> = t.lines().skip(2).take(2).collect();
    assert_eq!(
        rows,
        [
            "| podman | 200 | 220 | 206 | 230 | 1.03 | ≤ 1.05: met | 150 | 120 | 22.0, 29.0 |",
            "| bwrap | 10.0 | 12.0 | 12.0 | 13.0 | 1.20 | ≤ 1.10: **not met** | 130 | 120 | 22.0, 29.0 |",
        ],
        "{t}"
    );
    assert!(t.contains("20 calls and N = 20 on podman"), "{t}");
}
