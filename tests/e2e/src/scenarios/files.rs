//! Each tool on the granted directories: what it reads and writes, only the granted
//! directories visible, and each mount's read-only or read-write as the grant says.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use client::{Body, Client, Request};
use serde_json::json;

use super::{check, exit_codes, show, Outcome, Suite, RO_TEXT};
use crate::https::HELLO;

impl Suite {
    pub(super) fn read_file_works(&mut self) -> Outcome {
        let path = self.ro.join("hello.txt");
        let (content, _) = self.result("read_file", json!({ "path": path }))?;
        check(content == RO_TEXT, || format!("read {content:?}"))
    }

    pub(super) fn write_file_works(&mut self) -> Outcome {
        let path = self.rw.join("written.txt");
        let text = "written through brokerd\n";
        let (content, _) = self.result("write_file", json!({ "path": path, "content": text }))?;
        let want = format!("wrote {} bytes to {}", text.len(), path.display());
        check(content.trim_end() == want, || {
            format!("answer {content:?}, want {want:?}")
        })?;
        let on_disk = std::fs::read_to_string(&path).map_err(|e| format!("on the host: {e}"))?;
        check(on_disk == text, || {
            format!("the host file holds {on_disk:?}")
        })?;
        let uid = std::fs::metadata(&path).map_err(|e| e.to_string())?.uid();
        check(uid == self.user.uid, || {
            format!("the file is owned by uid {uid}, not the service user's")
        })
    }

    pub(super) fn shell_works(&mut self) -> Outcome {
        let cmd = format!("cd {} && pwd && cat hello.txt && id -u", self.ro.display());
        let out = self.shell(&cmd)?;
        let want = format!(
            "{}\n{RO_TEXT}{}\n\n[exit 0]",
            self.ro.display(),
            self.user.uid
        );
        check(out == want, || format!("output {out:?}, want {want:?}"))
    }

    /// The page arrives; before it, brokerd proved the proxy path once (its network
    /// preflight), which `status` reports.
    pub(super) fn http_fetch_works(&mut self) -> Outcome {
        match self.fetch("https://ok.test/")? {
            Body::Result { content, .. } => {
                check(content == format!("{HELLO}\n[http 200]"), || {
                    format!("content {content:?}")
                })?
            }
            other => return Err(format!("expected a result, got {}", show(&other))),
        }
        let mut client = Client::connect(&self.socket).map_err(|e| e.to_string())?;
        let _ = client.set_timeout(Some(self.t(Duration::from_secs(10))));
        let req = Request::Status {
            id: client.next_id(),
            v: None,
        };
        match client.request(&req).map_err(|e| e.to_string())?.body {
            Body::Status(s) => {
                let network = s.preflight.network.unwrap_or_default();
                eprintln!("  network preflight: {network:?}");
                check(network.ok == Some(true), || {
                    format!("the network preflight is {network:?}")
                })
            }
            other => Err(format!("status answered {}", show(&other))),
        }
    }

    pub(super) fn only_granted_dirs_visible(&mut self) -> Outcome {
        let cmd = format!(
            "ls {work}; ls /var/lib/boxmaker /root /home 2>&1; ls /",
            work = self.work.display()
        );
        let out = self.shell(&cmd)?;
        check(out.starts_with("ro\nrw\n"), || {
            format!("the work directory shows more than the two granted ones: {out:?}")
        })?;
        check(!out.contains("state") && !out.contains("audit"), || {
            format!("an ungranted directory is visible: {out:?}")
        })?;
        check(
            out.matches("No such file or directory").count() == 3,
            || format!("a host directory is visible: {out:?}"),
        )
    }

    pub(super) fn read_only_mount_honoured(&mut self) -> Outcome {
        let target = self.ro.join("from-shell.txt");
        let cmd = format!("echo x > {}; echo \"rc=$?\"", target.display());
        let out = self.shell(&cmd)?;
        check(
            out.contains("Read-only file system") && exit_codes(&out) == ["1"],
            || format!("the write was not stopped by the mount: {out:?}"),
        )?;
        check(!target.exists(), || "the file exists on the host".into())?;
        // write_file on the read-only directory is refused before anything runs.
        let path = self.ro.join("from-write_file.txt");
        match self.call("write_file", json!({ "path": path, "content": "x" }))? {
            Body::Refused { .. } => check(!path.exists(), || "the file exists".into()),
            other => Err(format!("write_file to the ro dir: {}", show(&other))),
        }
    }

    pub(super) fn read_write_mount_honoured(&mut self) -> Outcome {
        let target = self.rw.join("from-shell.txt");
        let cmd = format!("echo from-shell > {t} && cat {t}", t = target.display());
        let out = self.shell(&cmd)?;
        check(out.starts_with("from-shell\n"), || {
            format!("output {out:?}")
        })?;
        let on_disk = std::fs::read_to_string(&target).map_err(|e| format!("host: {e}"))?;
        check(on_disk == "from-shell\n", || {
            format!("host file {on_disk:?}")
        })
    }
}
