# A stand-in for the parts of nixpkgs that the flake's package expressions call, for evaluating
# them here, where there is no nixpkgs (nixos/checks/eval-packages.nix). Each builder takes the
# argument names its nixpkgs counterpart takes (nixos-26.05) and throws on any other, so a
# misspelt or unknown argument fails here as it would in a real build's evaluation; it returns a
# derivation-shaped set that records what the expression asked for (its script, its arguments)
# under a stable made-up store path.
#
# `callPackage` is nixpkgs' own semantics: the function's arguments are filled from this set by
# name, overridden by the ones given; an argument this set lacks and the function needs is an
# evaluation error naming it.
{ lib }:
let
  storePath = name: "/nix/store/${builtins.substring 0 32 (builtins.hashString "sha256" name)}-${name}";

  drv =
    name: attrs:
    {
      type = "derivation";
      inherit name;
      outPath = storePath name;
      drvPath = storePath "${name}.drv";
      meta = { };
      passthru = { };
    }
    // attrs;

  # Throws unless `args` has each of `required`.
  needs =
    fname: required: args:
    let
      missing = lib.filter (n: !(args ? ${n})) required;
    in
    if missing == [ ] then
      args
    else
      throw "${fname}: the argument(s) ${lib.concatStringsSep ", " missing} are required";

  # Throws unless every argument name of `args` is one of `allowed`.
  strict =
    fname: allowed: args:
    let
      unknown = lib.subtractLists allowed (lib.attrNames args);
    in
    if unknown == [ ] then
      args
    else
      throw "${fname}: nixpkgs does not take the argument(s) ${lib.concatStringsSep ", " unknown}";

  # stdenv.mkDerivation's common arguments, which every builder below passes on.
  mkDerivationArgs = [
    "pname"
    "version"
    "name"
    "src"
    "srcs"
    "nativeBuildInputs"
    "buildInputs"
    "propagatedBuildInputs"
    "passthru"
    "meta"
    "doCheck"
    "doInstallCheck"
    "checkFlags"
    "checkInputs"
    "nativeCheckInputs"
    "preCheck"
    "postCheck"
    "preBuild"
    "postBuild"
    "preInstall"
    "postInstall"
    "postPatch"
    "patches"
    "env"
    "strictDeps"
    "dontStrip"
    "preferLocalBuild"
    "allowSubstitutes"
  ];

  # A package with a bin/ of the given programs (their files are made by the check).
  pkg =
    name: programs:
    drv name {
      stubPrograms = programs;
      meta.mainProgram = lib.head (programs ++ [ name ]);
    };

  busybox = pkg "busybox" [ "busybox" ];

  # streamLayeredImage's arguments (nixos-26.05); buildLayeredImage takes them too, and
  # compressor.
  streamLayeredImageArgs = [
    "name"
    "architecture"
    "config"
    "contents"
    "created"
    "debug"
    "enableFakechroot"
    "extraCommands"
    "fakeRootCommands"
    "fromImage"
    "gid"
    "gname"
    "includeNixDB"
    "includeStorePaths"
    "layeringPipeline"
    "maxLayers"
    "meta"
    "mtime"
    "passthru"
    "tag"
    "uid"
    "uname"
  ];

  self = {
    inherit lib;
    stubStorePath = storePath;

    callPackage =
      fn: overrides:
      let
        f = if builtins.isFunction fn then fn else import fn;
        auto = builtins.intersectAttrs (builtins.functionArgs f) self;
      in
      f (auto // overrides);

    stdenv = {
      buildPlatform.canExecute = _: true;
      hostPlatform = {
        system = "x86_64-linux";
        isStatic = false;
      };
    };

    runCommand =
      name: env: script:
      drv name {
        inherit script;
        env = strict "runCommand (${name})" (
          mkDerivationArgs
          ++ [
            "jq"
            "src"
          ]
        ) env;
        passthru = env.passthru or { };
      }
      // (env.passthru or { });

    writeShellScript = name: text: drv name { inherit text; };
    runtimeShell = "${storePath "bash"}/bin/bash";
    coreutils = pkg "coreutils" [ "cat" ];
    gzip = pkg "gzip" [ "gzip" ];
    zstd = pkg "zstd" [ "zstd" ];
    # A JSON-like value type, as TOML settings are; generate keeps the value as JSON.
    formats.toml = _: {
      type =
        let
          value = lib.types.nullOr (
            lib.types.oneOf [
              lib.types.bool
              lib.types.int
              lib.types.float
              lib.types.str
              lib.types.path
              (lib.types.attrsOf value)
              (lib.types.listOf value)
            ]
          );
        in
        lib.types.attrsOf value;
      generate = name: value: drv name { json = builtins.toJSON value; };
    };
    writeText = name: text: drv name { inherit text; };

    rustPlatform.buildRustPackage =
      args:
      let
        a = strict "rustPlatform.buildRustPackage" (
          mkDerivationArgs
          ++ [
            "cargoLock"
            "cargoHash"
            "cargoBuildFlags"
            "cargoTestFlags"
            "buildType"
            "checkType"
            "buildNoDefaultFeatures"
            "buildFeatures"
            "useNextest"
            "auditable"
          ]
        ) args;
      in
      drv "${a.pname}-${a.version}" {
        rust = a;
        inherit (a) meta;
        passthru = a.passthru or { };
      };

    dockerTools = {
      # buildLayeredImage passes everything but compressor and meta to streamLayeredImage, and
      # its result carries the stream's passthru, isExe = true among it, although it is an
      # archive.
      buildLayeredImage =
        args:
        let
          a = strict "dockerTools.buildLayeredImage" ([ "compressor" ] ++ streamLayeredImageArgs) (
            needs "dockerTools.buildLayeredImage" [ "name" ] args
          );
        in
        drv "${baseNameOf a.name}.tar" {
          image = a;
          isExe = true;
        }
        // (a.passthru or { });
      # A script that writes the image to its standard output, named stream-<name>; its
      # passthru says so with isExe.
      streamLayeredImage =
        args:
        let
          a = strict "dockerTools.streamLayeredImage" streamLayeredImageArgs (
            needs "dockerTools.streamLayeredImage" [ "name" ] args
          );
        in
        drv "stream-${baseNameOf a.name}" {
          image = a;
          isExe = true;
          imageName = lib.toLower a.name;
        }
        // (a.passthru or { });
      caCertificates = drv "ca-certificates" { stubFiles = [ "etc/ssl/certs/ca-certificates.crt" ]; };
    };

    pkgsStatic = self // {
      stdenv = self.stdenv // {
        hostPlatform = self.stdenv.hostPlatform // {
          isStatic = true;
        };
      };
      inherit busybox;
      curl = pkg "curl" [ "curl" ];
    };
    inherit busybox;

    # Its one argument; the result is named closure-info whatever the roots, so the stub's
    # store path is made from them.
    closureInfo =
      args:
      let
        a = strict "closureInfo" [ "rootPaths" ] (needs "closureInfo" [ "rootPaths" ] args);
        key = builtins.hashString "sha256" (toString (map toString a.rootPaths));
      in
      drv "closure-info" {
        inherit (a) rootPaths;
        outPath = "/nix/store/${builtins.substring 0 32 key}-closure-info";
      };

    # buildEnv's arguments (nixos-26.05; stdenv.mkDerivation's through derivationArgs). The
    # stub keeps its packages and the programs of their bin/.
    buildEnv =
      args:
      let
        a =
          strict "buildEnv"
            [
              "name"
              "pname"
              "version"
              "paths"
              "pathsToLink"
              "extraOutputsToInstall"
              "extraPrefix"
              "ignoreCollisions"
              "ignoreSingleFileOutputs"
              "checkCollisionContents"
              "includeClosures"
              "manifest"
              "postBuild"
              "nativeBuildInputs"
              "buildInputs"
              "derivationArgs"
              "passthru"
              "meta"
            ]
            (needs "buildEnv" [ "paths" ] args);
      in
      drv (a.name or "${a.pname}-${a.version}") {
        env = a;
        stubPrograms = lib.concatMap (p: p.stubPrograms or [ ]) a.paths;
      };

    gitMinimal = pkg "git-minimal" [ "git" ];
    gnumake = pkg "gnumake" [ "make" ];

    buildPackages.binutils-unwrapped = pkg "binutils" [ "readelf" ];
    installShellFiles = drv "install-shell-files" { };
    jq = pkg "jq" [ "jq" ];
    bash = pkg "bash" [ "bash" ];
    gawk = pkg "gawk" [ "awk" ];
    iproute2 = pkg "iproute2" [ "ip" ];
    util-linux = pkg "util-linux" [ "unshare" ];
    bubblewrap = pkg "bubblewrap" [ "bwrap" ];
    python3 = pkg "python3" [ "python3" ];
    binutils = pkg "binutils" [ "readelf" ];

    testers.runNixOSTest =
      test:
      drv "vm-test-run-${test.name}" {
        test = strict "testers.runNixOSTest" [
          "name"
          "nodes"
          "testScript"
          "globalTimeout"
          "meta"
          "skipLint"
          "skipTypeCheck"
          "extraPythonPackages"
          "interactive"
          "defaults"
        ] test;
      };
  };
in
self
