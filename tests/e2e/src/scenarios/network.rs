//! The network: a shell has none (the controls show the fake tailnet host is there to reach),
//! http_fetch reaches only the grant's hosts at allowed addresses, through its proxy, and a shell
//! of a grant with shell_hosts reaches only those, through its own proxy and the proxy variables.

use std::time::Duration;

use client::Body;
use proto::sentences::host_not_granted;

use super::{
    check, exit_codes, show, Outcome, Suite, GRANT, GRANT_HOSTS, NET_CONNECTIONS, NET_GRANT,
};
use crate::https::{HELLO, TAILNET_GREETING};
use crate::system;

impl Suite {
    // --- shell and the network ---------------------------------------------------------------

    /// Without the sandbox's `--network=none`, a container on the egress proxy's network in
    /// this namespace does reach the fake tailnet host: so the refusals below are the
    /// sandbox's doing, not a missing host.
    pub(super) fn control_egress_network_reaches_tailnet(&mut self) -> Outcome {
        let network = self
            .egress_network
            .ok_or("this run has no egress network (a Podman run has one)")?;
        let network = format!("--network={network}");
        let mut c = self.user.command(&self.podman);
        c.args([
            "run",
            "--rm",
            "--name=boxmaker-e2e-control",
            &network,
            &self.image,
        ]);
        self.control_reaches_tailnet(c, "container")
    }

    /// The same for bwrap: a bare `bwrap --share-net` over the same tools root, as the service
    /// user, reaches the fake tailnet host; the tool sandbox differs from it by the network
    /// namespace brokerd's argument list unshares.
    pub(super) fn control_share_net_reaches_tailnet(&mut self) -> Outcome {
        let root = self.tools_root.clone().ok_or("no tools root")?;
        let mut c = self.user.command("bwrap");
        c.args([
            "--unshare-all",
            "--share-net",
            "--die-with-parent",
            "--ro-bind",
        ])
        .arg(&root)
        .args(["/", "--proc", "/proc", "--dev", "/dev"]);
        self.control_reaches_tailnet(c, "sandbox")
    }

    /// Runs `nc` to the fake tailnet host's port 80 at the end of `c` (a container or sandbox
    /// command up to its program): it must get the host's greeting.
    fn control_reaches_tailnet(&mut self, mut c: std::process::Command, what: &str) -> Outcome {
        let nc_s = self.secs(5).to_string();
        c.args([
            "/bin/busybox",
            "timeout",
            &nc_s,
            "/bin/busybox",
            "nc",
            "100.100.100.100",
            "80",
        ]);
        let (code, out) = system::output(c, self.t(Duration::from_secs(30)))?;
        self.control_connections += 1;
        check(out.contains(TAILNET_GREETING), || {
            format!("the control {what} did not reach 100.100.100.100:80 (exit {code}): {out}")
        })
    }

    /// `nc` to each target from the sandbox: each must fail to connect, with a reason, and
    /// neither crash nor reach anything.
    fn nc_fails(&mut self, targets: &[&str]) -> Outcome {
        let mut cmd = String::new();
        let nc_s = self.secs(5);
        for t in targets {
            let (host, port) = t.split_once(':').unwrap_or((t, "80"));
            cmd.push_str(&format!(
                "echo '== {t}'; timeout {nc_s} nc {host} {port} </dev/null 2>&1; echo \"rc=$?\"; "
            ));
        }
        let out = self.shell(&cmd)?;
        for t in targets {
            let section = out
                .split("== ")
                .find(|s| s.starts_with(&format!("{t}\n")))
                .ok_or_else(|| format!("no output for {t}: {out:?}"))?;
            check(!section.contains(TAILNET_GREETING), || {
                format!("{t} was reached: {section:?}")
            })?;
            check(
                exit_codes(section) == ["1"] && section.contains("can't connect"),
                || {
                    format!("{t}: nc did not fail to connect as expected (a crash or a hang is not a refusal): {section:?}")
                },
            )?;
        }
        Ok(())
    }

    pub(super) fn shell_cannot_reach_tailnet(&mut self) -> Outcome {
        self.nc_fails(&["100.100.100.100:80", "100.100.100.100:443"])
    }

    pub(super) fn shell_cannot_reach_host(&mut self) -> Outcome {
        // The namespace's own addresses: the HTTPS host, the nameserver (TCP), slirp4netns's
        // gateway and DNS addresses.
        self.nc_fails(&[
            "192.0.2.1:443",
            "192.0.2.2:443",
            "192.0.2.53:53",
            "10.0.2.2:80",
            "10.0.2.3:53",
        ])
    }

    pub(super) fn shell_has_no_network(&mut self) -> Outcome {
        let w = self.secs(5);
        let out = self.shell(&format!(
            "sed 1,2d /proc/net/dev | cut -d: -f1 | tr -d ' '; echo '== route'; cat /proc/net/route; echo '== resolv'; cat /etc/resolv.conf; \
             echo '== wget'; timeout {w} wget -q -O- https://ok.test/ 2>&1; echo \"rc=$?\"; \
             echo '== dns'; timeout {w} nslookup ok.test 192.0.2.53 2>&1; echo \"rc=$?\""
        ))?;
        check(out.starts_with("lo\n== route\n"), || {
            format!("the sandbox has an interface besides lo: {out:?}")
        })?;
        let route = out.split("== route\n").nth(1).unwrap_or("");
        let route_lines = route
            .split("== resolv")
            .next()
            .unwrap_or("")
            .lines()
            .count();
        check(route_lines <= 1, || {
            format!("the sandbox has routes: {route:?}")
        })?;
        let wget = out.split("== wget\n").nth(1).unwrap_or("");
        let wget = wget.split("== dns").next().unwrap_or("");
        check(!wget.contains(HELLO), || {
            format!("wget reached ok.test: {wget:?}")
        })?;
        check(
            exit_codes(wget) == ["1"] && wget.contains("bad address"),
            || {
                format!(
                    "wget did not fail to resolve (a crash or a hang is not a refusal): {wget:?}"
                )
            },
        )?;
        let dns = out.split("== dns\n").nth(1).unwrap_or("");
        check(
            !dns.contains("192.0.2.1") && exit_codes(dns) == ["1"],
            || format!("nslookup got an answer or crashed: {dns:?}"),
        )
    }

    // --- http_fetch --------------------------------------------------------------------------

    pub(super) fn fetch_other_host(&mut self) -> Outcome {
        match self.fetch("https://other.test/")? {
            Body::Refused { reason } => {
                let want = host_not_granted("other.test", &GRANT_HOSTS.map(String::from));
                check(reason == want, || {
                    format!("reason {reason:?}, want {want:?}")
                })
            }
            other => Err(format!("expected a refusal, got {}", show(&other))),
        }
    }

    /// An http_fetch the proxy refused: the toolkit's one line with curl's report of the
    /// proxy's SOCKS5 reply (RFC 1928: 2 not allowed, 4 host unreachable) for `host`.
    fn fetch_refused_by_proxy(&mut self, url: &str, host: &str, reply: u8) -> Outcome {
        // curl before 8.9 (Debian 12) says "Can't complete", 8.9 and later (NixOS) "cannot
        // complete"; the rest of the line, the host and the reply code, is the same.
        let wants = ["Can't", "cannot"]
            .map(|verb| format!("{verb} complete SOCKS5 connection to {host}. ({reply})"));
        self.fetch_fails_in_curl(url, &wants)
    }

    /// What the model sees when curl fails: a result that is one `http_fetch: <url>: ...`
    /// line (docs/design.md#the-toolkit), with no body; `wants`: curl's report, in any one of
    /// its spellings.
    fn fetch_fails_in_curl(&mut self, url: &str, wants: &[String]) -> Outcome {
        match self.fetch(url)? {
            Body::Result { content, .. } => {
                let prefix = format!("http_fetch: {url}: ");
                check(
                    content.starts_with(&prefix) && content.trim_end().lines().count() == 1,
                    || format!("content {content:?} is not one {prefix:?} line"),
                )?;
                check(
                    !content.contains(HELLO) && !content.contains("[http"),
                    || format!("a body came back: {content:?}"),
                )?;
                check(wants.iter().any(|w| content.contains(w.as_str())), || {
                    format!("content {content:?} says none of {wants:?}")
                })
            }
            other => Err(format!(
                "expected a result with curl's error, got {}",
                show(&other)
            )),
        }
    }

    pub(super) fn fetch_redirect(&mut self) -> Outcome {
        // The proxy answers 2 (not allowed) for other.test.
        self.fetch_refused_by_proxy("https://ok.test/redirect-other", "other.test", 2)
    }

    pub(super) fn fetch_port(&mut self) -> Outcome {
        match self.fetch("https://ok.test:8443/")? {
            Body::Refused { reason } => {
                check(reason.contains("443"), || format!("reason {reason:?}"))
            }
            other => Err(format!("expected a refusal, got {}", show(&other))),
        }
    }

    /// The contrast for the four below: another name of the same pattern that resolves into
    /// allow_addresses is fetched.
    pub(super) fn fetch_allowed_subdomain(&mut self) -> Outcome {
        match self.fetch("https://www.ok.test/")? {
            Body::Result { content, .. } => {
                check(content == format!("{HELLO}\n[http 200]"), || {
                    format!("content {content:?}")
                })
            }
            other => Err(format!("expected a result, got {}", show(&other))),
        }
    }

    pub(super) fn fetch_tailnet_name(&mut self) -> Outcome {
        self.fetch_refused_by_proxy("https://tailnet.ok.test/", "tailnet.ok.test", 4)
    }

    pub(super) fn fetch_cgnat_name(&mut self) -> Outcome {
        self.fetch_refused_by_proxy("https://cgnat.ok.test/", "cgnat.ok.test", 4)
    }

    pub(super) fn fetch_loopback_name(&mut self) -> Outcome {
        self.fetch_refused_by_proxy("https://loop.ok.test/", "loop.ok.test", 4)
    }

    pub(super) fn fetch_metadata_name(&mut self) -> Outcome {
        self.fetch_refused_by_proxy("https://meta.ok.test/", "meta.ok.test", 4)
    }

    /// Every connection the fake tailnet host saw came from the control container.
    pub(super) fn tailnet_untouched(&mut self) -> Outcome {
        let Some(log) = &self.tailnet_log else {
            return Ok(());
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let text = text
            .lines()
            .skip(self.tailnet_before)
            .collect::<Vec<_>>()
            .join("\n");
        let n = text.lines().count();
        check(n == self.control_connections, || {
            format!(
                "the tailnet host saw {n} connection(s), the control made {}: {text}",
                self.control_connections
            )
        })
    }

    // --- shell with shell_hosts --------------------------------------------------------------

    /// A shell call of the `e2e-net` grant (shell_hosts: `ok.test`, and four names that resolve
    /// where the proxy must never connect); an `ask` is approved.
    fn net_shell(&mut self, command: &str) -> Result<String, String> {
        // The call before this one cleans up first, as between scenarios: on a slow host (the
        // guest) a proxy's removal beside the next call's start can pass podman's 8 s helper
        // bound, which poisons network work until restart.
        self.await_settled();
        let args = serde_json::json!({ "command": command });
        let body = match self.call_as(NET_GRANT, "shell", args.clone(), None)? {
            Body::Ask { ticket, .. } => self.call_as(NET_GRANT, "shell", args, Some(ticket))?,
            other => other,
        };
        match body {
            Body::Result { content, .. } => Ok(content),
            other => Err(format!("expected a result, got {}", show(&other))),
        }
    }

    /// The outcome record of this session's last call: the last record of that call that has
    /// `key`.
    pub(super) fn audited_with(&self, key: &str) -> Result<serde_json::Value, String> {
        let log = self.work.join("state").join("audit.jsonl");
        let text = std::fs::read_to_string(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let call = self.call_id();
        text.lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|r| {
                r["session"] == self.session.as_str()
                    && r["call"] == call.as_str()
                    && r.get(key).is_some()
            })
            .ok_or_else(|| format!("no {key} in the records of call {call}"))
    }

    /// What the outcome record of this session's last call says its proxy did (`egress`).
    pub(super) fn egress_audited(&self) -> Result<serde_json::Value, String> {
        Ok(self.audited_with("egress")?["egress"].clone())
    }

    /// `curl <args>` in the `e2e-net` shell, by the environment alone: its output and exit
    /// code (`rc=N`), standard error included.
    fn net_curl(&mut self, args: &str) -> Result<String, String> {
        let w = self.secs(10);
        self.net_shell(&format!(
            "curl -sS --max-time {w} {args} 2>&1; rc=$?; echo; echo \"rc=$rc\""
        ))
    }

    /// curl refused by the proxy at CONNECT: exit 56 and the status in curl's report, no body.
    fn refused_at_connect(out: &str, status: u16, what: &str) -> Outcome {
        check(!out.contains(HELLO), || {
            format!("{what} was reached: {out:?}")
        })?;
        check(
            exit_codes(out) == ["56"] && out.contains(&format!("{status}")),
            || format!("{what}: curl did not report a CONNECT refused with {status}: {out:?}"),
        )
    }

    /// curl, told nothing but the environment brokerd's toolkit set, fetches the granted host
    /// over TLS end to end (the suite's CA is in the sandbox's trust store).
    pub(super) fn shell_egress_reaches_granted_host(&mut self) -> Outcome {
        let out = self.net_shell(
            "echo \"proxy=$HTTPS_PROXY no_proxy=[$NO_PROXY]\"; \
             curl -sS --max-time 10 https://ok.test/ 2>&1; rc=$?; echo; echo \"rc=$rc\"; \
             for d in /run/egress-report /run/egress/../egress-report /run/egress/../../run/egress-report; do \
               ls -a \"$d\" >/dev/null 2>&1 && echo \"report reachable: $d\"; \
               echo forged > \"$d/connections.jsonl\" 2>/dev/null && echo \"report written: $d\"; \
             done; ls -a /run/egress",
        )?;
        // The proxy's report directory is not in the command's sandbox by any path.
        check(
            !out.contains("report reachable") && !out.contains("report written"),
            || format!("the command reached the proxy's report: {out:?}"),
        )?;
        check(
            out.contains("proxy=http://127.0.0.1:") && out.contains("no_proxy=[]"),
            || format!("the proxy variables are not the bridge's: {out:?}"),
        )?;
        check(out.contains(HELLO) && exit_codes(&out) == ["0"], || {
            format!("curl did not fetch ok.test through the proxy: {out:?}")
        })?;
        // The outcome record says where the call went, and how much came back.
        let e = self.egress_audited()?;
        let host = &e["hosts"][0];
        check(
            e["connections"] == 1
                && e["refused"] == 0
                && host["host"] == "ok.test"
                && host["connections"] == 1
                && host["up"].as_u64().is_some_and(|n| n > 0)
                && host["down"]
                    .as_u64()
                    .is_some_and(|n| n > HELLO.len() as u64),
            || format!("the outcome record's egress is not the one connection: {e}"),
        )
    }

    /// Another test host, and a name the http_fetch grant's `*.ok.test` would allow but
    /// shell_hosts does not: both refused by the proxy with 403.
    pub(super) fn shell_egress_refuses_other_host(&mut self) -> Outcome {
        let out = self.net_curl("https://other.test/")?;
        Self::refused_at_connect(&out, 403, "other.test")?;
        let out = self.net_curl("https://www.ok.test/")?;
        Self::refused_at_connect(&out, 403, "www.ok.test")?;
        // Audited as a refusal with its reason, nothing relayed.
        let e = self.egress_audited()?;
        check(
            e["connections"] == 0
                && e["refused"] == 1
                && e["up"] == 0
                && e["refusals"][0]["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("matches no --allow pattern")),
            || format!("the outcome record's egress is not the refusal: {e}"),
        )
    }

    /// A CONNECT to the granted name on port 80 is refused (403); a plain-HTTP request to it
    /// through the proxy is never forwarded (405).
    pub(super) fn shell_egress_refuses_port_80(&mut self) -> Outcome {
        let out = self.net_curl("--proxytunnel http://ok.test:80/")?;
        Self::refused_at_connect(&out, 403, "ok.test:80 by CONNECT")?;
        let out = self.net_curl("-o /dev/null -w 'code=%{http_code}' http://ok.test/")?;
        check(
            out.contains("code=405") && exit_codes(&out) == ["0"] && !out.contains(HELLO),
            || format!("a plain-HTTP request was not answered 405: {out:?}"),
        )
    }

    /// ok.test's own address, asked for as an IP literal: refused (403) although the name
    /// that resolves to it is granted.
    pub(super) fn shell_egress_refuses_ip_literal(&mut self) -> Outcome {
        let out = self.net_curl("-k https://192.0.2.1/")?;
        Self::refused_at_connect(&out, 403, "192.0.2.1")?;
        let out = self.net_curl("-k https://[::ffff:192.0.2.1]/")?;
        Self::refused_at_connect(&out, 403, "[::ffff:192.0.2.1]")
    }

    /// Spellings of a name sent as raw `CONNECT` heads through the bridge (busybox `nc`): the
    /// granted name in upper case and with a trailing dot is the granted name (200); a NUL, a
    /// `%` escape, a control character, trailing junk, a port in the host field, a name past
    /// 253 bytes, a Unicode or punycode look-alike are refused (400 or 403) and nothing is
    /// relayed for them, which the outcome record counts.
    pub(super) fn shell_egress_spellings_of_a_name(&mut self) -> Outcome {
        let long = format!("{}.ok.test", ["a"; 125].join("."));
        let rows: Vec<(String, bool)> = vec![
            ("OK.TEST:443".into(), true),
            ("ok.test.:443".into(), true),
            ("Ok.Test.:443".into(), true),
            ("ok.test\\000.other.test:443".into(), false),
            ("ok.test%%00.other.test:443".into(), false),
            ("ok%%2etest:443".into(), false),
            ("ok.test\\001:443".into(), false),
            ("ok.test:443x".into(), false),
            ("ok.test:443:443".into(), false),
            // The port is a number: 0443 is 443.
            ("ok.test:0443".into(), true),
            (format!("{long}:443"), false),
            ("\\303\\266k.test:443".into(), false),
            ("xn--k-tfa.test:443".into(), false),
            ("ok.test..:443".into(), false),
        ];
        // Each head, then bytes the server's TLS refuses, so that a tunnel, if made, ends; as
        // many rows a call as its proxy accepts connections.
        let w = self.secs(5);
        let mut hosts = Vec::new();
        for (chunk, part) in rows.chunks(NET_CONNECTIONS as usize).enumerate() {
            let mut script = String::from("p=${HTTPS_PROXY##*:}; ");
            for (i, (target, _)) in part.iter().enumerate() {
                script.push_str(&format!(
                    "printf 'CONNECT {target} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\nnot tls\\r\\n\\r\\n' \
                     | timeout {w} nc 127.0.0.1 \"$p\" 2>&1 | head -n 1 | sed 's/^/row{i} /'; "
                ));
            }
            let out = self.net_shell(&script)?;
            let mut relayed = 0;
            for (i, (target, allowed)) in part.iter().enumerate() {
                let line = out
                    .lines()
                    .find(|l| l.starts_with(&format!("row{i} ")))
                    .unwrap_or("");
                let code = line.split_whitespace().nth(2).unwrap_or("");
                let ok = match allowed {
                    true => code == "200",
                    false => code == "400" || code == "403",
                };
                let want = if *allowed { "200" } else { "400 or 403" };
                check(ok, || {
                    format!("CONNECT {target}: want {want}, got {line:?}: {out:?}")
                })?;
                relayed += u64::from(*allowed);
            }
            let e = self.egress_audited()?;
            check(
                e["connections"] == relayed && e["refused"] == (part.len() as u64 - relayed),
                || format!("call {chunk}: the outcome record's egress does not match: {e}"),
            )?;
            if let Some(a) = e["hosts"].as_array() {
                hosts.extend(
                    a.iter()
                        .filter_map(|h| h["host"].as_str().map(str::to_string)),
                );
            }
        }
        // Every spelling of the granted name is one host, in its comparable form; a refused
        // name the model spelled is never in the record.
        hosts.dedup();
        check(hosts == ["ok.test"], || {
            format!("hosts in the records: {hosts:?}")
        })
    }

    /// Names the grant's shell_hosts name that resolve into the tailnet, CGNAT, loopback and
    /// the metadata address: each refused at CONNECT (502) and nothing relayed; the tailnet
    /// host's log is judged by `tailnet-untouched`.
    pub(super) fn shell_egress_granted_names_at_forbidden_addresses(&mut self) -> Outcome {
        let names = [
            "tailnet.ok.test",
            "cgnat.ok.test",
            "loop.ok.test",
            "meta.ok.test",
        ];
        let w = self.secs(10);
        let script: String = names
            .iter()
            .map(|n| {
                format!(
                    "echo '== {n}'; curl -sS --max-time {w} https://{n}/ 2>&1; rc=$?; echo; echo \"rc=$rc\"; "
                )
            })
            .collect();
        let out = self.net_shell(&script)?;
        for n in names {
            let part = out
                .split(&format!("== {n}\n"))
                .nth(1)
                .and_then(|rest| rest.split("== ").next())
                .unwrap_or("");
            Self::refused_at_connect(part, 502, n)?;
        }
        let e = self.egress_audited()?;
        check(
            e["connections"] == 0
                && e["refused"] == names.len() as u64
                && e["refusals"].as_array().is_some_and(|r| {
                    r.iter().all(|t| {
                        t["reason"]
                            .as_str()
                            .is_some_and(|r| r.contains("no public or allowed address"))
                    })
                }),
            || format!("the outcome record's egress is not four refusals by address: {e}"),
        )
    }

    /// Name lookups from a shell with a way out: busybox `nslookup` against the test
    /// nameserver and the sandbox's own resolver, and `getent`, for names of this run only.
    /// None gets an answer, and the nameserver's log (where the run has one) holds none of
    /// them, while it does hold the names the proxy resolved for earlier scenarios: only the
    /// proxy, outside, resolves.
    pub(super) fn shell_egress_dns_leaves_nothing(&mut self) -> Outcome {
        let nonce = format!("leak-{}-{}", std::process::id(), self.calls);
        let before = self
            .dns_log
            .as_ref()
            .map_or(0, |l| std::fs::read(l).map_or(0, |t| t.len()));
        let w = self.secs(5);
        let out = self.net_shell(&format!(
            "timeout {w} nslookup {nonce}-a.ok.test 192.0.2.53 2>&1; echo \"rc=$?\"; \
             timeout {w} nslookup {nonce}-b.ok.test 2>&1; echo \"rc=$?\"; \
             timeout {w} getent hosts {nonce}-c.ok.test 2>&1; echo \"rc=$?\"; \
             echo '== proxy'; curl -sS --max-time {w} -o /dev/null https://ok.test/ 2>&1"
        ))?;
        let (lookups, _) = out.split_once("== proxy").unwrap_or((&out, ""));
        check(
            !lookups.contains("192.0.2.1")
                && exit_codes(lookups).len() == 3
                && exit_codes(lookups).iter().all(|c| *c != "0"),
            || format!("a lookup from the sandbox was answered: {out:?}"),
        )?;
        let Some(log) = &self.dns_log else {
            return Ok(());
        };
        let text = std::fs::read(log).unwrap_or_default();
        let asked = String::from_utf8_lossy(text.get(before..).unwrap_or_default());
        check(!asked.contains(&nonce), || {
            format!("the nameserver saw a lookup from the sandbox: {asked:?}")
        })?;
        // The control: the proxy's own lookup of ok.test, in the same call, is in the log.
        check(
            asked.lines().any(|l| l.trim_end_matches('.') == "ok.test"),
            || format!("the nameserver's log has no lookup of ok.test by the proxy: {asked:?}"),
        )
    }

    /// The proxy killed while a tunnel through it is open: the command sees the tunnel close,
    /// the call ends with its answer (no wait for its time limit), nothing is left (judged
    /// after every scenario), the record counts the tunnel as open at the end, and the next
    /// call with a way out gets a proxy of its own and works.
    pub(super) fn shell_egress_proxy_killed_mid_transfer(&mut self) -> Outcome {
        let user = self.user.clone();
        let limit = self.t(Duration::from_secs(20));
        let killer = std::thread::spawn(move || {
            let started = std::time::Instant::now();
            while started.elapsed() < limit {
                let proxy = system::sandbox_processes(&user).into_iter().find(|p| {
                    !p.is_bwrap()
                        && p.cmdline.contains("egress-proxy")
                        && p.cmdline.contains("--report")
                });
                if let Some(p) = proxy {
                    // Long enough for the tunnel to be open.
                    std::thread::sleep(Duration::from_secs(2));
                    system::kill_pid(p.pid);
                    return Some(p.cmdline);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            None
        });
        let hold = self.secs(30);
        let started = std::time::Instant::now();
        let out = self.net_shell(&format!(
            "p=${{HTTPS_PROXY##*:}}; \
             (printf 'CONNECT ok.test:443 HTTP/1.1\\r\\n\\r\\n'; \
              n=0; while [ ! -e /tmp/nc-done ] && [ $n -lt {hold} ]; do sleep 1; n=$((n+1)); done) \
             | {{ timeout {hold} nc 127.0.0.1 \"$p\" 2>&1 | head -n 1; touch /tmp/nc-done; }}; \
             echo \"nc-ended\""
        ))?;
        let took = started.elapsed();
        let killed = killer
            .join()
            .map_err(|_| "the killer thread panicked".to_string())?;
        check(killed.is_some(), || {
            format!("no proxy process was found to kill: {out:?}")
        })?;
        check(
            out.contains("200")
                && out.contains("nc-ended")
                && took < self.t(Duration::from_secs(25)),
            || format!("the tunnel did not end with the proxy (after {took:?}): {out:?}"),
        )?;
        let e = self.egress_audited()?;
        check(e["connections"] == 1 && e["open_at_end"] == 1, || {
            format!("the record does not show the tunnel open at the end: {e}")
        })?;
        let out = self.net_curl("-o /dev/null -w 'code=%{http_code}' https://ok.test/")?;
        check(out.contains("code=200"), || {
            format!("the next call's way out does not work: {out:?}")
        })
    }

    /// Rebinding: a granted name that resolves to the HTTPS host and then to loopback, asked
    /// for twice in one call. The proxy resolves each connection once and checks what it
    /// dials, so the one that resolved to loopback is refused (502) and nothing reaches it;
    /// which of the two comes first depends on the nameserver's turn, so exactly one of each.
    pub(super) fn shell_egress_rebinding_is_refused(&mut self) -> Outcome {
        let w = self.secs(10);
        let n = crate::dns::REBIND_NAME;
        let out = self.net_shell(&format!(
            "for i in 1 2; do curl -sS --max-time {w} -o /dev/null -w 'code=%{{http_code}}\\n' \
             https://{n}/ 2>&1; echo \"rc=$?\"; done"
        ))?;
        let codes: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("code="))
            .collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        check(sorted == ["000", "200"], || {
            format!("want one fetch and one refusal of {n}: {out:?}")
        })?;
        let e = self.egress_audited()?;
        check(
            e["connections"] == 1
                && e["refused"] == 1
                && e["refusals"][0]["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("[127.0.0.1]")),
            || format!("the record does not show the loopback answer refused: {e}"),
        )
    }

    /// A slow-loris on the bridge: clients that send four bytes of a head and then nothing,
    /// left behind by the command. A fetch on another connection of the same call is served
    /// meanwhile, the call answers at once when its command ends (its sandbox takes the slow
    /// clients with it), and nothing is left (judged after every scenario). The proxy's own
    /// 10 s handshake deadline is past this suite's shell limit: its unit test proves it.
    pub(super) fn shell_egress_slow_loris_holds_nothing_up(&mut self) -> Outcome {
        let w = self.secs(3);
        let out = self.net_shell(&format!(
            "p=${{HTTPS_PROXY##*:}}; \
             for i in 1 2 3 4; do (printf 'CONN'; sleep 60) | nc 127.0.0.1 \"$p\" >/dev/null 2>&1 & done; \
             sleep 1; curl -sS --max-time {w} -o /dev/null -w 'code=%{{http_code}}\\n' https://ok.test/ 2>&1"
        ))?;
        check(out.contains("code=200"), || {
            format!("the fetch beside the slow clients was not served: {out:?}")
        })?;
        let e = self.egress_audited()?;
        check(e["connections"] == 1, || {
            format!("the record does not show the one fetch: {e}")
        })
    }

    /// The same shell, with the variables ignored: no name resolves, and the granted host's
    /// address has no route.
    pub(super) fn shell_egress_no_route_around_the_proxy(&mut self) -> Outcome {
        let w = self.secs(5);
        let out = self.net_shell(&format!(
            "echo '== curl'; curl -sS --max-time {w} --noproxy '*' https://ok.test/ 2>&1; rc=$?; echo; echo \"rc=$rc\"; \
             echo '== nc'; timeout {w} nc 192.0.2.1 443 </dev/null 2>&1; echo \"rc=$?\"; \
             echo '== interfaces'; sed 1,2d /proc/net/dev | cut -d: -f1 | tr -d ' '"
        ))?;
        check(!out.contains(HELLO), || {
            format!("ok.test was reached: {out:?}")
        })?;
        let curl = out.split("== curl\n").nth(1).unwrap_or("");
        let curl = curl.split("== nc").next().unwrap_or("");
        check(exit_codes(curl) == ["6"], || {
            format!("curl without the proxy did not fail to resolve: {curl:?}")
        })?;
        let nc = out.split("== nc\n").nth(1).unwrap_or("");
        let nc = nc.split("== interfaces").next().unwrap_or("");
        check(
            exit_codes(nc) == ["1"] && nc.contains("can't connect"),
            || format!("nc to 192.0.2.1:443 did not fail to connect: {nc:?}"),
        )?;
        let interfaces = out.split("== interfaces\n").nth(1).unwrap_or("");
        let names: Vec<&str> = interfaces
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("[exit"))
            .collect();
        check(names == ["lo"], || {
            format!("the sandbox has an interface besides lo: {interfaces:?}")
        })
    }

    /// A flood of connection attempts in one call: curl, 64 at a time and a new connection for
    /// each, in batches of 500 until 10,000 or the flood's time is up (a slow host makes
    /// fewer; the first batch always runs). At most `egress_connections` of them take the call's
    /// slots and the rest are refused; every transfer curl saw served was relayed; the record counts each refusal up to the report's bound and says when it cut
    /// there; a call beside the flood, on another grant, is answered as usual; the next call
    /// has connections of its own.
    pub(super) fn shell_egress_connection_flood(&mut self) -> Outcome {
        const MOST: u64 = 10_000;
        const BATCH: u64 = 500;
        const LEAST: u64 = BATCH;
        self.await_settled();
        self.calls += 1;
        let (socket, session, call) = (self.socket.clone(), self.session.clone(), self.call_id());
        let wait = self.t(super::CALL_WAIT);
        let delay = self.t(Duration::from_millis(500));
        let beside = std::thread::spawn(move || {
            std::thread::sleep(delay);
            let args = serde_json::json!({ "command": "echo beside the flood" });
            super::call_on(&socket, wait, &session, &call, GRANT, "shell", args, None)
        });
        // 2 s by /proc/uptime (hundredths), not scaled: well under the shell limit (4 s,
        // times the scale) on a slow host too, whose sandbox takes seconds to start and whose
        // last batch runs past the budget.
        let budget = 200;
        let out = self.net_shell(&format!(
            "now() {{ read t _ </proc/uptime; echo \"${{t%.*}}${{t#*.}}\"; }}; \
             end=$(( $(now) + {budget} )); n=0; \
             while [ $n -lt {LEAST} ] || {{ [ $n -lt {MOST} ] && [ $(now) -lt $end ]; }}; do \
               curl -s --no-progress-meter -o /dev/null -w '%{{http_code}}\n' \
                 --parallel --parallel-max 64 -H 'Connection: close' \
                 \"https://ok.test/#$n-[1-{BATCH}]\" 2>/dev/null; n=$((n + {BATCH})); \
             done | sort | uniq -c"
        ));
        let beside = beside
            .join()
            .map_err(|_| "the calling thread panicked".to_string())?;
        let out = out?;
        let tally: Vec<(u64, &str)> = out
            .lines()
            .filter_map(|l| l.trim().split_once(' '))
            .filter_map(|(n, code)| Some((n.parse::<u64>().ok()?, code)))
            .collect();
        let attempts: u64 = tally.iter().map(|(n, _)| n).sum();
        let refused: u64 = tally
            .iter()
            .filter(|(_, c)| *c == "000")
            .map(|(n, _)| n)
            .sum();
        let served = attempts - refused;
        eprintln!("  (a flood of {attempts} connection attempts, {served} served)");
        // curl may lose a transfer of its own in the crowd (a tunnel it had queued a transfer
        // on closing, a slot's handshake it gave up on): such a slot is used, not relayed.
        check(
            (1..=NET_CONNECTIONS).contains(&served) && attempts >= LEAST,
            || format!("want at most {NET_CONNECTIONS} served of at least {LEAST}: {out:?}"),
        )?;
        match beside {
            Ok(Body::Result { content, .. }) if content.contains("beside the flood") => {}
            other => {
                return Err(format!(
                    "the call beside the flood was not answered as usual: {other:?}"
                ))
            }
        }
        // Each refusal the proxy saw is a line of the report until its bound; past it, the
        // record says it was cut there. An attempt the bridge could not pass on (the proxy's
        // backlog full) never reaches the proxy to be counted: at least half of them must.
        let e = self.egress_audited()?;
        let bound = proto::egress::REPORT_MAX_LINES;
        let counted = e["refused"].as_u64().unwrap_or(0);
        let cut = e["incomplete"]
            .as_str()
            .is_some_and(|w| w.contains("bound"));
        let want = if refused >= bound {
            counted <= bound && counted + NET_CONNECTIONS >= bound && cut
        } else {
            counted <= refused && counted * 2 >= refused && !cut
        };
        let relayed = e["connections"].as_u64().unwrap_or(0);
        check(
            (served..=NET_CONNECTIONS).contains(&relayed) && want,
            || {
                format!(
                    "the outcome record does not count {served} served and {refused} refused \
                 (bound {bound}): {e}"
                )
            },
        )?;
        let out = self.net_curl("-o /dev/null -w 'code=%{http_code}' https://ok.test/")?;
        check(out.contains("code=200"), || {
            format!("the next call did not get connections of its own: {out:?}")
        })
    }

    /// `egress_connections` holds for the call: of more connections than it, the first that
    /// many fetch ok.test, the rest are closed without an answer; the next call has its own.
    pub(super) fn shell_egress_connection_bound(&mut self) -> Outcome {
        let tries = NET_CONNECTIONS + 3;
        let out = self.net_shell(&format!(
            "for i in $(seq {tries}); do curl -s --max-time 5 -o /dev/null -w '%{{http_code}}\n' https://ok.test/; done"
        ))?;
        let codes: Vec<&str> = out.lines().filter(|l| l.len() == 3).collect();
        let want: Vec<&str> = (0..tries)
            .map(|i| if i < NET_CONNECTIONS { "200" } else { "000" })
            .collect();
        check(codes == want, || {
            format!("want {NET_CONNECTIONS} fetches then refusals, got {codes:?}: {out:?}")
        })?;
        // The record counts both: the connections relayed and those past the bound.
        let e = self.egress_audited()?;
        check(
            e["connections"] == NET_CONNECTIONS
                && e["refused"] == 3
                && e["refusals"][0]["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("connections are used")),
            || format!("the outcome record's egress does not count the bound: {e}"),
        )?;
        let out = self.net_curl("-o /dev/null -w 'code=%{http_code}' https://ok.test/")?;
        check(out.contains("code=200"), || {
            format!("the next call did not get connections of its own: {out:?}")
        })
    }
}
