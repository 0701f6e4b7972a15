//! Random real trees, random staged changes over them, and a host that changes the real tree
//! after the session's calls (before the owner lists the changes) and again between the
//! listing and the commit: whatever lands is what the listing showed, everything else is a
//! conflict, and no host entry the session did not change is removed or rewritten
//! (docs/design.md#staged-writes-and-owners).

use super::super::super::tree::Tree;
use super::super::super::Stage;
use super::super::*;
use super::listed;
use super::races::Seeded;
use proptest::prelude::*;
use proto::ident::Ident;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::symlink;
use std::os::unix::fs::PermissionsExt;

/// What an entry is, as a person would compare it: type, content or target, and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    File(String, u32),
    Link(PathBuf),
    Dir(u32),
}

/// Every entry below `top` (no link followed), by relative path.
fn snapshot(top: &Path) -> BTreeMap<PathBuf, State> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(top.join(&d)) else {
            continue;
        };
        for e in entries.flatten() {
            let rel = d.join(e.file_name());
            let Ok(m) = fs::symlink_metadata(top.join(&rel)) else {
                continue;
            };
            let mode = m.permissions().mode() & 0o7777;
            let state = if m.file_type().is_symlink() {
                State::Link(fs::read_link(top.join(&rel)).expect("link"))
            } else if m.is_dir() {
                stack.push(rel.clone());
                State::Dir(mode)
            } else {
                State::File(fs::read_to_string(top.join(&rel)).unwrap_or_default(), mode)
            };
            out.insert(rel, state);
        }
    }
    out
}

/// What a landed change must have made of `rel`: the layer's entry there (its mode as a
/// commit gives it), or nothing for a whiteout or for what lies below one of the layer's
/// non-directories.
fn layer_entry(upper: &Tree, rel: &Path) -> Option<State> {
    let st = upper.stat(rel).ok()?;
    match kind_of_stat(&st) {
        EntryKind::File => {
            let mut s = String::new();
            io::Read::read_to_string(&mut upper.open_file(rel).ok()?, &mut s).ok()?;
            Some(State::File(s, st.st_mode & 0o1777))
        }
        EntryKind::Link => Some(State::Link(upper.read_link(rel).ok()?)),
        EntryKind::Dir => Some(State::Dir(st.st_mode & 0o1777)),
        _ => None,
    }
}

const TOP: [&str; 4] = ["a", "b", "c", "d"];
const BELOW: [&str; 3] = ["x", "y", "z"];

/// A random real tree: each top name nothing, a file, a link or a directory of entries.
fn real_tree(rng: &mut Seeded, real: &Path) {
    for n in TOP {
        let p = real.join(n);
        match rng.below(4) {
            0 => {}
            1 => fs::write(&p, format!("real {n}\n")).expect("write"),
            2 => symlink("elsewhere", &p).expect("symlink"),
            _ => {
                fs::create_dir(&p).expect("mkdir");
                for c in BELOW {
                    let q = p.join(c);
                    match rng.below(4) {
                        0 => {}
                        1 => fs::write(&q, format!("real {n}/{c}\n")).expect("write"),
                        2 => symlink("elsewhere", &q).expect("symlink"),
                        _ => {
                            fs::create_dir(&q).expect("mkdir");
                            fs::write(q.join("f"), "deep\n").expect("write");
                        }
                    }
                }
            }
        }
    }
}

fn set_opaque(dir: &Path) {
    rustix::fs::setxattr(
        dir,
        "user.overlay.opaque",
        b"y",
        rustix::fs::XattrFlags::empty(),
    )
    .expect("setxattr");
}

/// One entry of the session's changes at `rel` over the real entry `real` (what overlayfs
/// leaves in the layer for it); `true` when it is a directory that takes changes below.
fn stage_one(rng: &mut Seeded, upper: &Tree, top: &Path, rel: &Path, real: Option<&State>) -> bool {
    let p = top.join(rel);
    match rng.below(7) {
        0 | 1 => false,
        2 => {
            fs::write(&p, format!("staged {}\n", rel.display())).expect("write");
            false
        }
        3 if real.is_some() => {
            upper.whiteout(rel).expect("whiteout");
            false
        }
        4 => {
            symlink("staged-target", &p).expect("symlink");
            false
        }
        5 if matches!(real, Some(State::File(..))) => {
            let Some(State::File(content, _)) = real else {
                return false;
            };
            fs::write(&p, content).expect("write");
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).expect("chmod");
            false
        }
        _ => {
            fs::create_dir(&p).expect("mkdir");
            match real {
                // Copied up, or made again after `rm -rf` (opaque).
                Some(State::Dir(_)) if rng.below(3) == 0 => set_opaque(&p),
                Some(State::Dir(_)) if rng.below(3) == 0 => {
                    fs::set_permissions(&p, fs::Permissions::from_mode(0o750)).expect("chmod")
                }
                _ => {}
            }
            true
        }
    }
}

/// Random changes of the session over `before` (the real tree), as overlayfs would leave them.
fn stage_changes(rng: &mut Seeded, upper: &Path, before: &BTreeMap<PathBuf, State>) {
    let t = Tree::open(upper).expect("upper");
    for n in TOP {
        let rel = PathBuf::from(n);
        if stage_one(rng, &t, upper, &rel, before.get(&rel)) {
            for c in BELOW {
                let rel = rel.join(c);
                stage_one(rng, &t, upper, &rel, before.get(&rel));
            }
        }
    }
}

/// Random changes of the host to the real tree.
fn host_changes(rng: &mut Seeded, real: &Path, count: u64) {
    let mut paths: Vec<PathBuf> = Vec::new();
    for n in TOP {
        paths.push(n.into());
        for c in BELOW {
            paths.push(Path::new(n).join(c));
            paths.push(Path::new(n).join(c).join("f"));
        }
    }
    for _ in 0..count {
        let rel = &paths[rng.below(paths.len() as u64) as usize];
        let p = real.join(rel);
        let now = fs::symlink_metadata(&p).ok();
        let parent_is_dir =
            fs::symlink_metadata(p.parent().expect("parent")).is_ok_and(|m| m.is_dir());
        match (rng.below(4), now) {
            // An edit in place, or a file where there was none.
            (0, Some(m)) if m.is_file() => {
                fs::write(&p, format!("host edit {}\n", rel.display())).expect("edit")
            }
            (0 | 1, None) if parent_is_dir => {
                fs::write(&p, format!("host new {}\n", rel.display())).expect("add")
            }
            // A directory swapped aside for a link (its content kept elsewhere).
            (1 | 2, Some(m)) if m.is_dir() => {
                let aside = real.join(format!("aside-{}", rng.next()));
                fs::rename(&p, aside).expect("aside");
                symlink("elsewhere", &p).expect("symlink");
            }
            (2, Some(m)) if m.file_type().is_symlink() => {
                fs::remove_file(&p).expect("rm");
                fs::create_dir(&p).expect("mkdir");
                fs::write(p.join("h"), "host's\n").expect("write");
            }
            (3, Some(m)) if m.is_dir() => fs::remove_dir_all(&p).expect("rm"),
            (3, Some(_)) => fs::remove_file(&p).expect("rm"),
            _ => {}
        }
    }
}

fn check(seed: u64) {
    let mut rng = Seeded(seed.max(1));
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = fs::canonicalize(tmp.path()).expect("canonical");
    let real = base.join("real");
    fs::create_dir_all(&real).expect("mkdir");
    real_tree(&mut rng, &real);
    let stage = Stage::new(&base.join("home"), 1 << 30, 0);
    let layer = stage
        .prepare(&Ident::fixed("s1"), "g", &real)
        .expect("prepare");
    let seen_by_session = snapshot(&real);
    stage_changes(&mut rng, &layer.upper, &seen_by_session);
    stage.record_first(&layer).expect("record");
    // The host, before the owner lists, and again between the listing and the commit.
    let early = rng.below(3);
    host_changes(&mut rng, &real, early);
    let found = listed(&stage, &layer);
    let late = rng.below(3);
    host_changes(&mut rng, &real, late);
    let host = snapshot(&real);
    let upper = Tree::open(&layer.upper).expect("upper");
    let expected: BTreeMap<PathBuf, Option<State>> = found
        .iter()
        .map(|f| (f.rel.clone(), layer_entry(&upper, &f.rel)))
        .collect();
    let report = commit(&layer, &found, None, false, |_| None).expect("commit");
    let after = snapshot(&real);
    let ctx = format!("seed {seed}: found {found:#?}\nreport {report:#?}");

    // Every change listed landed as listed, or is a conflict; nothing else.
    let landed: BTreeMap<&Path, ChangeKind> = report
        .landed
        .iter()
        .map(|l| (l.rel.as_path(), l.kind))
        .collect();
    let refused: BTreeSet<&Path> = report.conflicts.iter().map(|(p, _)| p.as_path()).collect();
    assert!(report.skipped.is_empty(), "{ctx}");
    for f in &found {
        match landed.get(f.rel.as_path()) {
            Some(k) => assert_eq!(*k, f.kind, "{ctx}"),
            None => assert!(
                refused.contains(f.rel.as_path()),
                "{}: {ctx}",
                f.rel.display()
            ),
        }
    }
    // What differs from the host's tree landed, as the layer has it, and the host had not
    // changed it since the session saw it.
    let all: BTreeSet<&PathBuf> = host.keys().chain(after.keys()).collect();
    for p in all {
        let (was, now) = (host.get(p), after.get(p));
        if was == now {
            continue;
        }
        assert!(
            !p.to_string_lossy().contains(".boxmaker-commit-"),
            "a temporary name stayed: {}; {ctx}",
            p.display()
        );
        assert!(
            landed.contains_key(p.as_path()),
            "{} changed ({was:?} -> {now:?}) but was not committed; {ctx}",
            p.display()
        );
        assert_eq!(
            expected.get(p).cloned().flatten().as_ref(),
            now,
            "{} is not what the layer has; {ctx}",
            p.display()
        );
        let untouched_by_host = seen_by_session.get(p) == was;
        let deleted_anyway = was.is_none() && now.is_none();
        assert!(
            untouched_by_host || deleted_anyway,
            "{} was changed by the host ({:?} -> {was:?}) and overwritten; {ctx}",
            p.display(),
            seen_by_session.get(p)
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_commit_lands_what_was_listed_or_a_conflict(seed in any::<u64>()) {
        check(seed);
    }
}

/// A case the property found: the session replaced a real link `d/y`, and the host made a
/// directory there (holding `h`) before the owner listed. The owner's readying recorded what
/// that directory held as if the session had seen it, and the commit deleted the host's `h`.
#[test]
fn a_directory_the_host_made_where_the_session_changed_a_link_is_kept() {
    check(1_418_562_694_387_144_593);
}
