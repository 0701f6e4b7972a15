# Two hosts running services.boxmaker, one per backend, with the limits enforced (the VMs have
# cgroup v2; the Podman one the module's lingering user), checked for what is the module's own.
#
# On both, through the module's own socket and unit, with boxctl as a client in the clients
# group: a read, a write, an http_fetch of a granted host, an http_fetch refused because the name
# is in the tailnet, and a shell that cannot reach the network, with no container, sandbox
# cgroup or egress directory left after each. The test hosts (boxmaker-e2e serve: ok.test at
# 192.0.2.1, a nameserver at 192.0.2.53, a fake tailnet host at 100.100.100.100) sit on a dummy
# interface of each VM, which is also the VM's resolver; the test image trusts their CA.
#
# On the Podman host (`host`), also: the socket's owner and mode, activation on the first
# connection as the service user, a preflight that read its limits back, the pinned image,
# nested user namespaces denied in a sandbox (the seccomp profile of the user's Podman), and no
# container left after a stop. Then the end-to-end scenario suite (network denial, tailnet
# refusal, redirect refusal, limits, container clean-up, crashes) runs there exactly as CI runs
# it, through vm-tests/e2e.nix: in a network namespace of its own with the suite's own test
# hosts, and with the egress network NixOS's Podman has (pasta).
#
# The suite starts its own brokerd as the same service user (it must: the crash scenarios kill
# it), so the module's socket and service are stopped first: two brokerds of one user would
# sweep each other's containers. The suite's brokerd uses the image the module loaded.
#
# On the bwrap host (`bwrapHost`): the module's bwrap variant (Delegate=yes, no capabilities,
# cgroup = "delegated"), whose sandboxes are child groups of the unit's own cgroup.
#
# On both, a toolset the module builds from packages (services.boxmaker.toolsets: git and make),
# a layered image loaded by its ID on Podman, a tree and its closure's store paths on bwrap:
# brokerd's check of it passes, and a grant on it runs make and git log through the module's
# socket, where the base toolset has neither.
{ pkgs, packages }:
let
  suite = pkgs.callPackage ./e2e.nix { inherit (packages) e2e toolkit; };
  socket = "/run/boxmaker/broker.sock";
  brokerd = "${packages.boxmaker}/bin/brokerd";
  roDir = "/srv/vm/ro";
  # The suite per backend, as scripts the test script runs.
  onPodman = pkgs.writeShellScript "boxmaker-e2e-podman" (
    suite.run {
      inherit brokerd;
      backends = [ "podman" ];
      work = "/srv/e2e-podman";
      runArgs = [
        "--enforce-limits"
        "true"
      ];
    }
  );
  # The suite's brokerd runs outside any delegated cgroup (started from the test shell, not by
  # systemd), so its bwrap limits go through systemd-run scopes in the service user's manager
  # (lingering, as the module's Podman needs), as the Debian guest (vm-tests/guest) runs them.
  onBwrap = pkgs.writeShellScript "boxmaker-e2e-bwrap" (
    suite.run {
      inherit brokerd;
      backends = [ "bwrap" ];
      work = "/srv/e2e-bwrap";
      runArgs = [
        "--enforce-limits"
        "true"
        "--bwrap-cgroup"
        "systemd-scope"
      ];
    }
  );
  rwDir = "/srv/vm/rw";
  projDir = "/srv/vm/proj";
  testHostsDir = "/run/boxmaker-test-hosts";

  # What both hosts share: the module with a safe grant and an auto one, the clients, and the
  # test hosts on a dummy interface, which are also the host's resolver.
  common =
    { ... }:
    {
      imports = [ ../nixos/module.nix ];
      virtualisation.memorySize = 2048;
      virtualisation.diskSize = 4096;
      services.boxmaker = {
        enable = true;
        package = packages.boxmaker;
        toolsImage = suite.testImage;
        settings.runner.enforce_limits = true;
        # A stop with a call in flight waits this long before it kills and removes the rest.
        settings.broker.shutdown_grace_s = 3;
        # A grant of the module's own brokerd, so its config has one as a real one would.
        grants.vm = {
          mode = "safe";
          tools = [ "read_file" ];
          paths = [ { path = roDir; } ];
        };
        # A toolset built from packages, and a grant that runs it.
        toolsets.build.packages = [
          pkgs.gitMinimal
          pkgs.gnumake
        ];
        grants.proj = {
          mode = "auto";
          tools = [
            "write_file"
            "shell"
          ];
          paths = [
            {
              path = projDir;
              write = true;
            }
          ];
          toolset = "build";
        };
        grants.work = {
          mode = "auto";
          tools = [
            "read_file"
            "write_file"
            "shell"
            "http_fetch"
          ];
          paths = [
            {
              path = rwDir;
              write = true;
            }
            { path = roDir; }
          ];
          hosts = [
            "ok.test"
            "*.ok.test"
          ];
          allowAddresses = [ "192.0.2.0/24" ];
        };
      };
      users.users.loopd = {
        isNormalUser = true;
        extraGroups = [ "boxmaker-clients" ];
      };
      users.users.stranger.isNormalUser = true;
      systemd.tmpfiles.rules = [
        "d /srv/vm 0755 root root -"
        "d ${roDir} 0750 boxmaker boxmaker -"
        "f ${roDir}/hello.txt 0640 boxmaker boxmaker - hello from the host"
        "d ${rwDir} 0750 boxmaker boxmaker -"
        "d ${projDir} 0750 boxmaker boxmaker -"
      ];
      boot.kernelModules = [ "dummy" ];
      networking.nameservers = [ "192.0.2.53" ];
      systemd.services.boxmaker-test-hosts = {
        wantedBy = [ "multi-user.target" ];
        # Before brokerd, not its socket: an ordinary service comes after basic.target, which
        # comes after sockets.target and so after the socket, and systemd would break that
        # cycle by dropping a job (`make nix-check` verifies the boot with systemd-analyze).
        before = [ "boxmaker.service" ];
        path = [
          pkgs.iproute2
          pkgs.gawk
        ];
        # The layout of the suite's own namespace (tests/e2e/hosts-net.sh): the test hosts on
        # bmx0 and, where the VM has no default route, one onto an interface of its own, since
        # pasta copies every address of the default route's interface into the proxy's
        # container, where a test host's address would be the container's own.
        preStart = "${pkgs.bash}/bin/bash ${suite.driver}/tests/e2e/hosts-net.sh --gateway-if-none";
        serviceConfig = {
          RuntimeDirectory = baseNameOf testHostsDir;
          ExecStart = lib.escapeShellArgs [
            "${packages.e2e}/bin/boxmaker-e2e"
            "serve"
            "--ca"
            "${suite.testCa}"
            "--https"
            "192.0.2.1:443"
            "--dns"
            "192.0.2.53:53"
            "--tailnet"
            "100.100.100.100:80"
            "--tailnet"
            "100.100.100.100:443"
            "--tailnet-log"
            "${testHostsDir}/tailnet.log"
            "--ready"
            "${testHostsDir}/ready"
          ];
        };
      };
    };
  inherit (pkgs) lib;
in
{
  name = "boxmaker";

  nodes.host =
    { config, ... }:
    {
      imports = [ common ];
      # What tests/e2e/in-netns.sh and the suite use besides the module's Podman: bwrap for
      # the bwrap backend and its control, ip and the util-linux tools for the namespace.
      environment.systemPackages = [
        packages.e2e
        pkgs.bubblewrap
        pkgs.iproute2
        pkgs.util-linux
        # The test's own checks as the service user (the module puts Podman on the unit's
        # PATH only).
        config.virtualisation.podman.package
      ];
    };

  # The module's bwrap variant: the test image's files as the tools root, cgroup = "delegated".
  nodes.bwrapHost =
    { ... }:
    {
      imports = [ common ];
      services.boxmaker = {
        settings.runner.backend = "bwrap";
        bwrap.toolsRoot = suite.toolsRoot;
      };
    };

  # The NixOS test driver's own limit, and Hydra's: two suites (one per backend) and two VMs.
  globalTimeout = 5400;
  meta.timeout = 5400;

  testScript = ''
    import json
    import re
    import shlex
    import time
    import tomllib

    def as_boxmaker(cmd, node=None):
        node = node or host
        uid = node.succeed("id -u boxmaker").strip()
        return node.succeed(
            f"runuser -u boxmaker -- env XDG_RUNTIME_DIR=/run/user/{uid} "
            f"DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/{uid}/bus {cmd}"
        )

    # The scenario suite on one backend, through tests/e2e/in-netns.sh: it must exit 0 and end
    # with its summaries, "<backend>: N passed, 0 failed" and the total, with N at least the
    # scenarios the suite has (a run that printed nothing, or ran fewer, passed nothing).
    def suite(cmd, backend):
        out = host.succeed(cmd + " 2>&1")
        for line in out.splitlines():
            if line.startswith(("FAIL ", "podman: ", "bwrap: ")) or line.endswith(" failed"):
                print(line)
        runs = re.findall(rf"^{backend}: (\d+) passed, (\d+) failed$", out, re.M)
        assert runs, f"the suite on {backend} printed no summary: {out[-2000:]}"
        passed, failed = map(int, runs[-1])
        assert failed == 0 and passed >= ${toString suite.scenarioCount}, (
            f"the suite on {backend}: {passed} passed, {failed} failed "
            f"(the suite has ${toString suite.scenarioCount} scenarios)"
        )
        totals = re.findall(r"^\d+ passed, \d+ failed$", out, re.M)
        assert totals and totals[-1] == f"{passed} passed, 0 failed", f"the suite's total: {totals}"
        return out

    def call(node, n, grant, tool, args, session="vm"):
        out = node.succeed(
            f"runuser -u loopd -- boxctl --socket ${socket} call --session {session} --call c{n} "
            f"--grant {grant} {tool} {shlex.quote(json.dumps(args))} || true"
        )
        return json.loads(out)

    def config(node):
        return tomllib.loads(node.succeed("cat /etc/boxmaker/brokerd.toml"))

    # What a sandbox of this host leaves when it is not cleaned up: containers of the service
    # user (storage-only ones included) with brokerd's names, sandbox cgroups anywhere in the
    # unit's own cgroup (and the unit's cgroup itself once the unit is stopped), or with
    # "bwrap-scope" (the suite's brokerd, cgroup = "systemd-scope") the transient scopes and
    # sandbox groups in the service user's manager, sandbox and proxy processes of the
    # service user, and egress directories.
    def leftovers(node, backend, cgroup=None):
        left = []
        if backend == "podman":
            names = as_boxmaker("podman ps -a --external --format '{{.Names}}'", node).split()
            left += [f"container {n}" for n in names if n.startswith("boxmaker-")]
            procs = node.succeed("pgrep -u boxmaker -a -f 'conmon|/bin/toolkit' || true").strip()
        elif backend == "bwrap-scope":
            uid = node.succeed("id -u boxmaker").strip()
            manager = f"/sys/fs/cgroup/user.slice/user-{uid}.slice/user@{uid}.service"
            left += node.succeed(
                f"find {manager} -mindepth 1 -type d \\( -name 'boxmaker-*.scope' -o -name 'sandbox-*' \\) "
                "2>/dev/null || true"
            ).split()
            procs = node.succeed("pgrep -u boxmaker -a -f 'bwrap|/bin/toolkit' || true").strip()
        else:
            cg = cgroup or node.succeed(
                "systemctl show -p ControlGroup --value boxmaker.service"
            ).strip()
            if cg:
                left += node.succeed(
                    f"find /sys/fs/cgroup{cg} -mindepth 1 -type d -name 'sandbox-*' 2>/dev/null || true"
                ).split()
            procs = node.succeed("pgrep -u boxmaker -a -f 'bwrap|/bin/toolkit' || true").strip()
        left += [f"process {p}" for p in procs.splitlines() if p]
        egress = node.succeed("ls -A /var/lib/boxmaker/run/egress 2>/dev/null || true").split()
        left += [f"egress directory {e}" for e in egress]
        return left

    # Clean-up that does not hold the answer (a proxy's removal) may still be going: look for
    # up to 30 s.
    def nothing_left(node, backend, when, cgroup=None):
        for _ in range(60):
            left = leftovers(node, backend, cgroup)
            if left == []:
                return
            time.sleep(0.5)
        assert left == [], f"left {when}: {left}"

    def unit_cgroup(node):
        cg = node.succeed("systemctl show -p ControlGroup --value boxmaker.service").strip()
        assert cg.startswith("/system.slice/"), cg
        return cg

    # Exit codes of the `echo rc=$?` lines of a shell's output, in order.
    def exit_codes(out):
        return re.findall(r"^rc=(\d+)$", out, re.M)

    # A stop while a call runs: the call's sandbox is there during it, and nothing of it (or
    # of the unit) is left after the stop; the client is answered or sees the connection end.
    def stop_during_a_call(node, backend):
        node.succeed(
            "(runuser -u loopd -- boxctl --socket ${socket} call --session vm --call long "
            "--grant work shell '{\"command\":\"sleep 600\"}' >/tmp/long.json 2>&1; "
            "echo $? >/tmp/long.rc) >/dev/null 2>&1 &"
        )
        node.wait_until_succeeds(
            "test -n \"$(pgrep -u boxmaker -f 'sleep 600')\"", timeout=120
        )
        cgroup = unit_cgroup(node)
        during = leftovers(node, backend, cgroup)
        assert during != [], "no sandbox seen while the call was running"
        node.succeed("systemctl stop boxmaker.service")
        node.wait_for_file("/tmp/long.rc", timeout=60)
        rc = node.succeed("cat /tmp/long.rc").strip()
        assert rc in ("2", "3"), f"boxctl exited {rc}: {node.succeed('cat /tmp/long.json')}"
        nothing_left(node, backend, f"after a stop during a call (saw {during} during it)", cgroup)
        node.fail("test -n \"$(pgrep -u boxmaker -f 'sleep 600')\"")
        # The unit's own group is gone, or holds no process.
        node.succeed(
            f"! test -d /sys/fs/cgroup{cgroup} || "
            f"test -z \"$(find /sys/fs/cgroup{cgroup} -name cgroup.procs -exec cat {{}} +)\""
        )

    # Through the module's socket and unit: each tool once, as loopd (a member of the clients
    # group), and nothing left after each call.
    def module_calls(node, backend):
        node.wait_for_unit("boxmaker-test-hosts.service")
        node.wait_for_file("${testHostsDir}/ready")
        tailnet_before = node.succeed("cat ${testHostsDir}/tailnet.log 2>/dev/null || true")

        a = call(node, 1, "work", "read_file", {"path": "${roDir}/hello.txt"})
        assert a["kind"] == "result" and a["content"].startswith("hello from the host"), a
        nothing_left(node, backend, "after read_file")

        a = call(node, 2, "work", "write_file", {"path": "${rwDir}/out.txt", "content": "written\n"})
        assert a["kind"] == "result", a
        node.succeed("test \"$(cat ${rwDir}/out.txt)\" = written")
        nothing_left(node, backend, "after write_file")

        a = call(node, 3, "work", "http_fetch", {"url": "https://ok.test/"})
        assert a["kind"] == "result" and a["content"].startswith("hello from ok.test"), a
        assert a["content"].endswith("[http 200]"), a
        nothing_left(node, backend, "after an allowed http_fetch")

        # The proxy's own refusal: the name resolves into the tailnet, reply 4 (host
        # unreachable), in curl's words; nothing reached the tailnet host.
        a = call(node, 4, "work", "http_fetch", {"url": "https://tailnet.ok.test/"})
        assert a["kind"] == "result", a
        # curl 8.9 and later, as NixOS ships, say "cannot complete"; older ones "Can't complete".
        wants = [v + " complete SOCKS5 connection to tailnet.ok.test. (4)" for v in ("Can't", "cannot")]
        assert a["content"].startswith("http_fetch: https://tailnet.ok.test/: "), a
        assert any(w in a["content"] for w in wants) and "\n" not in a["content"].strip(), a
        nothing_left(node, backend, "after a tailnet-refused http_fetch")

        a = call(node, 5, "work", "shell", {
            "command": "sed 1,2d /proc/net/dev | cut -d: -f1 | tr -d ' '; echo '== nc'; "
                       "for t in 100.100.100.100 192.0.2.1; do "
                       "timeout 5 nc $t 443 </dev/null 2>&1; echo rc=$?; done",
        })
        assert a["kind"] == "result", a
        out = a["content"]
        assert out.split("== nc")[0].split() == ["lo"], f"an interface besides lo: {out}"
        assert exit_codes(out) == ["1", "1"], f"nc did not fail to connect twice: {out}"
        assert out.count("can't connect") == 2 and "tailnet host here" not in out, out
        nothing_left(node, backend, "after a shell")

        tailnet_after = node.succeed("cat ${testHostsDir}/tailnet.log 2>/dev/null || true")
        assert tailnet_after == tailnet_before, f"the tailnet host was reached: {tailnet_after}"
        stop_during_a_call(node, backend)

    # On the toolset the module built (git and make), through its socket: brokerd's check of it
    # passed, a grant on it runs make and git log in its directory, the base toolset has
    # neither program, and nothing is left after.
    def toolset_calls(node, backend):
        status = json.loads(node.succeed("runuser -u loopd -- boxctl --socket ${socket} status"))
        toolsets = {t["name"]: t for t in status.get("toolsets", [])}
        assert sorted(toolsets) == ["build"] and toolsets["build"]["grants"] == ["proj"], status
        assert toolsets["build"]["check"].get("ok") is True, toolsets["build"]
        toolset = config(node)["toolsets"]["build"]
        if backend == "podman":
            assert sorted(toolset) == ["image"] and re.fullmatch(r"sha256:[0-9a-f]{64}", toolset["image"]), toolset
            got = as_boxmaker(f"podman image inspect --format '{{{{.Id}}}}' {toolset['image'].removeprefix('sha256:')}", node)
            assert "sha256:" + got.strip().removeprefix("sha256:") == toolset["image"], (got, toolset)
        else:
            assert sorted(toolset) == ["store_paths", "tree"], toolset
            node.succeed(f"test -x {toolset['tree']}/bin/git -a -x {toolset['tree']}/bin/make -a ! -e {toolset['tree']}/nix")
            node.succeed(f"grep -qx {toolset['tree']} {toolset['store_paths']}")

        a = call(node, 20, "proj", "write_file", {"path": "${projDir}/Makefile", "content": "all:\n\t@echo built by make\n"})
        assert a["kind"] == "result", a
        a = call(node, 21, "proj", "shell", {
            "command": "make; echo make=$?; git init -q . && "
                       "GIT_AUTHOR_NAME=vm GIT_AUTHOR_EMAIL=vm@test GIT_COMMITTER_NAME=vm GIT_COMMITTER_EMAIL=vm@test "
                       "git commit -q --allow-empty -m 'made on the toolset' && git log --format=%s; echo git=$?",
            "cwd": "${projDir}",
        })
        out = a["content"]
        assert a["kind"] == "result" and "built by make\nmake=0\n" in out, a
        assert "made on the toolset\ngit=0\n" in out, a
        node.succeed("test -d ${projDir}/.git")
        a = call(node, 22, "work", "shell", {"command": "for p in git make; do command -v $p >/dev/null || echo no-$p; done"})
        assert a["kind"] == "result" and "no-git\nno-make\n" in a["content"], a
        nothing_left(node, backend, "after calls on a toolset")

    start_all()
    host.wait_for_unit("multi-user.target")

    with subtest("the socket waits, owned by root:boxmaker-clients with mode 0660"):
        host.wait_for_unit("boxmaker.socket")
        host.succeed("test \"$(stat -c '%a %U %G' ${socket})\" = '660 root boxmaker-clients'")
        host.fail("systemctl is-active boxmaker.service")

    with subtest("a user outside the client group cannot connect"):
        # Refused by the socket's mode (0660, root:boxmaker-clients), not any other error, and
        # brokerd is not started.
        out = host.fail("runuser -u stranger -- boxctl --socket ${socket} status 2>&1")
        assert "Permission denied" in out, out
        host.fail("systemctl is-active boxmaker.service")

    with subtest("the first connection starts brokerd as boxmaker, ready after a preflight that read its limits back"):
        status = json.loads(host.succeed("runuser -u loopd -- boxctl --socket ${socket} status"))
        host.succeed("systemctl is-active boxmaker.service")
        pid = host.succeed("systemctl show -p MainPID --value boxmaker.service").strip()
        host.succeed(f"test \"$(ps -o user= -p {pid})\" = boxmaker")
        assert status["kind"] == "status", status
        assert status["backend"] == "podman", status
        assert status["poisoned"] is False, status
        assert status["preflight"].get("ok") is True, status
        assert "limits" in status["preflight"].get("detail", ""), status
        assert "not enforced" not in status["preflight"].get("detail", ""), status
        assert config(host)["runner"]["enforce_limits"] is True, config(host)

    with subtest("the loaded image is the one pinned at build time"):
        want = host.succeed("cat ${suite.testImageId}/image-id").strip()
        got = as_boxmaker(f"podman image inspect --format '{{{{.Id}}}}' {want.removeprefix('sha256:')}").strip()
        assert "sha256:" + got.removeprefix("sha256:") == want, (got, want)
        assert config(host)["runner"]["image"] == want, config(host)

    with subtest("a sandbox cannot make a nested user namespace, and boxctl doctor says so"):
        security = json.loads(as_boxmaker("podman info --format json"))["host"]["security"]
        assert security["seccompProfilePath"].endswith("-boxmaker-seccomp-nouserns.json"), security
        uid = host.succeed("id -u boxmaker").strip()
        rc, out = host.execute(
            f"runuser -u boxmaker -- env XDG_RUNTIME_DIR=/run/user/{uid} "
            "podman run --rm --network=none --read-only --cap-drop=all "
            "--security-opt=no-new-privileges --userns=keep-id "
            f"{want} /bin/busybox unshare -U -r true </dev/null 2>&1"
        )
        assert rc != 0 and "Operation not permitted" in out, (rc, out)
        _, doctor = host.execute(
            f"runuser -u boxmaker -- env XDG_RUNTIME_DIR=/run/user/{uid} "
            "boxctl --config /etc/boxmaker/brokerd.toml doctor </dev/null 2>&1"
        )
        assert "ok    nested user namespaces: denied" in doctor, doctor
        # pasta where NixOS's Podman finds it (its own libexec), not on PATH; and the sub-IDs
        # the module wrote as files, which newuidmap opens with O_NOFOLLOW.
        egress = [l for l in doctor.splitlines() if l.startswith("ok    egress network: pasta at ")]
        assert len(egress) == 1 and "where Podman finds it" in egress[0], doctor
        assert "ok    subordinate IDs: " in doctor, doctor
        host.succeed("test -f /etc/subuid -a ! -L /etc/subuid -a -f /etc/subgid -a ! -L /etc/subgid")

    with subtest("the VM's pasta copies no test host into the proxy's namespace"):
        # tests/e2e/pasta-layout.sh runs the pasta Podman runs in this host's namespace, where
        # hosts-net.sh laid out the test hosts, and fails if pasta's namespace holds one of
        # their addresses (current passt copies every address of the default route's interface).
        pasta = host.succeed("${packages.e2e}/bin/boxmaker-e2e egress-network --program true").strip()
        assert pasta.endswith("/pasta"), pasta
        host.succeed(f"bash ${suite.driver}/tests/e2e/pasta-layout.sh --here --pasta {pasta}")

    with subtest("Podman, through the module's socket: each tool, a tailnet refusal, no network in a shell"):
        assert config(host)["runner"]["egress_network"] == "pasta", config(host)
        module_calls(host, "podman")

    with subtest("Podman, a toolset the module built: its image by ID, make and git log through the socket"):
        toolset_calls(host, "podman")

    with subtest("stopping the service leaves no container"):
        # The socket too: the suite's own brokerd must be the service user's only one.
        host.succeed("systemctl stop boxmaker.socket boxmaker.service")
        nothing_left(host, "podman", "after a stop")

    with subtest("the end-to-end scenario suite on Podman, limits enforced"):
        suite("${onPodman}", "podman")
        nothing_left(host, "podman", "after the suite on Podman")

    with subtest("the end-to-end scenario suite on bwrap, limits enforced"):
        suite("${onBwrap}", "bwrap")
        nothing_left(host, "bwrap-scope", "after the suite on bwrap")

    with subtest("bwrap, through the module's socket and unit: Delegate=yes, no capabilities"):
        bwrapHost.wait_for_unit("multi-user.target")
        bwrapHost.wait_for_unit("boxmaker.socket")
        status = json.loads(bwrapHost.succeed("runuser -u loopd -- boxctl --socket ${socket} status"))
        assert status["backend"] == "bwrap", status
        assert status["preflight"].get("ok") is True, status
        assert "not enforced" not in status["preflight"].get("detail", ""), status
        bwrapHost.succeed("test \"$(systemctl show -p Delegate --value boxmaker.service)\" = yes")
        bwrapHost.succeed("test -z \"$(systemctl show -p CapabilityBoundingSet --value boxmaker.service)\"")
        assert config(bwrapHost)["bwrap"]["cgroup"] == "delegated", config(bwrapHost)
        module_calls(bwrapHost, "bwrap")

    with subtest("bwrap, a toolset the module built: its tree and store paths, make and git log through the socket"):
        toolset_calls(bwrapHost, "bwrap")

    with subtest("the socket starts the module's brokerd again, and a stop leaves no container"):
        host.succeed("systemctl start boxmaker.socket")
        status = json.loads(host.succeed("runuser -u loopd -- boxctl --socket ${socket} status"))
        assert status["preflight"].get("ok") is True, status
        host.succeed("systemctl is-active boxmaker.service")
        host.succeed("systemctl stop boxmaker.service")
        nothing_left(host, "podman", "after a stop")
  '';
}
