//! What brokerd may do on its host, read at start and shown by `status` and `doctor`
//! (docs/design.md#service): it serves as its service user with no capability at all. Neither
//! backend needs one in brokerd itself: rootless Podman's `newuidmap` and `newgidmap` get
//! theirs from their own setuid bit or file capabilities (which is why the Podman unit keeps
//! `CAP_SETUID` and `CAP_SETGID` in its bounding set), and bwrap runs unprivileged.

use std::collections::BTreeSet;

use caps::CapSet;

/// brokerd's user and capability sets, as the kernel reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Privileges {
    /// Real, effective and saved user IDs.
    pub uids: [u32; 3],
    /// Capabilities held in any of the effective, permitted, inheritable and ambient sets
    /// (`CAP_...` names, sorted): what brokerd or a program it starts could use.
    pub held: Vec<String>,
    /// The bounding set: the most a setuid or file-capability program it starts could gain.
    pub bounding: Vec<String>,
}

impl Privileges {
    /// This process's.
    pub fn read() -> Result<Privileges, String> {
        let ids = nix::unistd::getresuid().map_err(|e| format!("getresuid: {e}"))?;
        let set = |which: CapSet| {
            caps::read(None, which)
                .map(|s| {
                    s.into_iter()
                        .map(|c| c.to_string())
                        .collect::<BTreeSet<_>>()
                })
                .map_err(|e| format!("reading the {which:?} capability set: {e}"))
        };
        let mut held = BTreeSet::new();
        for which in [
            CapSet::Effective,
            CapSet::Permitted,
            CapSet::Inheritable,
            CapSet::Ambient,
        ] {
            held.extend(set(which)?);
        }
        Ok(Privileges {
            uids: [
                ids.real.as_raw(),
                ids.effective.as_raw(),
                ids.saved.as_raw(),
            ],
            held: held.into_iter().collect(),
            bounding: set(CapSet::Bounding)?.into_iter().collect(),
        })
    }

    /// Why brokerd must not serve with these privileges, if it must not: as root (any of its
    /// user IDs 0, so it could become root again), or holding a capability.
    pub fn refusal(&self) -> Option<String> {
        if self.uids.contains(&0) {
            return Some(format!(
                "brokerd does not serve as root (user IDs {:?}): run it as its service user, as the unit does (docs/design.md#service)",
                self.uids
            ));
        }
        if !self.held.is_empty() {
            return Some(format!(
                "brokerd holds capabilities it does not need ({}): it needs none; start it without ambient or file capabilities, as the unit does (docs/design.md#service)",
                self.held.join(", ")
            ));
        }
        None
    }

    /// As `status` shows them.
    pub fn shown(self) -> proto::broker::PrivilegesStatus {
        proto::broker::PrivilegesStatus {
            uids: self.uids,
            capabilities: self.held,
            bounding: self.bounding,
        }
    }

    /// As a `status` answer showed them.
    pub fn of_status(s: proto::broker::PrivilegesStatus) -> Privileges {
        Privileges {
            uids: s.uids,
            held: s.capabilities,
            bounding: s.bounding,
        }
    }

    /// One line for the journal and `doctor`.
    pub fn summary(&self) -> String {
        let held = if self.held.is_empty() {
            "no capabilities".to_string()
        } else {
            format!("capabilities {}", self.held.join(", "))
        };
        let bounding = if self.bounding.is_empty() {
            "empty".to_string()
        } else {
            self.bounding.join(", ")
        };
        format!("uid {}, {held}; bounding set: {bounding}", self.uids[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(uids: [u32; 3], held: &[&str]) -> Privileges {
        Privileges {
            uids,
            held: held.iter().map(|s| s.to_string()).collect(),
            bounding: vec!["CAP_SETGID".into(), "CAP_SETUID".into()],
        }
    }

    #[test]
    fn root_and_capabilities_are_refused() {
        let service = 990;
        assert_eq!(of([service; 3], &[]).refusal(), None);
        for uids in [
            [0, 0, 0],
            [service, 0, service],
            [service, service, 0],
            [0, service, service],
        ] {
            let why = of(uids, &[]).refusal().expect("refused");
            assert!(why.contains("does not serve as root"), "{why}");
        }
        let why = of([service; 3], &["CAP_NET_ADMIN"])
            .refusal()
            .expect("refused");
        assert!(why.contains("CAP_NET_ADMIN"), "{why}");
        // The bounding set alone is no privilege of brokerd's: shown, not refused.
        assert_eq!(of([service; 3], &[]).refusal(), None);
        assert_eq!(
            of([service; 3], &[]).summary(),
            "uid 990, no capabilities; bounding set: CAP_SETGID, CAP_SETUID"
        );
    }

    #[test]
    fn this_process_can_be_read() {
        let p = Privileges::read().expect("read");
        assert_eq!(p.uids[1], nix::unistd::geteuid().as_raw());
        // Every name is a capability's.
        assert!(p
            .held
            .iter()
            .chain(&p.bounding)
            .all(|c| c.starts_with("CAP_")));
    }
}
