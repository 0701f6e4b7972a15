//! brokerd's own system calls that no safe library wraps.

use std::os::fd::{FromRawFd, IntoRawFd};

use boxmaker_config::owners::Accounts;

/// The system's users and groups (NSS).
pub struct System;

/// getpwent(3) walks one process-wide cursor.
static PASSWD: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Accounts for System {
    fn members(&self, gid: u32) -> Option<Vec<u32>> {
        let group = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)).ok()??;
        let mut uids = Vec::new();
        for name in &group.mem {
            match nix::unistd::User::from_name(name) {
                Ok(Some(u)) => uids.push(u.uid.as_raw()),
                // A member that names no user: counted as someone else.
                _ => uids.push(u32::MAX),
            }
        }
        let _one = PASSWD.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: setpwent, getpwent and endpwent use a cursor only this lock's holder moves;
        // each entry is read (two integers) before the next call may overwrite it.
        unsafe {
            libc::setpwent();
            loop {
                let pw = libc::getpwent();
                if pw.is_null() {
                    break;
                }
                if (*pw).pw_gid == gid {
                    uids.push((*pw).pw_uid);
                }
            }
            libc::endpwent();
        }
        Some(uids)
    }

    fn user_name(&self, uid: u32) -> Option<String> {
        let u = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok()??;
        Some(u.name)
    }

    fn group_name(&self, gid: u32) -> Option<String> {
        let g = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)).ok()??;
        Some(g.name)
    }
}

/// A listening Unix socket passed to this process (systemd's socket activation), owned from
/// now on by the listener returned, in blocking mode as passed.
pub fn adopt_listener(fd: impl IntoRawFd) -> std::os::unix::net::UnixListener {
    // SAFETY: `into_raw_fd` hands over the descriptor's ownership, so nothing else closes or
    // uses it; the listener becomes its one owner.
    unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd.into_raw_fd()) }
}
