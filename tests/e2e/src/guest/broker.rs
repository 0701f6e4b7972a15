//! brokerd over the typed client, as the guest's client user (loopd's stand-in): each
//! connection is made by a thread of its own that takes that user's uid, gids and groups first,
//! so the socket's permissions and brokerd's SO_PEERCRED see the client user, not root; the
//! rest of this process keeps root's credentials. And what the checks read in an answer.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use client::{Call, CallOutcome, Client, Status};

use crate::system::User;

/// How long one answer may take: a container starts slowly under TCG, and a preflight runs
/// before the first answer.
const ANSWER_WAIT: Duration = Duration::from_secs(400);

/// The client user, and the socket it connects to.
#[derive(Clone)]
pub struct Broker {
    pub socket: PathBuf,
    pub grant: String,
    user: User,
    groups: Vec<libc::gid_t>,
}

impl Broker {
    /// The client user's groups are read now: after it was added to the socket's group.
    pub fn new(socket: &Path, grant: &str, user: User) -> Result<Broker, String> {
        let groups = groups_of(&user)?;
        Ok(Broker {
            socket: socket.to_path_buf(),
            grant: grant.to_string(),
            user,
            groups,
        })
    }

    /// A connection made as the client user.
    pub fn connect(&self) -> Result<UnixStream, String> {
        let (socket, uid, gid, groups) = (
            self.socket.clone(),
            self.user.uid,
            self.user.gid,
            self.groups.clone(),
        );
        let t = std::thread::spawn(move || {
            become_user(uid, gid, &groups)?;
            UnixStream::connect(&socket)
                .map_err(|e| format!("cannot connect to {}: {e}", socket.display()))
        });
        t.join()
            .map_err(|_| "the connecting thread panicked".to_string())?
    }

    fn client(&self, stream: UnixStream) -> Result<Client, String> {
        let c = Client::from_stream(stream).map_err(|e| e.to_string())?;
        c.set_timeout(Some(ANSWER_WAIT))
            .map_err(|e| e.to_string())?;
        Ok(c)
    }

    pub fn status(&self) -> Result<Status, String> {
        self.client(self.connect()?)?
            .status()
            .map_err(|e| e.to_string())
    }

    /// One call of the grant on a connection of its own; an `ask` is approved once (the owner
    /// says yes, by the ticket), so the checks do not depend on how the classifier files a
    /// command.
    pub fn call(
        &self,
        session: &str,
        call: &str,
        tool: &str,
        arguments: &str,
    ) -> Result<CallOutcome, String> {
        self.call_on(self.connect()?, session, call, tool, arguments)
    }

    /// [`Broker::call`] on a connection already made (which another thread may shut down).
    pub fn call_on(
        &self,
        stream: UnixStream,
        session: &str,
        call: &str,
        tool: &str,
        arguments: &str,
    ) -> Result<CallOutcome, String> {
        let mut c = Call {
            session,
            call,
            grant: &self.grant,
            tool,
            arguments,
            approval: None,
        };
        let first = self.client(stream)?.call(&c).map_err(|e| e.to_string())?;
        let CallOutcome::Ask { ticket, .. } = first else {
            return Ok(first);
        };
        c.approval = Some(&ticket);
        self.client(self.connect()?)?
            .call(&c)
            .map_err(|e| e.to_string())
    }
}

/// The arguments of a `shell` call.
pub fn shell_args(command: &str) -> String {
    serde_json::json!({ "command": command }).to_string()
}

/// An outcome (or the client's error) on one line, for evidence.
pub fn show(o: &Result<CallOutcome, String>) -> String {
    match o {
        Ok(o) => format!("{o:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// `status` on one line, for evidence.
pub fn show_status(s: &Result<Status, String>) -> String {
    match s {
        Ok(s) => serde_json::to_string(s).unwrap_or_else(|e| e.to_string()),
        Err(e) => format!("error: {e}"),
    }
}

/// The tool's output when it ran.
pub fn content(o: &Result<CallOutcome, String>) -> Option<&str> {
    match o {
        Ok(CallOutcome::Result { content, .. }) => Some(content),
        _ => None,
    }
}

/// The output of a call that ran, or the message of one that failed.
pub fn content_or_message(o: &Result<CallOutcome, String>) -> &str {
    match o {
        Ok(CallOutcome::Result { content, .. }) => content,
        Ok(CallOutcome::Failed { message }) | Ok(CallOutcome::Unavailable { message }) => message,
        _ => "",
    }
}

/// A line of a shell's output that says it could not fork: busybox's `can't fork`, a
/// `fork ... resource` or `fork ... again`, or EAGAIN's `Resource temporarily unavailable`
/// (any case).
pub fn says_cannot_fork(line: &str) -> bool {
    let l = line.to_lowercase();
    l.contains("can't fork")
        || l.contains("resource temporarily unavailable")
        || l.find("fork").is_some_and(|i| {
            let rest = &l[i + 4..];
            rest.contains("resource") || rest.contains("again")
        })
}

/// The first line that names a fork or a resource, for evidence.
pub fn fork_line(text: &str) -> &str {
    text.lines()
        .find(|l| {
            let l = l.to_lowercase();
            l.contains("fork") || l.contains("resource")
        })
        .unwrap_or("")
}

/// The client user's groups (primary included), as the group database has them.
fn groups_of(user: &User) -> Result<Vec<libc::gid_t>, String> {
    let name = std::ffi::CString::new(user.name.as_str()).map_err(|e| e.to_string())?;
    let groups = nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(user.gid))
        .map_err(|e| format!("cannot read the groups of {}: {e}", user.name))?;
    Ok(groups.into_iter().map(|g| g.as_raw()).collect())
}

/// Gives the calling thread alone (raw system calls: libc would change every thread) the
/// groups, gid and uid of a user, for good.
fn become_user(uid: u32, gid: u32, groups: &[libc::gid_t]) -> Result<(), String> {
    use rustix::process::{Gid, Uid};
    use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
    let groups: Vec<Gid> = groups.iter().map(|&g| Gid::from_raw(g)).collect();
    set_thread_groups(&groups).map_err(|e| format!("setgroups: {e}"))?;
    let (gid, uid) = (Gid::from_raw(gid), Uid::from_raw(uid));
    set_thread_res_gid(gid, gid, gid).map_err(|e| format!("setresgid: {e}"))?;
    set_thread_res_uid(uid, uid, uid).map_err(|e| format!("setresuid: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shells_words_for_a_failed_fork_are_recognised() {
        assert!(says_cannot_fork(
            "sh: can't fork: Resource temporarily unavailable"
        ));
        assert!(says_cannot_fork(
            "bash: fork: retry: Resource temporarily unavailable"
        ));
        assert!(says_cannot_fork("FORK failed, try AGAIN"));
        assert!(!says_cannot_fork("all-forked"));
        assert!(!says_cannot_fork("resource fork"));
        assert_eq!(fork_line("x\nsh: can't fork\ny"), "sh: can't fork");
    }

    #[test]
    fn shell_arguments_are_json() {
        let v: serde_json::Value = serde_json::from_str(&shell_args("echo \"a\"")).unwrap();
        assert_eq!(v["command"], "echo \"a\"");
    }

    #[test]
    fn what_a_call_gave_is_read_by_kind() {
        let ran: Result<CallOutcome, String> = Ok(CallOutcome::Result {
            content: "out".into(),
            truncated: false,
            label: "notes/shell".into(),
            result_id: "r".into(),
            continues_at: None,
        });
        let failed: Result<CallOutcome, String> = Ok(CallOutcome::Failed {
            message: "m".into(),
        });
        assert_eq!(content(&ran), Some("out"));
        assert_eq!(content(&failed), None);
        assert_eq!(content_or_message(&failed), "m");
        assert_eq!(content_or_message(&Err("e".into())), "");
    }
}
