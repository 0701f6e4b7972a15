# services.boxmaker: brokerd as a socket-activated system service whose tool calls run in the
# service user's rootless Podman, or with settings.runner.backend = "bwrap" in bubblewrap
# sandboxes over the tools image's file tree (docs/design.md#service, docs/design.md#deployment, docs/design.md#runners).
#
# The unit settings come from ./units.json, the one definition that dist/systemd/generate.py
# also turns into the units for hosts without NixOS; its "bwrap" section is laid over the
# service for the bwrap backend (the dist drop-in boxmaker.service.d/bwrap.conf). The reasons
# for every hardening option the unit leaves out are written there (the "omitted" tables) and
# in the generated dist/systemd files. This file adds only what is NixOS's own: the paths, PATH
# (/run/wrappers/bin and Podman, or bubblewrap), the image loading step, what only one
# backend needs (Podman, subordinate IDs, the user's manager, the seccomp profile of the
# user's Podman) and restart triggers. Toolsets built from packages (services.boxmaker.toolsets)
# are ./toolsets.nix's; the types of the settings and of each grant are ./option-types.nix's.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib)
    mkOption
    mkEnableOption
    mkIf
    mkMerge
    types
    literalExpression
    literalMD
    ;

  cfg = config.services.boxmaker;
  units = lib.importJSON ./units.json;
  tomlFormat = pkgs.formats.toml { };

  toolNames = [
    "read_file"
    "write_file"
    "shell"
    "http_fetch"
  ];
  modes = [
    "safe"
    "ask"
    "auto"
  ];
  imageIdRegex = "sha256:[0-9a-f]{64}";
  # Client names as brokerd parses them: a user, a uid, or @group.
  clientRegex = "(@?[a-z_][a-z0-9_-]{0,31}|[0-9]+)";
  # Written into the config where the image ID goes when it is computed at build time.
  imageIdPlaceholder = "@BOXMAKER_IMAGE_ID@";

  # --- packages (defaults) --------------------------------------------------------------------
  defaultToolkit = pkgs.pkgsStatic.callPackage ./pkgs/boxmaker.nix {
    pname = "boxmaker-toolkit";
    crates = [ "toolkit" ];
    runTests = false;
    requireStatic = true;
  };

  # --- the backend -----------------------------------------------------------------------------
  isBwrap = cfg.settings.runner.backend == "bwrap";
  # The service user's systemd instance: rootless Podman's cgroup delegation, and the
  # transient scopes of [bwrap] cgroup = "systemd-scope". With "delegated" nothing uses it, so
  # the unit neither starts it nor keeps it lingering (units.json, bwrap.kept.ExecStartPre).
  needsUserManager = !isBwrap || (cfg.settings.bwrap.cgroup or null) == "systemd-scope";

  # The ID of toolsImage, computed at build time. A toolsImageId given by the owner is checked
  # against it here, so a wrong pin fails nixos-rebuild instead of the service's start.
  computedImageId = "${pkgs.callPackage ./pkgs/image-id.nix { image = cfg.toolsImage; }}/image-id";
  imageIdFile =
    if cfg.toolsImageId == null then
      computedImageId
    else
      pkgs.runCommand "boxmaker-tools-image-id-checked" { } ''
        got=$(cat ${computedImageId})
        if [ "$got" != ${lib.escapeShellArg cfg.toolsImageId} ]; then
          echo "services.boxmaker.toolsImageId: ${cfg.toolsImageId} is not the ID of services.boxmaker.toolsImage, which is $got; set it to that, or to null to use the computed ID." >&2
          exit 1
        fi
        printf '%s\n' "$got" >$out
      '';

  # services.boxmaker.toolsets: built with the tools image's toolkit and CA bundle, each in the
  # form the backend runs (./toolsets.nix).
  toolsets = import ./toolsets.nix {
    inherit
      lib
      pkgs
      cfg
      isBwrap
      ;
    toolkit = cfg.toolsImage.toolkit or defaultToolkit;
    extraCaCerts = cfg.toolsImage.extraCaCerts or [ ];
    podman = lib.getExe config.virtualisation.podman.package;
  };

  # Who writes the service user's line of /etc/subuid and /etc/subgid (nixos/README.md). The
  # default users script (update-users-groups.pl) and userborn 1.0 or later (to which
  # nixpkgs' module hands each user's subUidRanges, subGidRanges and autoSubUidGidRange) write
  # them from the user's options. systemd-sysusers and older userborn (0.4, nixos-26.05's)
  # write none: there the module writes subIdRange itself, which it then requires, as a file
  # (a mode, not a link into /etc/static): shadow's newuidmap opens /etc/subuid with
  # O_NOFOLLOW and refuses a symlink, and rootless Podman could then start nothing.
  userbornWritesSubIds =
    config.services.userborn.enable
    && lib.versionAtLeast (lib.getVersion config.services.userborn.package) "1.0";
  usersWithoutSubIds =
    (config.services.userborn.enable && !userbornWritesSubIds) || config.systemd.sysusers.enable;
  writesSubIds = !isBwrap && usersWithoutSubIds && cfg.subIdRange != null;
  subIdLine = lib.optionalString writesSubIds "${cfg.user}:${toString cfg.subIdRange.start}:${toString cfg.subIdRange.count}\n";

  # --- the config file ------------------------------------------------------------------------
  # settings, with the image IDs left as placeholders when they are only known at build time.
  # TOML has no null: a key or table that is null (runner.image and runner.podman on bwrap,
  # [bwrap] on Podman) is left out, and brokerd applies its default or has no use for it; so is
  # an empty [toolsets].
  dropNulls = lib.filterAttrs (_: v: v != null);
  finalSettings = lib.mapAttrs (_: v: if lib.isAttrs v then dropNulls v else v) (
    lib.filterAttrs (k: v: v != null && !(k == "toolsets" && v == { })) cfg.settings
  );
  # Only the Podman images' IDs are computed; the bwrap backend never builds an image.
  needsImageId = (finalSettings.runner.image or null) == imageIdPlaceholder;
  # Each placeholder in the config and the file its image ID is read from at build time.
  imageIds =
    lib.optional needsImageId {
      placeholder = imageIdPlaceholder;
      file = imageIdFile;
    }
    ++ toolsets.imageIds;

  # What brokerd check-config can check inside the build sandbox: clients and owners are
  # looked up in /etc/passwd and grant directories must exist, neither of which holds there.
  # So this copy names uid 0 as its client (and owner, where there are owners), and each grant
  # directory under a placeholder root that the build fills with empty directories. The
  # assertions below check the names' form, and brokerd checks the real values when it starts.
  # Who owns the placeholders (and the sandbox's / above them) says nothing of the host's
  # directories, so --placeholder-grant-dirs leaves the owners' check to brokerd's start.
  sandboxRoot = "@BOXMAKER_SANDBOX_ROOT@";
  sandboxSettings = finalSettings // {
    broker = finalSettings.broker // {
      clients = [ 0 ];
      owners = lib.optional ((finalSettings.broker.owners or [ ]) != [ ]) 0;
    };
    grants = lib.mapAttrs (
      _: g:
      g
      // lib.optionalAttrs (g ? paths && lib.isList g.paths) {
        paths = map (p: if lib.isAttrs p && p ? path then p // { path = sandboxRoot + p.path; } else p) g.paths;
      }
    ) finalSettings.grants;
  };
  grantDirs = lib.concatMap (
    g: map (p: p.path) (lib.filter (p: lib.isAttrs p && lib.isString (p.path or null)) (g.paths or [ ]))
  ) (lib.attrValues finalSettings.grants);

  fillImageId =
    name: settings:
    if imageIds != [ ] then
      pkgs.runCommand name { } ''
        ${lib.concatImapStrings (i: x: "id${toString i}=$(cat ${x.file})\n") imageIds}
        substitute ${tomlFormat.generate "${name}.in" settings} $out \
          ${lib.concatImapStringsSep " \\\n  " (i: x: "--replace-quiet '${x.placeholder}' \"$id${toString i}\"") imageIds}
      ''
    else
      tomlFormat.generate name settings;

  # The config, checked by brokerd itself at build time: a bad value fails nixos-rebuild, with
  # brokerd's own message (file, line, column, key, what to do).
  filledConfig = fillImageId "brokerd.toml" finalSettings;
  configFile = pkgs.runCommand "brokerd.toml" {
    # For inspection (nix eval) and for nixos/checks: what went into the two files, and the
    # toolsets built for them.
    passthru = {
      settings = finalSettings;
      inherit sandboxSettings imageIdFile imageIds filledConfig;
      toolsets = toolsets.built;
    };
  } ''
    cp ${filledConfig} $out
    root=$PWD/grant-dirs
    mkdir -p "$root" ${lib.concatMapStringsSep " " (d: "\"$root\"${lib.escapeShellArg d}") grantDirs}
    substitute ${fillImageId "brokerd-sandbox.toml" sandboxSettings} sandbox.toml \
      --replace-quiet '${sandboxRoot}' "$root"
    ${lib.optionalString cfg.checkConfig "${lib.getExe' cfg.package "brokerd"} check-config --placeholder-grant-dirs sandbox.toml"}
  '';

  # --- the units, from units.json -------------------------------------------------------------
  placeholders = {
    sh = "${pkgs.runtimeShell}";
    brokerd = lib.getExe' cfg.package "brokerd";
    config = "/etc/boxmaker/brokerd.toml";
    user = cfg.user;
    group = cfg.group;
    client_group = cfg.clientGroup;
    socket_path = cfg.socketPath;
    timeout_stop_s = toString (cfg.settings.broker.shutdown_grace_s + units.timeout_stop_margin_s);
  };
  fill =
    v:
    if lib.isString v then
      lib.replaceStrings (map (k: "@${k}@") (lib.attrNames placeholders)) (lib.attrValues placeholders) v
    else if lib.isList v then
      map fill v
    else
      v;
  fillSection = lib.mapAttrs (_: fill);
  # The service's sections: for the bwrap backend, units.json's "bwrap" section laid over them,
  # key by key, as the dist drop-in lays it over the dist unit.
  serviceUnits = lib.mapAttrs (
    section: settings: settings // lib.optionalAttrs isBwrap (units.bwrap.service.${section} or { })
  ) units.service;
  # [Unit] keys that NixOS has options of its own for (systemd.services.<n>.description,
  # .requires, .after, .wants); the module sets those, and unitConfig gets the rest.
  unitDependencies = [
    "Description"
    "Requires"
    "After"
    "Wants"
  ];

  loadImage = pkgs.writeShellScript "boxmaker-load-image" ''
    export PATH=${
      lib.makeBinPath [
        pkgs.coreutils
        pkgs.gzip
        pkgs.zstd
      ]
    }:$PATH
    export PODMAN=${lib.getExe config.virtualisation.podman.package}
    exec ${pkgs.bash}/bin/bash ${./pkgs/load-image.sh} ${cfg.toolsImage} ${imageIdFile} ${cfg.toolsImageName}
  '';

  # --- the service user's Podman configuration -------------------------------------------------
  # Every container of the service user gets Podman's default seccomp profile with nested user
  # namespaces denied (../scripts/seccomp-nouserns.jq, as scripts/setup.sh does on Debian),
  # named in the user's own containers.conf: brokerd's argument lists stay as specified and the
  # host's other Podman users keep the default. Podman on NixOS ships no seccomp.json file; it
  # applies the default compiled into it, whose JSON form its source carries as the vendored
  # containers common library's pkg/seccomp/seccomp.json.
  podmanSrc = config.virtualisation.podman.package.src or pkgs.podman.src;
  seccompProfile = pkgs.runCommand "boxmaker-seccomp-nouserns.json" { nativeBuildInputs = [ pkgs.jq ]; } (
    (
      if cfg.podmanSeccompBase != null then
        ''
          base=${cfg.podmanSeccompBase}
        ''
      else
        ''
          base=$(find ${podmanSrc}/vendor -path '*/common/pkg/seccomp/seccomp.json' | sort | head -n 1)
          if [ -z "$base" ]; then
            echo "boxmaker: Podman's source (${podmanSrc}) has no vendor/*/common/pkg/seccomp/seccomp.json; set services.boxmaker.podmanSeccompBase to Podman's default seccomp profile" >&2
            exit 1
          fi
        ''
    )
    + ''
      jq -f ${../scripts/seccomp-nouserns.jq} "$base" >$out
    ''
  );
  # Also: no log file per container (a tool's output reaches brokerd only through the attached
  # stream, where the output cap applies) and no events (nothing reads them; brokerd's audit
  # log is the record), as scripts/setup.sh writes on Debian (BENCHMARKS.md).
  podmanContainersConf = tomlFormat.generate "boxmaker-containers.conf" {
    containers = {
      seccomp_profile = "${seccompProfile}";
      log_driver = "none";
    };
    engine.events_logger = "none";
  };

  # --- option types (./option-types.nix) ----------------------------------------------------
  inherit
    (import ./option-types.nix {
      inherit
        lib
        config
        cfg
        tomlFormat
        toolNames
        modes
        imageIdPlaceholder
        ;
    })
    grantType
    settingsType
    ;

  # --- assertions -----------------------------------------------------------------------------
  s = cfg.settings;
  limits = lib.filterAttrs (k: _: lib.elem k [
    "read_file_ms"
    "write_file_ms"
    "shell_ms"
    "http_fetch_ms"
    "egress_start_ms"
  ]) s.runner;
  matches = re: v: lib.isString v && builtins.match re v != null;
  grantAssertions = lib.concatLists (
    lib.mapAttrsToList (
      name: g:
      let
        at = "services.boxmaker.settings.grants.${name}";
        paths = g.paths or [ ];
        pathOf = p: if lib.isAttrs p then p.path or null else null;
      in
      [
        {
          assertion = builtins.match "[A-Za-z0-9_.-]{1,64}" name != null && name != "." && name != "..";
          message = "${at}: the grant name \"${name}\" must be 1 to 64 of A-Z a-z 0-9 _ . - (and not . or ..): it ends up in container names and labels.";
        }
        {
          assertion = g ? tools && lib.isList g.tools && g.tools != [ ] && lib.all (t: lib.elem t toolNames) g.tools;
          message = "${at}.tools: list at least one of ${lib.concatStringsSep ", " toolNames}.";
        }
        {
          assertion = !(g ? mode) || lib.elem g.mode modes;
          message = "${at}.mode: use safe, ask or auto.";
        }
      ]
      ++ map (p: {
        assertion = matches "/[^:,]*" (pathOf p) && builtins.match ".*/\\.{1,2}(/.*)?" (pathOf p) == null;
        message = "${at}.paths: ${builtins.toJSON p}: each entry is { path = \"/absolute/dir\"; write = true|false; } with an absolute path without . or .. components, ':' or ',' (Podman's --volume syntax cannot carry them).";
      }) paths
    ) s.grants
  );
  # Grant directories against each other and against brokerd's own places, as brokerd checks
  # them when it starts; here by their text, since Nix cannot follow the host's symlinks.
  grantEntries = lib.concatLists (
    lib.mapAttrsToList (
      name: g:
      map (p: {
        grant = name;
        path = lib.removeSuffix "/" p.path;
        shown = p.path;
        write = p.write or false;
      }) (lib.filter (p: lib.isAttrs p && matches "/.*" (p.path or null)) (g.paths or [ ]))
    ) s.grants
  );
  # Whether `inner` lies strictly inside `outer` (both without a trailing slash; "/" is "").
  inside = inner: outer: lib.hasPrefix (outer + "/") inner;
  statePlaces = [
    {
      path = s.runner.home;
      what = "the service home (runner.home: Podman's storage and configuration, the egress sockets)";
      file = false;
    }
    {
      path = "/run/boxmaker";
      what = "brokerd's runtime directory";
      file = false;
    }
    {
      path = dirOf cfg.socketPath;
      what = "the socket's directory";
      file = false;
    }
    {
      path = s.broker.audit_log;
      what = "the audit log (broker.audit_log)";
      file = true;
    }
    {
      path = "/etc/boxmaker/brokerd.toml";
      what = "the config file";
      file = true;
    }
    {
      path = "/nix/store";
      what = "the Nix store, which holds the config file";
      file = true;
    }
  ]
  ++ lib.optional (isBwrap && lib.isString (s.bwrap.tools_root or null)) {
    path = s.bwrap.tools_root;
    what = "the sandboxes' tools root (bwrap.tools_root)";
    file = false;
  };
  overlapAssertions =
    lib.concatMap (
      a:
      map (b: {
        assertion = !(inside a.path b.path && (a.write || b.write));
        message = "services.boxmaker.settings.grants.${a.grant}.paths: \"${a.shown}\" lies inside \"${b.shown}\" (grants.${b.grant}) and one of them is writable: a sandbox could swap the inner directory for a symbolic link between calls; grant directories may nest only when both are read-only.";
      }) grantEntries
    ) grantEntries
    ++ lib.concatMap (
      a:
      map (
        place:
        let
          p = lib.removeSuffix "/" (toString place.path);
        in
        {
          assertion = !(p == a.path || inside p a.path || (!place.file && inside a.path p));
          message = "services.boxmaker.settings.grants.${a.grant}.paths: \"${a.shown}\" overlaps \"${toString place.path}\", ${place.what}: no grant may reach brokerd's own state.";
        }
      ) statePlaces
    ) grantEntries;
  # The service user's sub-ID range against every other range of the host: the other users'
  # subUidRanges and subGidRanges, and the other lines of /etc/subuid and /etc/subgid where
  # the module writes them. Lines of one file merge as text, so an overlap would pass
  # silently, and two users' containers would share IDs.
  subIdOverlapAssertions =
    let
      mine = {
        inherit (cfg.subIdRange) start count;
      };
      overlaps = r: r.start < mine.start + mine.count && mine.start < r.start + r.count;
      shown = r: "${toString r.start}-${toString (r.start + r.count - 1)}";
      others = lib.filterAttrs (n: _: n != cfg.user) config.users.users;
      fromUsers =
        kind: startKey:
        lib.concatLists (
          lib.mapAttrsToList (
            n: u:
            map (r: {
              start = r.${startKey};
              inherit (r) count;
              who = "users.users.${n}.${kind}";
            }) (u.${kind} or [ ])
          ) others
        );
      fromFile =
        file:
        let
          text = config.environment.etc.${file}.text or null;
          lines = lib.filter (l: l != "") (lib.splitString "\n" (if text == null then "" else text));
          parsed = map (l: lib.splitString ":" l) lines;
        in
        map (f: {
          start = lib.toInt (lib.elemAt f 1);
          count = lib.toInt (lib.elemAt f 2);
          who = "/etc/${file} (${lib.head f})";
        }) (lib.filter (f: lib.length f == 3 && lib.head f != cfg.user) parsed);
      ranges =
        fromUsers "subUidRanges" "startUid"
        ++ fromUsers "subGidRanges" "startGid"
        ++ fromFile "subuid"
        ++ fromFile "subgid";
    in
    lib.optionals (!isBwrap && cfg.subIdRange != null) (
      map (r: {
        assertion = !overlaps r;
        message = "services.boxmaker.subIdRange: ${cfg.user}'s range ${shown mine} overlaps ${shown r} of ${r.who}: their containers would share IDs. Choose a start outside every other range.";
      }) ranges
    );
in
{
  options.services.boxmaker = {
    enable = mkEnableOption "boxmaker's brokerd, which runs an agent's tool calls in rootless Podman or bubblewrap sandboxes";

    # pkgs.boxmaker where an overlay provides it (the flake's overlays.default), else the
    # package of this repository.
    package = mkOption {
      type = types.package;
      default = pkgs.boxmaker or (pkgs.callPackage ./pkgs/boxmaker.nix { });
      defaultText = literalMD "`pkgs.boxmaker` where an overlay provides it (the flake's `overlays.default`), else the package of this module's repository (`nixos/pkgs/boxmaker.nix`)";
      description = "The boxmaker package: bin/brokerd and bin/boxctl.";
    };

    checkConfig = mkOption {
      type = types.bool;
      default = pkgs.stdenv.buildPlatform.canExecute pkgs.stdenv.hostPlatform;
      defaultText = literalExpression "pkgs.stdenv.buildPlatform.canExecute pkgs.stdenv.hostPlatform";
      description = ''
        Run `brokerd check-config` on the generated config at build time, so a bad value fails
        the build with brokerd's own message. Turn it off where the build cannot run the
        host's brokerd (a system cross-built for another platform); brokerd still checks the
        config when it starts.
      '';
    };

    toolsImage = mkOption {
      type = types.package;
      default = pkgs.callPackage ../images/tools-image.nix { toolkit = defaultToolkit; };
      defaultText = literalMD "the image of `images/tools-image.nix` with the static toolkit";
      description = "The tools image (a docker-archive from dockerTools.buildLayeredImage), loaded into the service user's Podman before brokerd starts (Podman backend). Its .root, the same files as a plain tree, is the bwrap backend's default tools root.";
    };

    bwrap = {
      toolsRoot = mkOption {
        type = types.nullOr types.path;
        default = cfg.toolsImage.root or null;
        defaultText = literalExpression "config.services.boxmaker.toolsImage.root";
        example = literalExpression ''boxmaker.packages.''${pkgs.system}.tools-image.root'';
        description = ''
          The bwrap backend's tools root ([bwrap] tools_root): the tools image's files as a
          plain directory tree (/bin/toolkit, /bin/sh, /bin/curl, the CA bundle), mounted
          read-only as each sandbox's /. A package (the default: the .root of toolsImage,
          built from the same inputs as the image) or the absolute path of a directory on the
          host that the service user can read, e.g. "/var/lib/boxmaker/tools-root" (used as
          written, not copied into the store). null is refused with the bwrap backend.
        '';
      };
      cgroup = mkOption {
        type = types.enum [
          "delegated"
          "systemd-scope"
        ];
        default = "delegated";
        description = ''
          How the bwrap backend bounds a sandbox's memory, processes and CPU ([bwrap] cgroup).
          "delegated": child groups of the unit's own cgroup v2 group, which the unit gets with
          Delegate=yes (needs a cgroup v2 host). "systemd-scope": a transient scope per
          sandbox in the service user's systemd instance (systemd-run --user --scope), which the
          unit then starts and keeps lingering.
        '';
      };
    };

    podmanSeccompBase = mkOption {
      type = types.nullOr types.path;
      default = null;
      example = literalExpression ''"''${pkgs.podman.src}/vendor/go.podman.io/common/pkg/seccomp/seccomp.json"'';
      description = ''
        The seccomp profile (Podman's seccomp.json format) from which the service user's
        profile is derived: the same with nested user namespaces denied. null takes the default
        Podman compiles in, from the seccomp.json in its own source
        (virtualisation.podman.package.src). Podman backend only.
      '';
    };

    toolsImageName = mkOption {
      type = types.str;
      default = "boxmaker-tools";
      description = "The tools image's name; older images of this name are removed after a new one is loaded.";
    };

    toolsImageId = mkOption {
      type = types.nullOr (types.strMatching imageIdRegex);
      default = null;
      example = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
      description = ''
        The ID Podman gives toolsImage. null (the default) computes it from the image at build
        time; a value given here is checked against that at build time, so a wrong pin fails the
        build. Either way the loaded image is checked against it before brokerd starts.
      '';
    };

    user = mkOption {
      type = types.str;
      default = "boxmaker";
      description = "The service user, created by this module; the sandboxes run as this user (its rootless Podman, or bubblewrap).";
    };

    group = mkOption {
      type = types.str;
      default = "boxmaker";
      description = "The service user's primary group.";
    };

    clientGroup = mkOption {
      type = types.str;
      default = "boxmaker-clients";
      description = ''
        The group that owns the socket (mode 0660): its members may connect. Who is served is
        settings.broker.clients, which defaults to this group.
      '';
    };

    home = mkOption {
      type = types.str;
      default = "/var/lib/boxmaker";
      description = "The service user's home: Podman's storage (Podman backend), the audit log, egress directories.";
    };

    socketPath = mkOption {
      type = types.str;
      default = "/run/boxmaker/broker.sock";
      description = "Where systemd listens for the agent loop.";
    };

    subIdRange = mkOption {
      type = types.nullOr (
        types.submodule {
          options = {
            start = mkOption {
              type = types.ints.positive;
              description = "The first subordinate uid and gid.";
            };
            count = mkOption {
              type = types.ints.positive;
              default = 65536;
              description = "How many.";
            };
          };
        }
      );
      default = null;
      description = ''
        The service user's subordinate ID range; null allocates one (autoSubUidGidRange).
        Required where users are made by systemd.sysusers or by services.userborn older than
        1.0, which write no /etc/subuid or /etc/subgid: the module then writes this range into
        both. It must not overlap another user's range. Podman backend only: bwrap maps the
        service user alone.
      '';
    };

    settings = mkOption {
      type = settingsType;
      default = { };
      description = ''
        brokerd's config (docs/design.md#config), written as TOML to /etc/boxmaker/brokerd.toml and
        checked with `brokerd check-config` at build time. runner.image defaults to the image ID
        of toolsImage.
      '';
    };

    toolsets = toolsets.option;

    grants = mkOption {
      type = types.attrsOf grantType;
      default = { };
      example = literalExpression ''
        {
          notes = {
            mode = "auto";
            tools = [ "read_file" "write_file" "shell" "http_fetch" ];
            paths = [ { path = "/srv/notes"; write = true; } { path = "/srv/ref"; } ];
            hosts = [ "docs.example.org" ];
          };
        }
      '';
      description = "Grants, written to settings.grants.NAME.";
    };
  };

  config = mkIf cfg.enable {
    services.boxmaker.settings.grants = lib.mapAttrs (_: g: {
      inherit (g)
        mode
        tools
        hosts
        writes
        approvals
        protect
        ;
      paths = map (p: { inherit (p) path write; }) g.paths;
      allow_addresses = g.allowAddresses;
      shell_hosts = g.shellHosts;
    } // lib.optionalAttrs (g.toolset != null) { inherit (g) toolset; }
      // lib.optionalAttrs g.cache { cache = true; }
      // lib.optionalAttrs (g.maxCacheBytes != null) { max_cache_bytes = g.maxCacheBytes; }) cfg.grants;
    services.boxmaker.settings.toolsets = toolsets.settings;

    assertions = [
      {
        assertion = cfg.user != "root";
        message = "services.boxmaker.user: brokerd runs its sandboxes unprivileged (rootless Podman or bubblewrap); name an unprivileged user, not root.";
      }
      {
        assertion = config.security.allowUserNamespaces;
        message = "services.boxmaker: the ${s.runner.backend} backend makes every sandbox in an unprivileged user namespace, and security.allowUserNamespaces = false forbids them; allow them or do not enable boxmaker.";
      }
      {
        assertion = isBwrap || s.runner.image != null;
        message = "services.boxmaker.settings.runner.image: the podman backend needs the tools image pinned by content; leave it unset to use the ID of services.boxmaker.toolsImage.";
      }
      {
        # The module loads toolsImage and checks it against its ID: the config must name that
        # image by that ID. A name@sha256: digest, or another ID, names an image it never loaded.
        assertion = isBwrap || s.runner.image == null || s.runner.image == imageIdPlaceholder || s.runner.image == cfg.toolsImageId;
        message = "services.boxmaker.settings.runner.image: \"${toString s.runner.image}\" is not the image this module loads (services.boxmaker.toolsImage, by its image ID). Leave runner.image unset; to pin the ID yourself set services.boxmaker.toolsImageId = \"sha256:<64 lowercase hex>\", which the build checks against the image.";
      }
      {
        assertion = isBwrap || !usersWithoutSubIds || cfg.subIdRange != null;
        message = "services.boxmaker.subIdRange: users are made by ${if config.services.userborn.enable then "userborn ${lib.getVersion config.services.userborn.package}" else "systemd-sysusers"} here, which writes no /etc/subuid or /etc/subgid, and rootless Podman starts no container without a range for ${cfg.user}. Set services.boxmaker.subIdRange = { start = 2000000000; } (a range no other user has; 100000 and up are where ranges are usually allocated): the module then writes it into both files.";
      }
      {
        assertion = isBwrap || s.bwrap == null;
        message = "services.boxmaker.settings.bwrap: brokerd accepts [bwrap] only with settings.runner.backend = \"bwrap\"; set that backend, or remove settings.bwrap.";
      }
      {
        assertion = !isBwrap || s.bwrap.tools_root != null;
        message = "services.boxmaker.bwrap.toolsRoot: the bwrap backend mounts the tools image's files, as a directory tree, as each sandbox's /; it is null (services.boxmaker.toolsImage has no .root to default to), so set it to a package or an absolute directory, e.g. boxmaker.packages.<system>.tools-image.root.";
      }
      {
        assertion = !isBwrap || s.bwrap.tools_root == null || lib.hasPrefix "/" s.bwrap.tools_root;
        message = "services.boxmaker.settings.bwrap.tools_root: \"${toString (s.bwrap.tools_root or "")}\" must be an absolute path.";
      }
      {
        assertion = lib.hasPrefix "/" cfg.socketPath && lib.stringLength cfg.socketPath <= 107;
        message = "services.boxmaker.socketPath: \"${cfg.socketPath}\" must be an absolute path of at most 107 bytes (a Unix socket address).";
      }
      {
        assertion = lib.all (c: lib.isInt c || matches clientRegex c) s.broker.clients && s.broker.clients != [ ];
        message = "services.boxmaker.settings.broker.clients: ${builtins.toJSON s.broker.clients}: name at least one client, each a user name, a uid, or \"@\" and a group name.";
      }
      {
        assertion = lib.all (c: lib.isInt c || matches clientRegex c) s.broker.owners;
        message = "services.boxmaker.settings.broker.owners: ${builtins.toJSON s.broker.owners}: each a user name, a uid, or \"@\" and a group name.";
      }
      {
        assertion = lib.hasPrefix "/" s.broker.audit_log && lib.hasPrefix "/" s.runner.home;
        message = "services.boxmaker.settings: broker.audit_log and runner.home must be absolute paths.";
      }
      {
        assertion = s.runner.http_fetch_ms + s.runner.egress_start_ms < s.broker.timeout_ms;
        message = "services.boxmaker.settings.runner.http_fetch_ms: http_fetch_ms + egress_start_ms (${toString (s.runner.http_fetch_ms + s.runner.egress_start_ms)} ms) must stay under broker.timeout_ms (${toString s.broker.timeout_ms} ms): the agent loop waits for the proxy's start too. Lower it or raise timeout_ms.";
      }
    ]
    ++ lib.mapAttrsToList (k: v: {
      assertion = v < s.broker.timeout_ms;
      message = "services.boxmaker.settings.runner.${k}: ${toString v} ms is not under broker.timeout_ms (${toString s.broker.timeout_ms} ms): the agent loop stops waiting then. Lower it, or raise both.";
    }) limits
    ++ grantAssertions
    ++ toolsets.assertions
    ++ overlapAssertions
    ++ subIdOverlapAssertions;

    # The user and its group are declared only under the module's own names; a host that
    # names its own declares them, and gets the settings below merged into its user.
    users.users.${cfg.user} = {
      isSystemUser = mkIf (cfg.user == "boxmaker") true;
      group = mkIf (cfg.user == "boxmaker") cfg.group;
      description = mkIf (cfg.user == "boxmaker") "boxmaker broker";
      home = cfg.home;
      createHome = true;
      homeMode = "700";
      # The user's systemd instance runs without a login: rootless Podman gets its cgroup
      # delegation from it, so the memory and pids limits apply; cgroup = "systemd-scope"
      # makes its scopes there.
      linger = mkIf needsUserManager true;
      # Rootless Podman maps these ranges into its containers; bwrap maps the service user
      # alone and needs none.
      autoSubUidGidRange = mkIf (!isBwrap && cfg.subIdRange == null) true;
      subUidRanges = mkIf (!isBwrap && cfg.subIdRange != null) [
        {
          startUid = cfg.subIdRange.start;
          inherit (cfg.subIdRange) count;
        }
      ];
      subGidRanges = mkIf (!isBwrap && cfg.subIdRange != null) [
        {
          startGid = cfg.subIdRange.start;
          inherit (cfg.subIdRange) count;
        }
      ];
    };
    users.groups = mkMerge [
      (mkIf (cfg.group == "boxmaker") { ${cfg.group} = { }; })
      { ${cfg.clientGroup} = { }; }
    ];

    # Rootless Podman needs /etc/containers (policy.json, registries.conf, storage.conf) and
    # its package, not what virtualisation.podman adds for everyone else: root's Podman API
    # socket, every user's podman.socket, the podman group, the prune timer. The unit has Podman
    # (or bwrap) on its PATH; nothing else of the host gets it from this module.
    virtualisation.containers.enable = mkIf (!isBwrap) true;
    # boxctl, for the clients and the operator (doctor, ps, gc run the brokerd beside it).
    environment.systemPackages = [ cfg.package ];
    environment.etc = mkMerge [
      { "boxmaker/brokerd.toml".source = configFile; }
      (mkIf writesSubIds {
        # Lines: another module's entries for other users are kept beside this one. A file,
        # not a link (see writesSubIds).
        # The mode by default only: a host may set its own (any mode keeps it a file).
        subuid = {
          text = subIdLine;
          mode = lib.mkDefault "0644";
        };
        subgid = {
          text = subIdLine;
          mode = lib.mkDefault "0644";
        };
      })
      (mkIf (!isBwrap) {
        # The service user's Podman configuration and the profile it names, where an operator
        # finds them; the user's own containers.conf links here.
        "boxmaker/containers.conf".source = podmanContainersConf;
        "boxmaker/seccomp-nouserns.json".source = seccompProfile;
      })
    ];
    # The link, made at boot and on every switch, replacing whatever the user had there.
    systemd.tmpfiles.rules = mkIf (!isBwrap) [
      "d ${cfg.home}/.config 0700 ${cfg.user} ${cfg.group} -"
      "d ${cfg.home}/.config/containers 0700 ${cfg.user} ${cfg.group} -"
      "L+ ${cfg.home}/.config/containers/containers.conf - - - - /etc/boxmaker/containers.conf"
    ];

    systemd.sockets.boxmaker = {
      unitConfig = fillSection units.socket.Unit;
      socketConfig = fillSection units.socket.Socket;
      wantedBy = units.socket.Install.WantedBy;
    };

    systemd.services.boxmaker = mkMerge [
      {
        # The [Unit] dependencies through NixOS's own options (so that other modules' lists
        # merge with them), the rest of [Unit] as it is in units.json.
        description = serviceUnits.Unit.Description;
        requires = units.service.Unit.Requires;
        after = units.service.Unit.After;
        wants = units.service.Unit.Wants;
        unitConfig = fillSection (removeAttrs serviceUnits.Unit unitDependencies);
        serviceConfig = fillSection serviceUnits.Service // {
          # The shared steps first (units.json): the start of the user's manager, where Podman
          # or systemd-scope needs it. Then, for Podman, the image, and each toolset's: loaded
          # as the service user and checked against the pinned ID, older ones pruned.
          ExecStartPre =
            lib.optionals needsUserManager (fill units.service.Service.ExecStartPre)
            ++ lib.optional (!isBwrap) "${loadImage}"
            ++ toolsets.loaders;
        };
        # The config names the tools root, so a new tree restarts brokerd through it.
        restartTriggers = [ configFile ];
      }
      # bwrap: the plain, unprivileged bwrap, and no wrappers (nothing setuid is wanted under NoNewPrivileges). NixOS adds systemd itself
      # (systemd-run) to every service's PATH.
      (mkIf isBwrap {
        path = [ pkgs.bubblewrap ];
      })
      # Podman: /run/wrappers/bin first, where newuidmap and newgidmap are setuid wrappers.
      (mkIf (!isBwrap) {
        path = [
          "/run/wrappers"
          config.virtualisation.podman.package
        ];
        restartTriggers = [ cfg.toolsImage ];
      })
    ];
  };
}
