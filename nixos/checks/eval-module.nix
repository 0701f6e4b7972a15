# Evaluates nixos/module.nix with lib.evalModules against stub declarations of the NixOS
# options it touches, without nixpkgs' package set (not available here). Run by
# nixos/checks/nix-check.sh when NIXPKGS_LIB points at nixpkgs' lib/:
#
#   nix-instantiate --eval --strict --json nixos/checks/eval-module.nix --arg lib 'import $NIXPKGS_LIB'
#
# The stubs declare each option with the name and a type close to NixOS's, so a misspelt
# option or a value of the wrong shape fails here. Derivations are stand-ins that keep their
# build script, so the result can show what the module would build. The toolsets' builder
# (images/toolset.nix) and their image IDs (nixos/pkgs/image-id.nix) are evaluated for real,
# against the stubs of the nixpkgs builders they call (./stub-pkgs.nix), which refuse arguments
# nixpkgs does not take.
{ lib }:
let
  inherit (lib) mkOption types;

  stubPkgs = import ./stub-pkgs.nix { inherit lib; };

  fakeDrv =
    name: extra:
    {
      type = "derivation";
      inherit name;
      outPath = "/nix/store/00000000000000000000000000000000-${name}";
    }
    // extra;

  # A JSON-like value type, as TOML settings are.
  tomlValue = types.nullOr (
    types.oneOf [
      types.bool
      types.int
      types.float
      types.str
      types.path
      (types.attrsOf tomlValue)
      (types.listOf tomlValue)
    ]
  );

  pkgs = {
    # A native build: the build can run what it builds (checkConfig's default).
    stdenv = {
      buildPlatform.canExecute = _: true;
      hostPlatform = { };
    };
    runtimeShell = "/nix/store/00000000000000000000000000000000-bash/bin/bash";
    bash = fakeDrv "bash" { };
    coreutils = fakeDrv "coreutils" { };
    gzip = fakeDrv "gzip" { };
    zstd = fakeDrv "zstd" { };
    jq = fakeDrv "jq" { };
    bubblewrap = fakeDrv "bubblewrap" { meta.mainProgram = "bwrap"; };
    writeText = name: text: fakeDrv name { inherit text; };
    writeShellScript = name: text: fakeDrv name { inherit text; };
    runCommand = name: env: script: fakeDrv name ({ inherit script; } // (env.passthru or { }));
    # The tools image carries its file tree beside it as .root, and its toolkit and extra CAs
    # (images/tools-image.nix). A toolset, and a streamed image's ID, are built by their own
    # expressions over the strict stubs.
    callPackage =
      path: args:
      let
        file = baseNameOf (toString path);
        name = "callPackage-${file}";
      in
      if file == "toolset.nix" || (file == "image-id.nix" && (args.stream or false)) then
        stubPkgs.callPackage path args
      else
        fakeDrv name (
          { inherit args; }
          // lib.optionalAttrs (file == "tools-image.nix") {
            root = fakeDrv "${name}-root" { };
            inherit (args) toolkit;
            extraCaCerts = args.extraCaCerts or [ ];
          }
        );
    pkgsStatic.callPackage = path: args: fakeDrv "static-${baseNameOf (toString path)}" { inherit args; };
    formats.toml = _: {
      type = types.attrsOf tomlValue;
      generate = name: value: fakeDrv name { json = builtins.toJSON value; };
    };
  };

  # The NixOS options module.nix and the VM test's nodes set or read (./nixos-stubs.nix).
  nixosStubs = import ./nixos-stubs.nix { inherit lib; };

  # services.boxmaker = cfg, and `nixos` for the rest of the host.
  evalWith =
    cfg: nixos:
    (lib.evalModules {
      modules = [
        nixosStubs
        ../module.nix
        { services.boxmaker = cfg; }
        nixos
      ];
      specialArgs = { inherit pkgs; };
    }).config;
  eval = cfg: evalWith cfg { };

  failed = config: map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);

  # What the check prints and nixos/checks/nix-check.sh asserts on.
  summary =
    config:
    let
      svc = config.systemd.services.boxmaker;
      sock = config.systemd.sockets.boxmaker;
      toml = config.environment.etc."boxmaker/brokerd.toml".source;
    in
    {
      failedAssertions = failed config;
      user = config.users.users.boxmaker or (config.users.users.svc or null);
      groups = lib.attrNames config.users.groups;
      containers = config.virtualisation.containers.enable;
      podmanModule = config.virtualisation.podman.enable;
      subuid = config.environment.etc.subuid.text or null;
      subgid = config.environment.etc.subgid.text or null;
      subuidMode = config.environment.etc.subuid.mode or null;
      subuidSource = toString (config.environment.etc.subuid.source or "");
      subgidMode = config.environment.etc.subgid.mode or null;
      systemPackages = map (p: p.name) config.environment.systemPackages;
      socket = {
        inherit (sock) unitConfig socketConfig wantedBy;
      };
      service = {
        inherit (svc)
          unitConfig
          serviceConfig
          description
          requires
          after
          wants
          ;
        path = map toString svc.path;
        restartTriggers = map toString svc.restartTriggers;
      };
      configScript = toml.script;
      # With toolsImageId: the build step that checks it against the computed ID.
      imageIdScript = toml.imageIdFile.script or null;
      settings = toml.settings;
      sandboxSettings = toml.sandboxSettings;
      # The image IDs filled in at build time, and the step that fills them in.
      imageIds = map (i: {
        inherit (i) placeholder;
        file = toString i.file;
      }) toml.imageIds;
      fillScript = toml.filledConfig.script or null;
      # What the module built for each toolset (nixos/toolsets.nix, images/toolset.nix), as
      # far as the backend uses it: its ID file and loader (Podman), its root and closure
      # (bwrap), and the packages of its buildEnv.
      toolsets = lib.mapAttrs (
        _: ts:
        {
          inherit (ts) imageName;
          packages = map (p: p.name) ts.env.env.paths;
          image = toString ts.image;
          imageContents = map toString ts.image.image.contents;
          imageIdScript = ts.imageId.script;
          idFile = toString ts.idFile;
          loader = toString ts.loader;
          loaderText = ts.loader.text;
          root = toString ts.root;
          closureRoots = map toString ts.closure.rootPaths;
          storePaths = ts.storePaths;
        }
      ) toml.toolsets;
      etc = lib.attrNames config.environment.etc;
      tmpfiles = config.systemd.tmpfiles.rules;
      # The service user's Podman configuration (Podman backend): what containers.conf holds,
      # and the profile it names with the script that derives it.
      podmanConf = lib.mapAttrs (_: e: e.source.json or e.source.script or null) (
        lib.filterAttrs (n: _: lib.elem n [
          "boxmaker/containers.conf"
          "boxmaker/seccomp-nouserns.json"
        ]) config.environment.etc
      );
      seccompProfilePath = toString (config.environment.etc."boxmaker/seccomp-nouserns.json".source or "");
    };

  minimal = {
    enable = true;
  };

  # A cross-built system: brokerd is not run at build time.
  noCheck = {
    enable = true;
    checkConfig = false;
  };

  full = {
    enable = true;
    toolsImageId = "sha256:${lib.concatStrings (lib.genList (_: "ab") 32)}";
    clientGroup = "agents";
    socketPath = "/run/boxmaker/agents.sock";
    subIdRange = {
      start = 200000;
      count = 65536;
    };
    settings = {
      broker = {
        clients = [
          "loopd"
          1001
          "@agents"
        ];
        timeout_ms = 200000;
        shutdown_grace_s = 45;
        max_concurrent_calls = 2;
        owners = [
          "alice"
          2000
        ];
      };
      runner = {
        shell_ms = 150000;
        memory = "1g";
        pids = 64;
        egress_network = "pasta";
      };
      grants.raw = {
        tools = [ "read_file" ];
        paths = [ { path = "/srv/ref"; } ];
      };
    };
    grants.notes = {
      mode = "auto";
      tools = [
        "read_file"
        "write_file"
        "shell"
        "http_fetch"
      ];
      paths = [
        {
          path = "/srv/notes";
          write = true;
        }
        { path = "/srv/ref"; }
      ];
      hosts = [
        "docs.example.org"
        "*.example.net"
      ];
      allowAddresses = [ "192.168.1.0/24" ];
      shellHosts = [ "crates.io" "*.crates.io" ];
    };
    grants.project = {
      mode = "auto";
      tools = [ "shell" ];
      paths = [
        {
          path = "/srv/project";
          write = true;
        }
      ];
      writes = "staged";
      approvals = "owner";
      protect = "classifier";
      cache = true;
      maxCacheBytes = 4294967296;
    };
  };

  # Podman with a base seccomp profile of the operator's.
  seccompBase = {
    enable = true;
    podmanSeccompBase = "/etc/containers/seccomp.json";
  };

  # Users made by userborn, with another module's subordinate range beside the service's.
  userborn = {
    cfg = {
      enable = true;
      subIdRange.start = 400000;
    };
    nixos = {
      services.userborn.enable = true;
      environment.etc.subuid.text = "builder:500000:65536";
    };
  };

  # The host's own mode for the files the module writes: it wins, without a conflict.
  userbornOwnMode = {
    inherit (userborn) cfg;
    nixos = userborn.nixos // {
      environment.etc.subuid = {
        text = "builder:500000:65536";
        mode = "0600";
      };
    };
  };
  # A host that writes /etc/subuid itself from a file (nixos/README.md: with mkForce).
  userbornOwnSource = {
    inherit (userborn) cfg;
    nixos = {
      services.userborn.enable = true;
      environment.etc.subuid.source = lib.mkForce (builtins.toFile "subuid" "boxmaker:400000:65536\n");
    };
  };
  # userborn 1.0 writes sub-IDs from the users' options: the module writes no file, and
  # needs no subIdRange (autoSubUidGidRange), or hands userborn the one given.
  userborn1 = {
    services.userborn.enable = true;
    services.userborn.package = {
      type = "derivation";
      name = "userborn-1.0.0";
      version = "1.0.0";
      outPath = "/nix/store/00000000000000000000000000000000-userborn-1.0.0";
    };
  };

  # The bwrap backend with every default: the tools image's .root, cgroup = "delegated".
  bwrap = {
    enable = true;
    settings.runner.backend = "bwrap";
    grants.notes = {
      mode = "auto";
      tools = [
        "read_file"
        "write_file"
        "shell"
        "http_fetch"
      ];
      paths = [
        {
          path = "/srv/notes";
          write = true;
        }
      ];
      hosts = [ "docs.example.org" ];
    };
  };

  # bwrap with systemd scopes, a tools root of the operator's, and subIdRange (ignored).
  bwrapScope = {
    enable = true;
    bwrap = {
      toolsRoot = "/var/lib/boxmaker/tools-root";
      cgroup = "systemd-scope";
    };
    subIdRange.start = 300000;
    settings = {
      broker.clients = [ "loopd" ];
      runner = {
        backend = "bwrap";
        enforce_limits = true;
        memory = "256m";
      };
      grants.ref = {
        tools = [ "read_file" ];
        paths = [ { path = "/srv/ref"; } ];
      };
    };
  };

  # Two toolsets built from packages, sharing one (git), with a grant on each and one on the
  # base toolset; on Podman and on bwrap.
  git = fakeDrv "git" { };
  toolsetsPodman = {
    enable = true;
    toolsets = {
      c.packages = [
        git
        (fakeDrv "gnumake" { })
        (fakeDrv "gcc-wrapper" { })
      ];
      "docs.v2".packages = [
        git
        (fakeDrv "pandoc" { })
      ];
    };
    grants.build = {
      mode = "auto";
      tools = [
        "read_file"
        "write_file"
        "shell"
      ];
      paths = [
        {
          path = "/srv/build";
          write = true;
        }
      ];
      toolset = "c";
    };
    grants.docs = {
      tools = [
        "read_file"
        "shell"
      ];
      paths = [ { path = "/srv/docs"; } ];
      toolset = "docs.v2";
    };
    grants.plain = {
      tools = [ "read_file" ];
      paths = [ { path = "/srv/ref"; } ];
    };
  };
  toolsetsBwrap = lib.recursiveUpdate toolsetsPodman { settings.runner.backend = "bwrap"; };

  # Each must fail at least the assertion whose message contains the given text.
  bad = {
    unknownToolset = {
      cfg = {
        enable = true;
        toolsets.c.packages = [ git ];
        grants.g = {
          tools = [ "shell" ];
          paths = [ { path = "/srv/g"; } ];
          toolset = "cc";
        };
      };
      expect = "services.boxmaker.settings.grants.g.toolset: \"cc\" is not a toolset: the toolsets are base, c.";
    };
    unknownToolsetBwrap = {
      cfg = {
        enable = true;
        settings.runner.backend = "bwrap";
        settings.grants.g = {
          tools = [ "shell" ];
          paths = [ { path = "/srv/g"; } ];
          toolset = "c";
        };
      };
      expect = "services.boxmaker.settings.grants.g.toolset: \"c\" is not a toolset: the toolsets are base.";
    };
    toolsetBase = {
      cfg = {
        enable = true;
        toolsets.base.packages = [ git ];
      };
      expect = "services.boxmaker.toolsets.base: \"base\" is the built-in toolset";
    };
    toolsetName = {
      cfg = {
        enable = true;
        settings.runner.backend = "bwrap";
        toolsets."a b".packages = [ git ];
      };
      expect = "services.boxmaker.toolsets.\"a b\": a toolset name is 1 to 64";
    };
    handToolsetName = {
      cfg = {
        enable = true;
        settings.toolsets."..".image = "sha256:${lib.concatStrings (lib.genList (_: "cd") 32)}";
      };
      expect = "services.boxmaker.settings.toolsets.\"..\": a toolset name is 1 to 64";
    };
    tag = {
      cfg = {
        enable = true;
        settings.runner.image = "boxmaker-tools:latest";
      };
      expect = "settings.runner.image: \"boxmaker-tools:latest\" is not the image this module loads";
    };
    # A digest names an image the module never loaded.
    digest = {
      cfg = {
        enable = true;
        settings.runner.image = "localhost/boxmaker-tools@sha256:${lib.concatStrings (lib.genList (_: "cd") 32)}";
      };
      expect = "is not the image this module loads";
    };
    # Another ID than toolsImageId.
    otherId = {
      cfg = {
        enable = true;
        toolsImageId = "sha256:${lib.concatStrings (lib.genList (_: "ab") 32)}";
        settings.runner.image = "sha256:${lib.concatStrings (lib.genList (_: "cd") 32)}";
      };
      expect = "is not the image this module loads";
    };
    userbornNoRange = {
      cfg.enable = true;
      nixos.services.userborn.enable = true;
      expect = "services.boxmaker.subIdRange: users are made by userborn 0.4.0 here, which writes no /etc/subuid";
    };
    # The usual first range of hand-written and allocated lines, taken by another user.
    subIdOverlapLine = {
      cfg = {
        enable = true;
        subIdRange.start = 100000;
      };
      nixos = {
        services.userborn.enable = true;
        environment.etc.subgid.text = "builder:150000:65536";
      };
      expect = "services.boxmaker.subIdRange: boxmaker's range 100000-165535 overlaps 150000-215535 of /etc/subgid (builder)";
    };
    subIdOverlapUser = {
      cfg = {
        enable = true;
        subIdRange.start = 100000;
      };
      nixos.users.users.alice.subUidRanges = [
        {
          startUid = 130000;
          count = 1000;
        }
      ];
      expect = "overlaps 130000-130999 of users.users.alice.subUidRanges";
    };
    sysusersNoRange = {
      cfg.enable = true;
      nixos.systemd.sysusers.enable = true;
      expect = "users are made by systemd-sysusers here";
    };
    limit = {
      cfg = {
        enable = true;
        settings.runner.shell_ms = 120000;
      };
      expect = "runner.shell_ms: 120000 ms is not under broker.timeout_ms";
    };
    fetch = {
      cfg = {
        enable = true;
        settings.runner.http_fetch_ms = 116000;
      };
      expect = "http_fetch_ms + egress_start_ms (121000 ms)";
    };
    relativePath = {
      cfg = {
        enable = true;
        grants.g = {
          tools = [ "read_file" ];
          paths = [ { path = "srv/notes"; } ];
        };
      };
      expect = "grants.g.paths";
    };
    commaPath = {
      cfg = {
        enable = true;
        settings.grants.g = {
          tools = [ "shell" ];
          paths = [ { path = "/srv/a,b"; } ];
        };
      };
      expect = "grants.g.paths";
    };
    root = {
      cfg = {
        enable = true;
        user = "root";
      };
      expect = "not root";
    };
    bwrapRoot = {
      cfg = {
        enable = true;
        settings.runner.backend = "bwrap";
        user = "root";
      };
      expect = "not root";
    };
    bwrapNoRoot = {
      cfg = {
        enable = true;
        settings.runner.backend = "bwrap";
        bwrap.toolsRoot = null;
      };
      expect = "services.boxmaker.bwrap.toolsRoot: the bwrap backend mounts the tools image's files";
    };
    bwrapRelativeRoot = {
      cfg = {
        enable = true;
        settings.runner.backend = "bwrap";
        settings.bwrap.tools_root = "tools-root";
      };
      expect = "settings.bwrap.tools_root: \"tools-root\" must be an absolute path";
    };
    bwrapTableOnPodman = {
      cfg = {
        enable = true;
        settings.bwrap.cgroup = "systemd-scope";
      };
      expect = "brokerd accepts [bwrap] only with settings.runner.backend = \"bwrap\"";
    };
    bwrapNoUserns = {
      cfg = {
        enable = true;
        settings.runner.backend = "bwrap";
      };
      nixos.security.allowUserNamespaces = false;
      expect = "the bwrap backend makes every sandbox in an unprivileged user namespace";
    };
    podmanNoImage = {
      cfg = {
        enable = true;
        settings.runner.image = null;
      };
      expect = "the podman backend needs the tools image pinned by content";
    };
    client = {
      cfg = {
        enable = true;
        settings.broker.clients = [ "Bad User" ];
      };
      expect = "broker.clients";
    };
    grantName = {
      cfg = {
        enable = true;
        settings.grants."a b".tools = [ "shell" ];
      };
      expect = "the grant name \"a b\" must be 1 to 64";
    };
    nestedWritable = {
      cfg = {
        enable = true;
        grants.outer = {
          tools = [ "shell" ];
          paths = [ { path = "/srv/p"; write = true; } ];
        };
        grants.inner = {
          tools = [ "shell" ];
          paths = [ { path = "/srv/p/ro"; } ];
        };
      };
      expect = "grants.inner.paths: \"/srv/p/ro\" lies inside \"/srv/p\" (grants.outer) and one of them is writable";
    };
    nestedInOneGrant = {
      cfg = {
        enable = true;
        settings.runner.backend = "bwrap";
        grants.g = {
          tools = [ "shell" ];
          paths = [
            { path = "/srv/p/ro"; }
            { path = "/srv/p/"; write = true; }
          ];
        };
      };
      expect = "grants.g.paths: \"/srv/p/ro\" lies inside \"/srv/p/\" (grants.g)";
    };
    grantOverHome = {
      cfg = {
        enable = true;
        grants.g = {
          tools = [ "read_file" ];
          paths = [ { path = "/var/lib"; } ];
        };
      };
      expect = "grants.g.paths: \"/var/lib\" overlaps \"/var/lib/boxmaker\", the service home";
    };
    grantInsideHome = {
      cfg = {
        enable = true;
        grants.g = {
          tools = [ "read_file" ];
          paths = [ { path = "/var/lib/boxmaker/.config"; } ];
        };
      };
      expect = "overlaps \"/var/lib/boxmaker\", the service home";
    };
    grantOfRoot = {
      cfg = {
        enable = true;
        grants.g = {
          tools = [ "read_file" ];
          paths = [ { path = "/"; } ];
        };
      };
      expect = "grants.g.paths: \"/\" overlaps";
    };
    grantOfRuntimeDir = {
      cfg = {
        enable = true;
        grants.g = {
          tools = [ "read_file" ];
          paths = [ { path = "/run"; } ];
        };
      };
      expect = "overlaps \"/run/boxmaker\", brokerd's runtime directory";
    };
    unknownTool = {
      cfg = {
        enable = true;
        settings.grants.g.tools = [ "exec" ];
      };
      expect = "grants.g.tools";
    };
  };
in
{
  minimal = summary (eval minimal);
  # The user and group under the host's own names: declared by the host, not the module.
  ownUser = summary (
    evalWith {
      enable = true;
      user = "svc";
      group = "svc";
    } { users.users.svc.group = "svc"; }
  );
  # Every option's default and example as the manual shows them.
  docs = map (o: {
    inherit (o) name;
    defaultText = o.default or null;
    example = o.example or null;
  }) (lib.optionAttrSetToDocList (lib.evalModules {
    modules = [ nixosStubs ../module.nix ];
    specialArgs = { inherit pkgs; };
  }).options.services.boxmaker);
  noCheck = summary (eval noCheck);
  full = summary (eval full);
  seccompBase = summary (eval seccompBase);
  bwrap = summary (eval bwrap);
  bwrapScope = summary (eval bwrapScope);
  toolsetsPodman = summary (eval toolsetsPodman);
  toolsetsBwrap = summary (eval toolsetsBwrap);
  userborn = summary (evalWith userborn.cfg userborn.nixos);
  userbornOwnMode = summary (evalWith userbornOwnMode.cfg userbornOwnMode.nixos);
  userbornOwnSource = summary (evalWith userbornOwnSource.cfg userbornOwnSource.nixos);
  userborn1 = summary (evalWith minimal userborn1);
  userborn1Range = summary (evalWith userborn.cfg userborn1);
  # bwrap needs no subordinate IDs, whoever makes the users.
  bwrapUserborn = failed (evalWith bwrap { services.userborn.enable = true; });
  disabled = {
    failedAssertions = failed (eval { enable = false; });
    services = lib.attrNames (eval { enable = false; }).systemd.services;
  };
  bad = lib.mapAttrs (_: b: {
    inherit (b) expect;
    failed = failed (evalWith b.cfg (b.nixos or { }));
  }) bad;
}
