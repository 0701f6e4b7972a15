# services.boxmaker.toolsets: toolsets built from packages (docs/design.md#toolsets-on-nixos),
# called by ./module.nix, which puts what this returns in its places:
#
#   option      the option services.boxmaker.toolsets.<name>.packages
#   settings    settings.toolsets.<name> of each: with Podman { image = the image ID }, with
#               bwrap { tree = the root; store_paths = its closure's store-paths }
#   imageIds    Podman: each toolset's placeholder in the config and the file holding its
#               image ID, computed at build time (./pkgs/image-id.nix over the image's script)
#   loaders     Podman: the ExecStartPre lines that load each image into the service user's
#               Podman and check its ID (./pkgs/load-image.sh --stream), older images of its
#               name removed
#   assertions  the toolsets' names, and each grant's toolset
#
# Only what the backend uses is referenced, so only that is built: the layered image and its
# ID for Podman, the root and its closureInfo for bwrap (../images/toolset.nix).
{
  lib,
  pkgs,
  cfg,
  isBwrap,
  # The tools image's toolkit and extra CAs, which every toolset carries too.
  toolkit,
  extraCaCerts,
  # The podman program the tools image is loaded with.
  podman,
}:
let
  inherit (lib) mkOption types literalExpression;

  # brokerd's identifier rule for toolset names (and grants'), and the built-in toolset.
  nameOk = n: builtins.match "[A-Za-z0-9_.-]{1,64}" n != null && n != "." && n != "..";
  base = "base";

  # Each toolset's two forms (../images/toolset.nix), and for Podman the file its image ID is
  # computed into and the script that loads it.
  built = lib.mapAttrs (
    name: t:
    let
      ts = pkgs.callPackage ../images/toolset.nix {
        inherit
          name
          toolkit
          extraCaCerts
          ;
        inherit (t) packages;
      };
      imageId = pkgs.callPackage ./pkgs/image-id.nix {
        image = ts.image;
        stream = true;
        name = "${ts.imageName}-id";
      };
      idFile = "${imageId}/image-id";
    in
    ts
    // {
      inherit imageId idFile;
      loader = pkgs.writeShellScript "boxmaker-load-${ts.imageName}" ''
        export PATH=${lib.makeBinPath [ pkgs.coreutils ]}:$PATH
        export PODMAN=${podman}
        exec ${pkgs.bash}/bin/bash ${./pkgs/load-image.sh} --stream --toolset ${lib.escapeShellArg name} \
          ${ts.image} ${idFile} ${ts.imageName}
      '';
    }
  ) cfg.toolsets;

  # Written where a toolset's image ID goes, and replaced by it when the config is built.
  placeholder = name: "@BOXMAKER_TOOLSET_IMAGE_ID:${name}@";

  s = cfg.settings;
  defined = lib.attrNames (s.toolsets or { });
in
{
  option = mkOption {
    type = types.attrsOf (
      types.submodule {
        options.packages = mkOption {
          type = types.listOf types.package;
          default = [ ];
          example = literalExpression "[ pkgs.git pkgs.gnumake pkgs.gcc ]";
          description = ''
            The packages whose programs (their bin/) the toolset's /bin holds, beside what
            every toolset holds: the tools image's toolkit, busybox (/bin/sh and each applet
            the packages do not provide), the CA bundle, its own /etc. Two packages with a
            program of the same name fail the build (lib.hiPrio picks one).
          '';
        };
      }
    );
    default = { };
    example = literalExpression ''
      {
        c.packages = [ pkgs.git pkgs.gnumake pkgs.gcc ];
        docs.packages = [ pkgs.git pkgs.pandoc ];
      }
    '';
    description = ''
      Toolsets built from packages, for the grants that name one with `toolset`
      (docs/design.md#toolsets). Each becomes settings.toolsets.NAME: with Podman a layered
      image (dockerTools.streamLayeredImage; toolsets share the layers of the store paths they
      share), loaded into the service user's Podman before brokerd starts and pinned by its
      image ID, computed at build time; with bwrap a read-only root tree and the list of the
      store paths it needs (closureInfo), which brokerd binds into the sandbox and nothing
      else of the store. NAME is 1 to 64 of A-Z a-z 0-9 _ . - (not . or ..), other than base.
      Toolsets pinned by hand (an image or tree built elsewhere) go in settings.toolsets.
    '';
  };

  inherit built;

  settings = lib.mapAttrs (
    name: ts:
    if isBwrap then
      {
        tree = "${ts.root}";
        store_paths = ts.storePaths;
      }
    else
      { image = placeholder name; }
  ) built;

  imageIds = lib.optionals (!isBwrap) (
    lib.mapAttrsToList (name: ts: {
      placeholder = placeholder name;
      file = ts.idFile;
    }) built
  );

  # A toolset that does not load leaves brokerd to start ("-"): its grants answer
  # `unavailable` (its check fails, runbook/runner.md#toolset-unavailable), the others work.
  loaders = lib.optionals (!isBwrap) (lib.mapAttrsToList (_: ts: "-${ts.loader}") built);

  assertions =
    map (
      n:
      let
        at = if builtins.hasAttr n cfg.toolsets then "services.boxmaker.toolsets" else "services.boxmaker.settings.toolsets";
      in
      {
        assertion = nameOk n && n != base;
        message =
          if n == base then
            "${at}.base: \"base\" is the built-in toolset (the tools image: runner.image, bwrap.tools_root) and cannot be defined again; name this toolset otherwise."
          else
            "${at}.\"${n}\": a toolset name is 1 to 64 of A-Z a-z 0-9 _ . - (and not . or ..), as brokerd's [toolsets.NAME].";
      }
    ) defined
    ++ lib.concatLists (
      lib.mapAttrsToList (
        grant: g:
        let
          t = g.toolset or null;
        in
        lib.optional (t != null) {
          assertion = lib.isString t && (t == base || lib.elem t defined);
          message = "services.boxmaker.settings.grants.${grant}.toolset: ${builtins.toJSON t} is not a toolset: the toolsets are ${
            lib.concatStringsSep ", " ([ base ] ++ defined)
          }. Define it in services.boxmaker.toolsets.${if lib.isString t then t else "NAME"}.packages, or leave toolset unset (null) for the base toolset.";
        }
      ) s.grants
    );
}
