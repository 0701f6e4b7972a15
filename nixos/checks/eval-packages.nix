# The flake's packages and checks evaluated against stub-pkgs.nix (no nixpkgs here): what each
# expression asks of nixpkgs, as JSON, for nixos/checks/check.py packages and images. Run by
# nixos/checks/nix-check.sh:
#
#   nix-instantiate --eval --strict --json nixos/checks/eval-packages.nix --arg lib 'import $NIXPKGS_LIB'
#
# An argument nixpkgs' builders do not take, or a package the expressions name that the stub set
# lacks, fails the evaluation.
{ lib }:
let
  # Debian's Nix 2.8 lacks builtins.readFileType, which lib.fileset needs: there, the two fileset
  # functions the VM test's sources use stand in as ones that require each listed path to exist
  # (a newer Nix evaluates nixpkgs' own).
  lib' =
    if builtins ? readFileType then
      lib
    else
      lib
      // {
        fileset = lib.fileset // {
          unions = paths: paths;
          toSource =
            { root, fileset }:
            assert lib.all (p: builtins.pathExists p || throw "fileset: ${toString p} is missing") fileset;
            "/nix/store/00000000000000000000000000000000-source";
        };
      };
  pkgs = import ./stub-pkgs.nix { lib = lib'; };
  flake = import ../../flake.nix;
  system = "x86_64-linux";
  nixpkgs = {
    lib = lib';
    legacyPackages.${system} = pkgs;
  };
  outputs = flake.outputs {
    self = outputs;
    inherit nixpkgs;
  };
  p = outputs.packages.${system};
  c = outputs.checks.${system};

  # What the package check reads of a buildRustPackage call (src and cargoLock are paths that
  # are not copied here).
  rust = d: {
    inherit (d) name;
    args = removeAttrs d.rust [
      "src"
      "cargoLock"
    ];
  };
  script = d: d.script;
  image = d: {
    inherit (d.image) name compressor extraCommands;
    contents = map toString d.image.contents;
    root = toString d.root;
  };
  # Every stub derivation a value refers to, by store path: what the image checks must stand in.
  stubs = {
    busybox = {
      path = toString pkgs.pkgsStatic.busybox;
      programs = pkgs.pkgsStatic.busybox.stubPrograms;
    };
    curl = {
      path = toString pkgs.pkgsStatic.curl;
      programs = pkgs.pkgsStatic.curl.stubPrograms;
    };
    caCertificates = {
      path = toString pkgs.dockerTools.caCertificates;
      files = pkgs.dockerTools.caCertificates.stubFiles;
    };
    toolkit = {
      path = toString p.toolkit;
      programs = [ "toolkit" ];
    };
    gitMinimal = {
      path = toString pkgs.gitMinimal;
      programs = pkgs.gitMinimal.stubPrograms;
    };
    gnumake = {
      path = toString pkgs.gnumake;
      programs = pkgs.gnumake.stubPrograms;
    };
  };
  # The runCommand builds of the image's contents, then of its bwrap root, in that order.
  imageSteps =
    img:
    map (d: {
      inherit (d) name script;
      out = toString d;
    }) (lib.filter (d: d ? script) img.image.contents ++ [ img.root ]);
  vm = c.vm-boxmaker.test;

  # A toolset as services.boxmaker.toolsets builds one (images/toolset.nix), of git and make:
  # what `check.py images` lays out in both forms, and the builds that make them, in order.
  toolset = pkgs.callPackage ../../images/toolset.nix {
    toolkit = p.toolkit;
    name = "c";
    packages = [
      pkgs.gitMinimal
      pkgs.gnumake
    ];
  };
  toolsetInfo = {
    inherit (toolset) imageName storePaths;
    root = toString toolset.root;
    env = {
      path = toString toolset.env;
      paths = map toString toolset.env.env.paths;
      inherit (toolset.env.env) pathsToLink;
    };
    image = {
      inherit (toolset.image.image) name extraCommands;
      contents = map toString toolset.image.image.contents;
    };
    closureRoots = map toString toolset.closure.rootPaths;
    steps = map (d: {
      inherit (d) name script;
      out = toString d;
    }) [
      toolset.busyboxBin
      toolset.bin
      toolset.root
    ];
  };

  # Each node of the VM test evaluated with the module against stubs of the NixOS options
  # (./nixos-stubs.nix): its systemd units' dependencies and ordering, which
  # `check.py vm-units` renders into a unit directory for `systemd-analyze verify`.
  nodeUnits =
    node:
    let
      config =
        (lib'.evalModules {
          modules = [
            (import ./nixos-stubs.nix { lib = lib'; })
            node
          ];
          specialArgs = { inherit pkgs; };
        }).config;
      deps = u: {
        inherit (u) unitConfig wantedBy;
        requires = u.requires or [ ];
        after = u.after or [ ];
        wants = u.wants or [ ];
        before = u.before or [ ];
      };
    in
    {
      services = lib.mapAttrs (_: s: deps s // { Type = s.serviceConfig.Type or "simple"; }) config.systemd.services;
      sockets = lib.mapAttrs (_: s: deps s // { inherit (s.socketConfig) ListenStream; }) config.systemd.sockets;
    };
in
{
  packages = {
    boxmaker = rust p.boxmaker;
    toolkit = rust p.toolkit;
    e2e = rust p.e2e;
    crateTests = rust c.crate-tests;
    toolsImage = image p.tools-image;
    toolsImageSteps = imageSteps p.tools-image;
    # The tools image's ID, from its archive (the flake's tools-image-id).
    toolsImageIdScript = p.tools-image-id.script;
    toolsImagePath = toString p.tools-image;
    toolset = toolsetInfo;
  };
  inherit stubs;
  vmTest = {
    inherit (vm) name globalTimeout testScript;
    meta = vm.meta or { };
    nodes = lib.attrNames vm.nodes;
    units = lib.mapAttrs (_: nodeUnits) vm.nodes;
  };
}
