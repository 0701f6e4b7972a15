//! Who could rename or replace a grant directory (docs/design.md#grants-and-paths).
//!
//! Podman mounts a grant directory by its path, so a process that can rename the directory,
//! or any directory above it, and put a symbolic link in its place for the moment Podman
//! mounts it gets the container its link's target, while brokerd's checks before and after the
//! run see the original. A descriptor does not help: Podman cannot reach one of brokerd's
//! (another user namespace), and runc cannot bind one opened in another mount namespace. So, as
//! sshd's `StrictModes` does for `~/.ssh`, brokerd refuses at config load a grant directory
//! whose path someone other than root and the service user could change: nobody who could race
//! it exists.
//!
//! A directory on the path (each of the path as written and as it resolves, the grant
//! directory itself included) is refused when it is owned by another user (who could give
//! themselves write access), writable by its group while the group has a member other than
//! root and the service user, writable by everyone, or writable by another user or group
//! through a POSIX ACL. A directory above the grant may be writable by others if it has the
//! sticky bit, as `/tmp` does: then nobody renames what they do not own. A symbolic link on
//! the path must be owned by root or the service user; the directory that holds it and the
//! directories it leads to are judged as directories.
//!
//! Tried with Podman 4.3 and a rename loop: 4 of 120 real calls answered with the link target's
//! content. A path naming brokerd's own descriptor, `/proc/<brokerd>/fd/<n>`, cannot be followed
//! from Podman's user namespace (`statfs ... permission denied`), and one held inside that
//! namespace reaches runc, which cannot bind a directory opened in another mount namespace
//! (`mount ... invalid argument`, runc 1.1).

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// The users who may change a grant directory's path: root and the service user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trusted {
    uids: BTreeSet<u32>,
    /// The service user's uid, as the error names it.
    service: u32,
}

impl Trusted {
    /// Root and the service user: the user brokerd runs as, or, when that is root
    /// (`check-config` run by root), the owner of the service home `home`, which is the
    /// service user's.
    pub fn of_this_process(home: &Path) -> Trusted {
        let me = nix::unistd::geteuid().as_raw();
        let service = match me {
            0 => std::fs::metadata(home).map_or(0, |m| m.uid()),
            _ => me,
        };
        Trusted::of(service)
    }

    /// Root and `service`.
    pub fn of(service: u32) -> Trusted {
        Trusted {
            uids: [0, service].into_iter().collect(),
            service,
        }
    }

    /// And `uid` too (a test's stand-in for the owners above its temporary directory).
    pub fn and(mut self, uid: u32) -> Trusted {
        self.uids.insert(uid);
        self
    }

    fn has(&self, uid: u32) -> bool {
        self.uids.contains(&uid)
    }
}

/// Who is in a group, and what users and groups are called: the system's user database, or a
/// test's.
pub trait Accounts {
    /// The uids of every member of group `gid`: its listed members and every user whose
    /// primary group it is. `None` when the group cannot be looked up.
    fn members(&self, gid: u32) -> Option<Vec<u32>>;
    fn user_name(&self, uid: u32) -> Option<String>;
    fn group_name(&self, gid: u32) -> Option<String>;
}

/// Why a directory on a grant's path could be renamed or replaced by someone else.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Exposure {
    #[error("is owned by {0}, who could make it writable or replace it")]
    Owner(String),
    #[error(
        "is writable by its group {group} (mode {mode:04o}), which has other members ({members})"
    )]
    Group {
        group: String,
        mode: u32,
        members: String,
    },
    #[error("is writable by everyone (mode {mode:04o}) without the sticky bit")]
    World { mode: u32 },
    #[error("is writable by everyone (mode {mode:04o})")]
    WorldGrant { mode: u32 },
    #[error("is writable by {0} through its ACL")]
    Acl(String),
    #[error("cannot be examined: {0}")]
    Unexamined(String),
}

/// A grant directory someone other than root and the service user could swap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path:?} can be renamed or replaced by a user other than root and the service user ({service}): {dir} {why}; such a user could swap it for a symbolic link while Podman mounts it. Make the directory and every directory above it owned by root or the service user and writable by no one else (chown, chmod go-w, setfacl -b), or grant another directory; see {runbook}", runbook = proto::runbook::GRANT_DIRECTORY_OWNERS)]
pub struct Replaceable {
    /// The grant directory as the config writes it.
    pub path: String,
    /// The directory on its path that another user could change.
    pub dir: String,
    pub why: Exposure,
    /// The service user, as `uid <n> (<name>)`.
    pub service: String,
}

/// Whether grant directory `path` (absolute, written plainly) can be renamed or replaced only
/// by the users `trusted` holds.
pub fn check(
    path: &Path,
    trusted: &Trusted,
    accounts: &dyn Accounts,
) -> Result<(), Box<Replaceable>> {
    for (dir, is_grant) in chain(path) {
        if let Some(why) = exposure(&dir, is_grant, trusted, accounts) {
            return Err(Box::new(Replaceable {
                path: path.display().to_string(),
                dir: dir.display().to_string(),
                why,
                service: who(trusted.service, accounts),
            }));
        }
    }
    Ok(())
}

/// Every directory whose change could change what `path` names: each prefix of `path` as
/// written, from `/`, then each prefix of where it resolves that is not one already; with
/// whether it is the grant directory itself (the last of each).
pub fn chain(path: &Path) -> Vec<(PathBuf, bool)> {
    let prefixes = |p: &Path| -> Vec<PathBuf> {
        let mut at = PathBuf::new();
        let mut all = Vec::new();
        for c in p.components() {
            match c {
                Component::RootDir | Component::Normal(_) => {
                    at.push(c);
                    all.push(at.clone());
                }
                // A config path is written plainly; a resolved one has neither.
                Component::CurDir | Component::ParentDir | Component::Prefix(_) => {}
            }
        }
        all
    };
    let mut out: Vec<(PathBuf, bool)> = Vec::new();
    let written = prefixes(path);
    let resolved = std::fs::canonicalize(path)
        .map(|r| prefixes(&r))
        .unwrap_or_default();
    for list in [written, resolved] {
        let last = list.len().saturating_sub(1);
        for (i, p) in list.into_iter().enumerate() {
            match out.iter_mut().find(|(q, _)| *q == p) {
                Some((_, grant)) => *grant |= i == last,
                None => out.push((p, i == last)),
            }
        }
    }
    out
}

/// What about directory `dir` (not followed if it is a link) lets a user outside `trusted`
/// rename or replace what it holds, or it; `is_grant`: it is the grant directory itself,
/// whose sticky bit protects nothing of the grant.
pub fn exposure(
    dir: &Path,
    is_grant: bool,
    trusted: &Trusted,
    accounts: &dyn Accounts,
) -> Option<Exposure> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) => return Some(Exposure::Unexamined(e.to_string())),
    };
    // Its owner may remove it even from a sticky directory, whatever it is.
    if !trusted.has(meta.uid()) {
        return Some(Exposure::Owner(who(meta.uid(), accounts)));
    }
    // A link cannot be changed, only replaced, which its directory (judged too) decides; where
    // it leads is judged as the resolved path.
    if meta.file_type().is_symlink() {
        return None;
    }
    let mode = meta.mode() & 0o7777;
    // In a sticky directory only an entry's owner (checked above, for the next one on the
    // path) may rename or remove it; the grant directory's own sticky bit protects nothing of
    // what the grant holds.
    if mode & 0o1000 != 0 && !is_grant {
        return None;
    }
    if mode & 0o002 != 0 {
        return Some(match is_grant {
            true => Exposure::WorldGrant { mode },
            false => Exposure::World { mode },
        });
    }
    let acl = match access_acl(dir) {
        Ok(acl) => acl,
        Err(e) => return Some(Exposure::Unexamined(format!("its ACL: {e}"))),
    };
    // With an ACL, the mode's group bits are its mask; the owning group's own entry decides.
    let group_writes = match &acl {
        Some(a) => a.writes(Tag::GroupObj),
        None => mode & 0o020 != 0,
    };
    if group_writes {
        if let Some(members) = others_in(meta.gid(), trusted, accounts) {
            return Some(Exposure::Group {
                group: group(meta.gid(), accounts),
                mode,
                members,
            });
        }
    }
    for entry in acl.iter().flat_map(|a| a.named_writers()) {
        match entry {
            (Tag::User, uid) if !trusted.has(uid) => {
                return Some(Exposure::Acl(who(uid, accounts)));
            }
            (Tag::Group, gid) if others_in(gid, trusted, accounts).is_some() => {
                return Some(Exposure::Acl(format!("the group {}", group(gid, accounts))));
            }
            _ => {}
        }
    }
    None
}

/// The members of group `gid` outside `trusted`, named; `None` if it has none. A group that
/// cannot be looked up has unknown members, which count.
fn others_in(gid: u32, trusted: &Trusted, accounts: &dyn Accounts) -> Option<String> {
    let Some(members) = accounts.members(gid) else {
        return Some("which brokerd cannot look up".into());
    };
    let others: BTreeSet<String> = members
        .into_iter()
        .filter(|uid| !trusted.has(*uid))
        .map(|uid| match uid {
            u32::MAX => "a member that is no user".to_string(),
            uid => who(uid, accounts),
        })
        .collect();
    (!others.is_empty()).then(|| others.into_iter().collect::<Vec<_>>().join(", "))
}

/// `uid <n> (<name>)`, or `uid <n>` for a uid without a name.
fn who(uid: u32, accounts: &dyn Accounts) -> String {
    match accounts.user_name(uid) {
        Some(name) => format!("uid {uid} ({name})"),
        None => format!("uid {uid}"),
    }
}

fn group(gid: u32, accounts: &dyn Accounts) -> String {
    match accounts.group_name(gid) {
        Some(name) => format!("{name} (gid {gid})"),
        None => format!("gid {gid}"),
    }
}

/// An entry's kind in a POSIX ACL (its `e_tag`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    UserObj,
    User,
    GroupObj,
    Group,
    Mask,
    Other,
}

/// A directory's access ACL, as Linux stores it in `system.posix_acl_access`: a version word
/// (2), then entries of a 16-bit tag, 16-bit permissions and a 32-bit id, little-endian.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<(Tag, u16, u32)>,
}

/// The write permission in an ACL entry.
const ACL_WRITE: u16 = 0o2;

impl Acl {
    /// The ACL of those bytes; `None` if they are not one.
    pub fn parse(bytes: &[u8]) -> Option<Acl> {
        let (version, rest) = bytes.split_at_checked(4)?;
        if u32::from_le_bytes(version.try_into().ok()?) != 2 || rest.len() % 8 != 0 {
            return None;
        }
        let mut entries = Vec::new();
        for e in rest.chunks_exact(8) {
            let tag = match u16::from_le_bytes([e[0], e[1]]) {
                0x01 => Tag::UserObj,
                0x02 => Tag::User,
                0x04 => Tag::GroupObj,
                0x08 => Tag::Group,
                0x10 => Tag::Mask,
                0x20 => Tag::Other,
                _ => return None,
            };
            let perm = u16::from_le_bytes([e[2], e[3]]);
            let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            entries.push((tag, perm, id));
        }
        Some(Acl { entries })
    }

    /// The mask's permissions (all, without a mask).
    fn mask(&self) -> u16 {
        self.entries
            .iter()
            .find(|(t, ..)| *t == Tag::Mask)
            .map_or(0o7, |(_, p, _)| *p)
    }

    /// Whether the entry of `tag` (the owning group's) lets it write, the mask applied.
    pub fn writes(&self, tag: Tag) -> bool {
        self.entries
            .iter()
            .any(|(t, p, _)| *t == tag && p & self.mask() & ACL_WRITE != 0)
    }

    /// The named users and groups that may write, the mask applied.
    pub fn named_writers(&self) -> Vec<(Tag, u32)> {
        self.entries
            .iter()
            .filter(|(t, p, _)| {
                matches!(t, Tag::User | Tag::Group) && p & self.mask() & ACL_WRITE != 0
            })
            .map(|(t, _, id)| (*t, *id))
            .collect()
    }
}

/// `dir`'s access ACL, if it has one (a file system without ACLs has none).
fn access_acl(dir: &Path) -> std::io::Result<Option<Acl>> {
    let mut buf = vec![0u8; 4096];
    let n = match rustix::fs::lgetxattr(dir, "system.posix_acl_access", &mut buf[..]) {
        Ok(n) => n,
        Err(e) if e == rustix::io::Errno::NODATA || e == rustix::io::Errno::OPNOTSUPP => {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    buf.truncate(n);
    Acl::parse(&buf)
        .map(Some)
        .ok_or_else(|| std::io::Error::other("an ACL brokerd cannot read"))
}

#[cfg(test)]
pub(crate) mod tests;
