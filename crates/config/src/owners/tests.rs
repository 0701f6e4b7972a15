//! The rule of `config::owners` as a table of directories and who may change them; an
//! ancestor owned by another user needs root to make (skipped without it, unless `CI`).

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

/// A user database of the test's own: group members by gid, and one named user. The config's
/// other tests take one with no groups (`Fake::none`).
pub(crate) struct Fake(BTreeMap<u32, Vec<u32>>);

impl Fake {
    /// No group can be looked up: a group-writable directory counts as another user's.
    pub(crate) fn none() -> Fake {
        Fake(BTreeMap::new())
    }
}

impl Accounts for Fake {
    fn members(&self, gid: u32) -> Option<Vec<u32>> {
        self.0.get(&gid).cloned()
    }
    fn user_name(&self, uid: u32) -> Option<String> {
        (uid == STRANGER).then(|| "stranger".to_string())
    }
    fn group_name(&self, _gid: u32) -> Option<String> {
        None
    }
}

/// A uid no test process runs as.
const STRANGER: u32 = 4243;

fn me() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The variant's name, for a table.
fn kind(e: &Exposure) -> &'static str {
    match e {
        Exposure::Owner(_) => "owner",
        Exposure::Group { .. } => "group",
        Exposure::World { .. } => "world",
        Exposure::WorldGrant { .. } => "world",
        Exposure::Acl(_) => "acl",
        Exposure::Unexamined(_) => "unexamined",
    }
}

/// A row: the directory's mode, whether it is the grant directory itself, the members of its
/// group (`None`: the group cannot be looked up), and what is found.
type Row = (u32, bool, Option<Vec<u32>>, Option<&'static str>);

#[test]
fn modes_and_groups_that_let_another_user_change_a_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("d");
    std::fs::create_dir(&dir).expect("mkdir");
    let gid = std::fs::metadata(&dir).expect("stat").gid();
    let trusted = Trusted::of(me());
    let table: [Row; 13] = [
        (0o755, false, Some(vec![]), None),
        (0o700, true, Some(vec![]), None),
        (0o777, false, Some(vec![]), Some("world")),
        (0o1777, false, Some(vec![]), None),
        // The grant directory itself: its sticky bit protects nothing of the grant.
        (0o1777, true, Some(vec![]), Some("world")),
        (0o757, true, Some(vec![]), Some("world")),
        // Group-writable: only when the group holds someone else.
        (0o775, false, Some(vec![me(), 0]), None),
        (0o775, false, Some(vec![me(), STRANGER]), Some("group")),
        // Sticky above the grant: nobody renames what they do not own; on the grant
        // directory itself it protects nothing of what the grant holds.
        (0o1775, false, Some(vec![STRANGER]), None),
        (0o1775, true, Some(vec![STRANGER]), Some("group")),
        (0o755, false, Some(vec![STRANGER]), None),
        // A group that cannot be looked up has unknown members.
        (0o770, true, None, Some("group")),
        (0o750, true, None, None),
    ];
    for (mode, is_grant, members, want) in table {
        set_mode(&dir, mode);
        let accounts = Fake(members.iter().map(|m| (gid, m.clone())).collect());
        let got = exposure(&dir, is_grant, &trusted, &accounts);
        assert_eq!(
            got.as_ref().map(kind),
            want,
            "mode {mode:o}, grant {is_grant}, members {members:?}: {got:?}"
        );
    }
    // The text names the mode and the other member.
    set_mode(&dir, 0o775);
    let accounts = Fake([(gid, vec![STRANGER])].into());
    let got = exposure(&dir, false, &trusted, &accounts).expect("exposed");
    assert_eq!(
        got.to_string(),
        format!("is writable by its group gid {gid} (mode 0775), which has other members (uid {STRANGER} (stranger))")
    );
}

/// A directory owned by a user who is neither root nor the service user: that user can give
/// themselves write access whatever its mode. Root owns what root made.
#[test]
fn a_directory_owned_by_another_user_is_exposed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("d");
    std::fs::create_dir(&dir).expect("mkdir");
    set_mode(&dir, 0o755);
    let none = Fake(BTreeMap::new());
    // Root is always trusted, so as root the directory is given away; otherwise the test's
    // own user stands for the other one.
    let (trusted, owner) = match me() {
        0 => {
            std::os::unix::fs::chown(&dir, Some(STRANGER), None).expect("chown");
            (Trusted::of(0), STRANGER)
        }
        uid => (Trusted::of(STRANGER + 1), uid),
    };
    let got = exposure(&dir, true, &trusted, &none).expect("exposed");
    assert_eq!(kind(&got), "owner");
    assert!(
        got.to_string()
            .starts_with(&format!("is owned by uid {owner}")),
        "{got}"
    );
    assert_eq!(exposure(&dir, true, &trusted.and(owner), &none), None);
}

/// Write access given through a POSIX ACL counts as the mode does, the mask applied.
#[test]
fn an_acl_that_lets_another_user_write_is_exposed() {
    let entry = |tag: u16, perm: u16, id: u32| {
        let mut e = tag.to_le_bytes().to_vec();
        e.extend(perm.to_le_bytes());
        e.extend(id.to_le_bytes());
        e
    };
    let acl = |mask: u16, named: &[(u16, u32)]| {
        let mut b = 2u32.to_le_bytes().to_vec();
        b.extend(entry(0x01, 0o7, u32::MAX));
        for (tag, id) in named {
            b.extend(entry(*tag, 0o7, *id));
        }
        b.extend(entry(0x04, 0o5, u32::MAX));
        b.extend(entry(0x10, mask, u32::MAX));
        b.extend(entry(0x20, 0o5, u32::MAX));
        b
    };
    let parsed = Acl::parse(&acl(0o7, &[(0x02, STRANGER)])).expect("an ACL");
    assert_eq!(parsed.named_writers(), [(Tag::User, STRANGER)]);
    assert!(!parsed.writes(Tag::GroupObj));
    // The mask takes write away from every named entry.
    let masked = Acl::parse(&acl(0o5, &[(0x02, STRANGER), (0x08, 7)])).expect("an ACL");
    assert!(masked.named_writers().is_empty());
    assert_eq!(Acl::parse(b"\x02\x00\x00\x00\x01"), None);
    assert_eq!(Acl::parse(b"\x03\x00\x00\x00"), None);

    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("d");
    std::fs::create_dir(&dir).expect("mkdir");
    set_mode(&dir, 0o775);
    let bytes = acl(0o7, &[(0x02, STRANGER)]);
    let r = rustix::fs::setxattr(
        &dir,
        "system.posix_acl_access",
        &bytes,
        rustix::fs::XattrFlags::empty(),
    );
    if let Err(e) = r {
        assert!(std::env::var_os("CI").is_none(), "setxattr: {e}");
        eprintln!("SKIPPED: this file system takes no POSIX ACL: {e}");
        return;
    }
    let gid = std::fs::metadata(&dir).expect("stat").gid();
    let accounts = Fake([(gid, vec![STRANGER])].into());
    let got = exposure(&dir, true, &Trusted::of(me()), &accounts).expect("exposed");
    assert_eq!(
        got.to_string(),
        format!("is writable by uid {STRANGER} (stranger) through its ACL")
    );
}

/// Every directory that can change what a path names: its prefixes as written, then those of
/// where it resolves; the last of each is the grant directory.
#[test]
fn the_chain_holds_the_path_as_written_and_as_it_resolves() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical");
    std::fs::create_dir_all(base.join("real/g")).expect("mkdir");
    std::os::unix::fs::symlink(base.join("real"), base.join("link")).expect("symlink");
    let chain = chain(&base.join("link/g"));
    let grants: Vec<&PathBuf> = chain.iter().filter(|(_, g)| *g).map(|(p, _)| p).collect();
    assert_eq!(grants, [&base.join("link/g"), &base.join("real/g")]);
    let all: Vec<&PathBuf> = chain.iter().map(|(p, _)| p).collect();
    assert_eq!(all[0], Path::new("/"));
    for p in [base.join("link"), base.join("real"), base.clone()] {
        assert_eq!(
            all.iter().filter(|q| ***q == p).count(),
            1,
            "{}",
            p.display()
        );
    }
}

/// The whole check, below a temporary directory whose own ancestors are taken as they are
/// (their owners trusted, as this host's): a directory above the grant that another user owns
/// is found, and the error names the grant, the directory and the fix. Making one needs root.
#[test]
fn a_grant_below_another_user_s_directory_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical");
    let mut trusted = Trusted::of(me());
    // Their groups, as far as this test knows, hold nobody else.
    let mut groups = BTreeMap::new();
    for a in base.ancestors() {
        let meta = std::fs::metadata(a).expect("stat");
        trusted = trusted.and(meta.uid());
        groups.insert(meta.gid(), Vec::new());
    }
    let (above, grant) = (base.join("home"), base.join("home/notes"));
    std::fs::create_dir_all(&grant).expect("mkdir");
    set_mode(&base, 0o755);
    set_mode(&above, 0o755);
    let none = Fake(groups);
    if let Err(e) = check(&grant, &trusted, &none) {
        assert!(std::env::var_os("CI").is_none(), "{e}");
        eprintln!("SKIPPED: a directory above the temporary one is open to others here: {e}");
        return;
    }
    if me() != 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "needs root to give a directory away"
        );
        eprintln!("SKIPPED: not root, so no directory can be given to another user");
        return;
    }
    std::os::unix::fs::chown(&above, Some(STRANGER), None).expect("chown");
    let e = check(&grant, &trusted, &none).expect_err("refused");
    assert_eq!(e.dir, above.display().to_string());
    let text = e.to_string();
    for part in [
        format!(
            "{:?} can be renamed or replaced",
            grant.display().to_string()
        ),
        format!("{} is owned by uid {STRANGER} (stranger)", above.display()),
        "chmod go-w".to_string(),
        proto::runbook::GRANT_DIRECTORY_OWNERS.to_string(),
    ] {
        assert!(text.contains(&part), "{part:?} not in {text}");
    }
    // Given back to root, and writable by nobody else: accepted.
    std::os::unix::fs::chown(&above, Some(0), None).expect("chown back");
    assert!(check(&grant, &trusted, &none).is_ok());
}

/// A symbolic link on the path must be its owner's to keep: another user's link can be removed
/// by them even in a sticky directory.
#[test]
fn another_user_s_link_on_the_path_is_exposed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let link = tmp.path().join("l");
    std::os::unix::fs::symlink(tmp.path(), &link).expect("symlink");
    let none = Fake(BTreeMap::new());
    let trusted = match me() {
        0 => {
            std::os::unix::fs::lchown(&link, Some(STRANGER), None).expect("lchown");
            Trusted::of(0)
        }
        _ => Trusted::of(STRANGER + 1),
    };
    let got = exposure(&link, false, &trusted, &none);
    assert_eq!(got.as_ref().map(kind), Some("owner"), "{got:?}");
}

/// `config::load` (brokerd's start, `check-config`) refuses such a grant directory of the
/// Podman backend with a line that says where, which directory, why and what to do; `parse`
/// (tests' configs), the placeholders of the NixOS module's build and the bwrap backend (which
/// mounts the descriptor brokerd checked, not the path) do not look.
#[test]
fn load_refuses_a_grant_directory_another_user_could_swap() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical");
    let grant = base.join("g");
    std::fs::create_dir(&grant).expect("mkdir");
    set_mode(&base, 0o755);
    let runner = format!("[runner]\nimage = \"sha256:{}\"\n\n", "0".repeat(64));
    let text = format!(
        "[broker]\nclients = [0]\n\n{runner}[grants.g]\ntools = [\"read_file\"]\npaths = [ {{ path = \"{}\" }} ]\n",
        grant.display()
    );
    let file = base.join("brokerd.toml");
    std::fs::write(&file, &text).expect("config");
    set_mode(&grant, 0o755);
    if let Err(e) = crate::load(&file, &Fake::none()) {
        assert!(std::env::var_os("CI").is_none(), "{e}");
        eprintln!("SKIPPED: a directory above the temporary one is refused here: {e}");
        return;
    }
    set_mode(&grant, 0o777);
    let e = crate::load(&file, &Fake::none())
        .expect_err("refused")
        .to_string();
    let want = format!(
        "{}:9:20: grants.g.paths: {:?} can be renamed or replaced by a user other than root and the service user",
        file.display(),
        grant.display().to_string()
    );
    assert!(e.starts_with(&want), "{e}");
    assert!(
        e.contains(&format!(
            "{} is writable by everyone (mode 0777)",
            grant.display()
        )),
        "{e}"
    );
    assert!(
        e.ends_with("see runbook/runner.md#grant-directory-owners"),
        "{e}"
    );
    assert!(crate::parse(&text, "t.toml").is_ok());
    assert!(crate::load_placeholder_dirs(&file).is_ok());
    let bwrap = text.replace(&runner, "[runner]\nbackend = \"bwrap\"\n\n");
    std::fs::write(&file, &bwrap).expect("config");
    let got = crate::load(&file, &Fake::none());
    assert!(got.is_ok(), "bwrap: {got:?}");
}
