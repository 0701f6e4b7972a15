use super::*;

/// A real file's identity tells a later change to it, whatever kind it is.
#[test]
fn identities_tell_changes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let f = tmp.path().join("f");
    std::fs::write(&f, "one").expect("write");
    let first = Identity::of(&f);
    assert!(first.unchanged(&Identity::of(&f)));
    std::fs::write(&f, "two").expect("write");
    assert!(!first.unchanged(&Identity::of(&f)));
    let missing = Identity::of(&tmp.path().join("none"));
    assert_eq!(missing.kind, "none");
    std::fs::write(tmp.path().join("none"), "x").expect("write");
    assert!(!missing.unchanged(&Identity::of(&tmp.path().join("none"))));
}
