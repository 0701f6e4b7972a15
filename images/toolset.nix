# A toolset built by Nix from a list of packages (docs/design.md#toolsets-on-nixos), as
# nixos/toolsets.nix builds each services.boxmaker.toolsets.<name>: the packages' programs
# (one buildEnv of their bin/) and what every toolset holds, the base tools image's own pieces
# (./tool-tree.nix):
#
#   /bin/<program>                      a link to the buildEnv's, for each program of the packages
#   /bin/toolkit                        the static toolkit of the tools image
#   /bin/busybox, /bin/sh               static busybox; /bin/sh is always busybox's (ash, the
#                                       shell the classifier reads), and each applet the packages
#                                       do not provide is a link to it
#   /etc/ssl/certs/ca-certificates.crt  the tools image's CA bundle
#   /etc/passwd, /etc/group, /etc/hosts, /etc/resolv.conf, /tmp (1777), /run, /proc, /dev, /sys
#
# Nothing in it is setuid or setgid (the store holds no such file, and the build checks the
# tree's own). Two forms, of which the backend in use builds one:
#
#   image    Podman: dockerTools.streamLayeredImage, a script that writes the image as a
#            docker-archive to its standard output; each store path of the closure is a layer
#            of its own where the layer count allows, so toolsets that share packages share
#            layers in Podman's storage. nixos/pkgs/image-id.nix runs it at build time for the
#            image ID, and nixos/pkgs/load-image.sh --stream loads it.
#   root     bwrap: the same files as a store path whose links point into the store, and
#            `closure`, the closureInfo of it: closure/store-paths lists every store path the
#            tree needs (itself among them), which brokerd binds read-only at their own paths
#            in the sandbox, and nothing else of the store. The root has no top-level nix.
{
  lib,
  dockerTools,
  pkgsStatic,
  runCommand,
  buildEnv,
  closureInfo,
  # The static toolkit: the tools image's (nixos/toolsets.nix), of brokerd's own version.
  toolkit,
  # The toolset's name, [toolsets.NAME].
  name,
  # The packages whose bin/ the toolset's /bin holds.
  packages,
  # PEM files appended to the CA bundle, as the tools image's.
  extraCaCerts ? [ ],
}:
let
  tree = import ./tool-tree.nix {
    inherit
      lib
      dockerTools
      pkgsStatic
      runCommand
      extraCaCerts
      ;
  };

  # Podman's name for the image, whose older images are removed after a new one is loaded. An
  # image name is lower case, with `.`, `_` or runs of `-` between letters and digits: the
  # toolset's name in that form, then 8 hex digits of its sha256, so that two toolsets never
  # share a name (`C` and `c`, `a.b` and `a-b`) and one never removes the other's image.
  imageName =
    let
      lower = lib.toLower name;
      safe = lib.concatMapStrings (c: if builtins.match "[a-z0-9]" c != null then c else "-") (
        lib.stringToCharacters lower
      );
    in
    "boxmaker-toolset-${safe}-${builtins.substring 0 8 (builtins.hashString "sha256" name)}";

  # The packages' programs: their bin/ directories, joined. Two packages with a program of the
  # same name fail the build, as buildEnv does (lib.hiPrio picks one).
  env = buildEnv {
    name = "${imageName}-env";
    paths = packages;
    pathsToLink = [ "/bin" ];
  };

  # The toolset's /bin, all links: the packages' programs to the buildEnv's (absolute, into the
  # store), then toolkit, busybox and sh, whatever the packages call so, then a relative link
  # to busybox for each of its applets the packages do not provide (a package's ls or sed wins
  # over busybox's, as images/build-toolset.sh does on Debian).
  bin = runCommand "${imageName}-bin" { } ''
    mkdir -p $out/bin
    for p in ${env}/bin/*; do
      [ -e "$p" ] || [ -L "$p" ] || continue
      ln -s "$p" "$out/bin/''${p##*/}"
    done
    rm -f $out/bin/toolkit $out/bin/busybox $out/bin/sh
    ln -s ${toolkit}/bin/toolkit $out/bin/toolkit
    ln -s ${tree.busyboxBin}/bin/busybox $out/bin/busybox
    ln -s busybox $out/bin/sh
    for applet in ${tree.busyboxBin}/bin/*; do
      n=''${applet##*/}
      [ -e "$out/bin/$n" ] || [ -L "$out/bin/$n" ] || ln -s busybox "$out/bin/$n"
    done
  '';

  # Run in the root directory of both forms (the image's customisation layer, the bwrap root).
  layout =
    tree.layout {
      what = "toolset ${name}";
      required = [
        "bin/toolkit"
        "bin/busybox"
        "bin/sh"
        "etc/ssl/certs/ca-certificates.crt"
      ];
    }
    + ''
      if [ "$(readlink bin/sh)" != busybox ]; then
        echo "toolset ${name}: bin/sh is not busybox's" >&2
        exit 1
      fi
      suid=$(find . -perm /6000 -print)
      if [ -n "$suid" ]; then
        echo "toolset ${name}: setuid or setgid files: $suid" >&2
        exit 1
      fi
    '';

  # bwrap's tree: bin/ as above (its links as they are), the CA bundle as a file, the layout.
  root = runCommand "${imageName}-root" { } ''
    mkdir -p $out/bin $out/etc/ssl/certs
    cp -P ${bin}/bin/* $out/bin/
    cat ${tree.caBundle}/etc/ssl/certs/ca-certificates.crt > $out/etc/ssl/certs/ca-certificates.crt
    cd $out
    ${layout}
    if [ -e nix ] || [ -L nix ]; then
      echo "toolset ${name}: the tree has a top-level nix, where its store paths are bound" >&2
      exit 1
    fi
  '';

  # Every store path the tree needs: the root's own closure (the buildEnv, the packages and
  # their dependencies, busybox, toolkit), found by Nix from the root's links.
  closure = closureInfo { rootPaths = [ root ]; };

  image = dockerTools.streamLayeredImage {
    name = imageName;
    contents = [
      bin
      tree.caBundle
    ];
    # Runs in the image's root directory (the customisation layer).
    extraCommands = layout;
    config = {
      Cmd = [ "/bin/sh" ];
    };
  };
in
{
  inherit
    imageName
    env
    bin
    image
    root
    closure
    ;
  inherit (tree) busyboxBin caBundle;
  # [toolsets.NAME] store_paths: one store path a line.
  storePaths = "${closure}/store-paths";
}
