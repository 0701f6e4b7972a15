# What every tool tree holds besides its own programs, in one place for the tools image
# (./tools-image.nix) and the toolsets NixOS builds (./toolset.nix), so that each toolset
# carries exactly what the base tools image carries:
#
#   caBundle    /etc/ssl/certs/ca-certificates.crt: nixpkgs' CA bundle, plus extraCaCerts
#   busyboxBin  static busybox, and a relative link to it in bin/ for every applet
#   layout      the shell commands, run in a tree's root directory, that write its own /etc
#               (passwd and group with the sandbox's users, empty hosts and resolv.conf), make
#               /tmp (1777), /run, /proc, /dev and /sys, and fail unless each required file is
#               there
{
  lib,
  dockerTools,
  pkgsStatic,
  runCommand,
  # PEM files appended to the CA bundle: the end-to-end suite's test CA for the test variant.
  extraCaCerts ? [ ],
}:
rec {
  caBundle =
    if extraCaCerts == [ ] then
      dockerTools.caCertificates
    else
      runCommand "boxmaker-ca-bundle" { } ''
        mkdir -p $out/etc/ssl/certs
        cat ${dockerTools.caCertificates}/etc/ssl/certs/ca-certificates.crt \
          ${lib.escapeShellArgs extraCaCerts} > $out/etc/ssl/certs/ca-certificates.crt
      '';

  busybox = pkgsStatic.busybox;
  # busybox and a relative link to it in /bin for each applet nixpkgs installs, in its bin/
  # and its sbin/ (every applet busybox has, as images/build-tools-image.sh links every applet
  # `busybox --list` names): the one /bin every tree shares. nixpkgs' busybox runs no applet
  # without its link (no FEATURE_SH_STANDALONE), and the sandbox's PATH is /bin. `make
  # nix-check` compares the two rules over one busybox.
  busyboxBin = runCommand "boxmaker-busybox-bin" { } ''
    mkdir -p $out/bin
    cp ${busybox}/bin/busybox $out/bin/busybox
    chmod 0755 $out/bin/busybox
    for applet in ${busybox}/bin/* ${busybox}/sbin/*; do
      name=''${applet##*/}
      [ "$name" = busybox ] || [ -e "$out/bin/$name" ] || ln -s busybox "$out/bin/$name"
    done
    for must in sh ls cat; do
      [ -L "$out/bin/$must" ] || { echo "tools-image: busybox has no $must applet" >&2; exit 1; }
    done
  '';

  # The files every tree has beside its programs, made in its root directory; then each of
  # `required` (paths relative to the root) must exist, or the build fails naming `what`.
  layout =
    { what, required }:
    ''
      mkdir -p etc tmp run proc dev sys
      chmod 1777 tmp
      printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' > etc/passwd
      printf 'root:x:0:\nnobody:x:65534:\n' > etc/group
      : > etc/hosts
      : > etc/resolv.conf
      for f in ${lib.escapeShellArgs required}; do
        if [ ! -e "$f" ]; then
          echo "${what}: $f is missing from the image" >&2
          exit 1
        fi
      done
    '';
}
