# A straylight-like host running services.boxmaker with the limits enforced (the VM has cgroup
# v2 and the module's lingering user), checked for what is the module's own: the socket's owner
# and mode, activation on the first connection as the service user, a preflight that read its
# limits back, the pinned image, nested user namespaces denied in a sandbox (the seccomp profile
# of the user's Podman), and no container left after a stop. Then the end-to-end
# scenario suite (network denial, tailnet refusal, redirect refusal, limits, container
# clean-up, crashes) runs on this host exactly as CI runs it, through vm-tests/e2e.nix: in a
# network namespace of its own with the suite's own test hosts, so no second node is needed.
#
# The suite starts its own brokerd as the same service user (it must: the crash scenarios kill
# it), so the module's socket and service are stopped first: two brokerds of one user would
# sweep each other's containers. The suite's brokerd uses the image the module loaded.
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
in
{
  name = "boxmaker";

  nodes.host =
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
        # A grant of the module's own brokerd, so its config has one as a real one would.
        grants.vm = {
          mode = "safe";
          tools = [ "read_file" ];
          paths = [ { path = roDir; } ];
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
      ];
      # What tests/e2e/in-netns.sh and the suite use besides the module's Podman: bwrap for
      # the bwrap backend and its control, ip and the util-linux tools for the namespace.
      environment.systemPackages = [
        packages.e2e
        pkgs.bubblewrap
        pkgs.iproute2
        pkgs.util-linux
      ];
    };

  testScript = ''
    import json

    def as_boxmaker(cmd):
        uid = host.succeed("id -u boxmaker").strip()
        return host.succeed(
            f"runuser -u boxmaker -- env XDG_RUNTIME_DIR=/run/user/{uid} "
            f"DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/{uid}/bus {cmd}"
        )

    def no_containers_left(when):
        left = as_boxmaker("podman ps -a --filter label=boxmaker --format '{{.Names}}'").strip()
        assert left == "", f"containers left {when}: {left}"
        host.succeed("test -z \"$(ls -A /var/lib/boxmaker/run/egress 2>/dev/null)\"")

    def suite(cmd):
        out = host.succeed(cmd + " 2>&1")
        for line in out.splitlines():
            if line.startswith(("FAIL ", "podman: ", "bwrap: ")) or line.endswith(" failed"):
                print(line)
        return out

    start_all()
    host.wait_for_unit("multi-user.target")

    with subtest("the socket waits, owned by root:boxmaker-clients with mode 0660"):
        host.wait_for_unit("boxmaker.socket")
        host.succeed("test \"$(stat -c '%a %U %G' ${socket})\" = '660 root boxmaker-clients'")
        host.fail("systemctl is-active boxmaker.service")

    with subtest("a user outside the client group cannot connect"):
        host.fail("runuser -u stranger -- boxctl --socket ${socket} status")

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
        host.succeed("grep -qx 'enforce_limits = true' /etc/boxmaker/brokerd.toml")

    with subtest("the loaded image is the one pinned at build time"):
        want = host.succeed("cat ${suite.testImageId}/image-id").strip()
        got = as_boxmaker(f"podman image inspect --format '{{{{.Id}}}}' {want.removeprefix('sha256:')}").strip()
        assert "sha256:" + got.removeprefix("sha256:") == want, (got, want)
        host.succeed(f"grep -qx 'image = \"{want}\"' /etc/boxmaker/brokerd.toml")

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

    with subtest("stopping the service leaves no container"):
        # The socket too: the suite's own brokerd must be the service user's only one.
        host.succeed("systemctl stop boxmaker.socket boxmaker.service")
        no_containers_left("after a stop")

    with subtest("the end-to-end scenario suite on Podman, limits enforced"):
        suite("${onPodman}")
        no_containers_left("after the suite on Podman")

    with subtest("the end-to-end scenario suite on bwrap, limits enforced"):
        suite("${onBwrap}")
        no_containers_left("after the suite on bwrap")

    with subtest("the socket starts the module's brokerd again, and a stop leaves no container"):
        host.succeed("systemctl start boxmaker.socket")
        status = json.loads(host.succeed("runuser -u loopd -- boxctl --socket ${socket} status"))
        assert status["preflight"].get("ok") is True, status
        host.succeed("systemctl is-active boxmaker.service")
        host.succeed("systemctl stop boxmaker.service")
        no_containers_left("after a stop")
  '';
}
