# A straylight-like host running services.boxmaker, and a `web` node serving the suite's zone
# over DNS and HTTPS with a tailnet address, 100.100.100.100. The host runs the end-to-end
# scenario suite (network denial, tailnet refusal, redirect refusal, limits, container
# clean-up) through the socket the module declares; this file adds only what is the module's
# own: the socket's owner and mode, activation on the first connection as the service user,
# the pinned image, and no container left after the suite or after a stop.
{ pkgs, packages }:
let
  suite = pkgs.callPackage ./e2e.nix { inherit (packages) e2e; };
  socket = "/run/boxmaker/broker.sock";
  # The tools image the suite needs: the same expression, with the test CA in its bundle.
  testImage = pkgs.callPackage ../images/tools-image.nix {
    inherit (packages) toolkit;
    extraCaCerts = [ "${suite.testCa}/ca.pem" ];
  };
  testImageId = pkgs.callPackage ../nixos/pkgs/image-id.nix { image = testImage; };
in
{
  name = "boxmaker";

  nodes.web =
    { ... }:
    {
      networking.firewall.enable = false;
      systemd.services.boxmaker-e2e-web = {
        wantedBy = [ "multi-user.target" ];
        after = [ "network-online.target" ];
        wants = [ "network-online.target" ];
        # The tailnet stand-in: an address on lo that the host reaches through a route.
        preStart = "${pkgs.iproute2}/bin/ip addr replace ${suite.tailnet}/32 dev lo";
        script = suite.serve { listen = "0.0.0.0"; };
      };
    };

  nodes.host =
    { nodes, ... }:
    let
      webIp = nodes.web.networking.primaryIPAddress;
    in
    {
      imports = [ ../nixos/module.nix ];
      virtualisation.memorySize = 2048;
      virtualisation.diskSize = 4096;
      # Names in the suite's zone come from the web node.
      networking.nameservers = [ webIp ];
      services.boxmaker = {
        enable = true;
        package = packages.boxmaker;
        toolsImage = testImage;
        settings.runner.enforce_limits = true;
        grants.${suite.grantName} = suite.grant "${webIp}/32";
      };
      users.users.loopd = {
        isNormalUser = true;
        extraGroups = [ "boxmaker-clients" ];
      };
      users.users.stranger.isNormalUser = true;
      systemd.tmpfiles.rules = [
        "d ${suite.rwDir} 0750 boxmaker boxmaker -"
        "d ${suite.roDir} 0750 boxmaker boxmaker -"
        "f ${suite.roDir}/hello.txt 0640 boxmaker boxmaker - hello"
      ];
      environment.systemPackages = [ packages.e2e ];
    };

  testScript =
    { nodes, ... }:
    let
      webIp = nodes.web.networking.primaryIPAddress;
    in
    ''
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

      start_all()
      web.wait_for_unit("boxmaker-e2e-web.service")
      web.wait_for_open_port(443)
      host.wait_for_unit("multi-user.target")
      host.succeed("ip route replace ${suite.tailnet}/32 via ${webIp}")

      with subtest("the socket waits, owned by root:boxmaker-clients with mode 0660"):
          host.wait_for_unit("boxmaker.socket")
          host.succeed("test \"$(stat -c '%a %U %G' ${socket})\" = '660 root boxmaker-clients'")
          host.fail("systemctl is-active boxmaker.service")

      with subtest("a user outside the client group cannot connect"):
          host.fail("runuser -u stranger -- boxctl --socket ${socket} status")

      with subtest("the first connection starts brokerd as boxmaker, ready after its preflight"):
          status = json.loads(host.succeed("runuser -u loopd -- boxctl --socket ${socket} status"))
          host.succeed("systemctl is-active boxmaker.service")
          pid = host.succeed("systemctl show -p MainPID --value boxmaker.service").strip()
          host.succeed(f"test \"$(ps -o user= -p {pid})\" = boxmaker")
          assert status["kind"] == "status", status
          assert status["backend"] == "podman", status
          assert status["poisoned"] is False, status
          assert status["preflight"].get("ok") is True, status

      with subtest("the loaded image is the one pinned at build time"):
          want = host.succeed("cat ${testImageId}/image-id").strip()
          got = as_boxmaker(f"podman image inspect --format '{{{{.Id}}}}' {want.removeprefix('sha256:')}").strip()
          assert "sha256:" + got.removeprefix("sha256:") == want, (got, want)
          host.succeed(f"grep -qx 'image = \"{want}\"' /etc/boxmaker/brokerd.toml")

      with subtest("the end-to-end scenario suite"):
          host.succeed("runuser -u loopd -- ${suite.run { inherit socket; web = webIp; }}")
          no_containers_left("after the suite")

      with subtest("stopping the service leaves no container, and the socket starts it again"):
          host.succeed("systemctl stop boxmaker.service")
          no_containers_left("after a stop")
          host.succeed("runuser -u loopd -- boxctl --socket ${socket} status")
          host.succeed("systemctl is-active boxmaker.service")
    '';
}
