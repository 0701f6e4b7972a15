# The tools image, built by Nix (docs/design.md#deployment). The same layout as
# images/build-tools-image.sh, the builder without Nix:
#
#   /bin/toolkit                        the static musl toolkit
#   /bin/busybox                        static busybox, and a link to it for every applet in
#                                       /bin (sh, ls, cat, sed, timeout, nc, ...): nixpkgs'
#                                       busybox runs no applet without its link (no
#                                       FEATURE_SH_STANDALONE), and the sandbox's PATH is /bin
#   /bin/curl                           static curl (socks5h:// over a Unix socket)
#   /etc/ssl/certs/ca-certificates.crt  the CA bundle, plus extraCaCerts for the test variant
#   /etc/passwd, /etc/group, /etc/hosts, /etc/resolv.conf, /tmp (1777), /run, /proc, /dev, /sys
#
# images/programs.txt lists what the suite and the runbook run there; `make nix-check` lays out
# both trees of this expression with stand-ins for the store paths and checks that /bin holds
# each of them (nixos/checks/check.py images).
#
# Reproducible: `created` keeps buildLayeredImage's fixed default and the tag is derived from
# the inputs, so the same inputs give the same image ID (nixos/pkgs/image-id.nix computes it).
# Uncompressed, because some Podman versions (Debian's 4.3) cannot load a compressed
# docker-archive; the image is small.
{
  lib,
  dockerTools,
  pkgsStatic,
  runCommand,
  # The static toolkit (flake.nix's packages.toolkit).
  toolkit,
  # PEM files appended to the CA bundle: the end-to-end suite's test CA for the test variant.
  extraCaCerts ? [ ],
  name ? "boxmaker-tools",
}:
let
  # The CA bundle, busybox with its applet links and the root's layout, which the toolsets
  # NixOS builds share (./tool-tree.nix).
  tree = import ./tool-tree.nix {
    inherit
      lib
      dockerTools
      pkgsStatic
      runCommand
      extraCaCerts
      ;
  };
  inherit (tree) caBundle busyboxBin;
  layout = tree.layout {
    what = "tools-image";
    required = [
      "bin/toolkit"
      "bin/busybox"
      "bin/sh"
      "bin/curl"
      "etc/ssl/certs/ca-certificates.crt"
    ];
  };
  curl = lib.getBin pkgsStatic.curl;
  # The same files as a plain tree, the bwrap backend's tools root ([bwrap] tools_root): real
  # files, not links into /nix/store (the sandbox has no store), and the tree layout of
  # images/build-tools-image.sh. The store makes it read-only and /tmp not sticky; the bwrap
  # sandbox mounts its own /tmp.
  root = runCommand "${name}-root" { } ''
    mkdir -p $out/bin $out/etc/ssl/certs
    cp ${toolkit}/bin/toolkit $out/bin/toolkit
    cp -P ${busyboxBin}/bin/* $out/bin/
    cp ${curl}/bin/curl $out/bin/curl
    chmod 0755 $out/bin/*
    cat ${caBundle}/etc/ssl/certs/ca-certificates.crt > $out/etc/ssl/certs/ca-certificates.crt
    cd $out
    ${layout}
  '';
in
dockerTools.buildLayeredImage {
  inherit name;
  compressor = "none";
  contents = [
    toolkit
    busyboxBin
    curl
    caBundle
  ];
  # Runs in the image's root directory (the customisation layer).
  extraCommands = layout;
  config = {
    Cmd = [ "/bin/sh" ];
  };
  # Not part of the image's derivation: the bwrap tools root built from the same inputs, and
  # what a toolset built beside this image takes from it (nixos/toolsets.nix): the same
  # toolkit and the same extra CAs.
  passthru = { inherit root toolkit extraCaCerts; };
  meta = {
    description = "boxmaker's tools image: the toolkit, busybox, curl and the CA bundle for every sandbox";
    platforms = lib.platforms.linux;
  };
}
