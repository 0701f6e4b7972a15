# boxmaker's Rust workspace as one buildRustPackage. Called three ways (flake.nix, and the
# defaults of nixos/module.nix):
#   pkgs.callPackage ./boxmaker.nix { }                        brokerd and boxctl, with the
#                                                              workspace's tests in its check
#                                                              phase (what the module installs;
#                                                              the flake's checks.crate-tests)
#   pkgs.pkgsStatic.callPackage ./boxmaker.nix { crates = [ "toolkit" ]; ... }
#                                                              the static musl toolkit
#   pkgs.pkgsStatic.callPackage ./boxmaker.nix { crates = [ "boxmaker-e2e" ]; ... }
{
  lib,
  stdenv,
  rustPlatform,
  buildPackages,
  installShellFiles,
  pname ? "boxmaker",
  # The workspace packages (cargo -p) whose binaries are built and installed.
  crates ? [
    "brokerd"
    "boxctl"
  ],
  # Run `cargo test --workspace` in the check phase, as nixpkgs expects of a package; what the
  # build sandbox cannot run is skipped by name (./check-skips.txt). `make nix-sandbox-check`
  # runs this phase here as Nix's sandbox would.
  runTests ? true,
  # Fail the build unless every installed binary is static (no INTERP, no NEEDED).
  requireStatic ? false,
}:
let
  root = ../..;
  workspace = lib.importTOML (root + "/Cargo.toml");
  fs = lib.fileset;
in
rustPlatform.buildRustPackage {
  inherit pname;
  version = workspace.workspace.package.version;

  # Only what cargo reads, so a change to docs or Nix files does not rebuild the binaries.
  src = fs.toSource {
    inherit root;
    fileset = fs.unions [
      (root + "/Cargo.toml")
      (root + "/Cargo.lock")
      (root + "/crates")
      (fs.maybeMissing (root + "/tests/e2e"))
    ];
  };
  cargoLock.lockFile = root + "/Cargo.lock";

  cargoBuildFlags = lib.concatMap (c: [
    "-p"
    c
  ]) crates;

  doCheck = runTests;
  # The tests are built in cargo's test profile, not the release profile the binaries are:
  # the workspace's release profile (Cargo.toml: lto = true, codegen-units = 1) would compile
  # every crate a second time with fat LTO for the test binaries. nixpkgs' cargoCheckHook
  # passes `--profile <checkType>` unless checkType is "debug".
  checkType = "debug";
  cargoTestFlags = [ "--workspace" ];
  checkFlags = map (name: "--skip=${name}") (
    lib.filter (line: line != "" && !lib.hasPrefix "#" line) (
      lib.splitString "\n" (builtins.readFile ./check-skips.txt)
    )
  );

  nativeBuildInputs = [ installShellFiles ];

  # brokerd's and boxctl's shell completions and man pages, printed by the programs themselves
  # (where the build can run what it built). Then, for static builds, the same check as
  # `make static-check` (scripts/static-check.sh) on what is installed.
  postInstall =
    lib.optionalString (stdenv.buildPlatform.canExecute stdenv.hostPlatform) (
      lib.concatMapStrings (
        prog:
        lib.optionalString (lib.elem prog crates) ''
          installShellCompletion --cmd ${prog} \
            --bash <($out/bin/${prog} completions bash) \
            --fish <($out/bin/${prog} completions fish) \
            --zsh <($out/bin/${prog} completions zsh)
          $out/bin/${prog} man > ${prog}.1
          installManPage ${prog}.1
        ''
      ) [ "brokerd" "boxctl" ]
    )
    + lib.optionalString requireStatic ''
      for bin in $out/bin/*; do
        PATH=${buildPackages.binutils-unwrapped}/bin:$PATH bash ${root + "/scripts/static-check.sh"} "$bin"
      done
    '';

  # No homepage: boxmaker has no public address to name, and a made-up one would mislead.
  # No maintainers: nixpkgs' maintainer list names the maintainers of nixpkgs' own packages,
  # and this one is built from this repository's flake (nixos/README.md, "Package metadata").
  meta = {
    description = "boxmaker: ${lib.concatStringsSep ", " crates}";
    maintainers = [ ];
    license = with lib.licenses; [
      mit
      asl20
    ];
    platforms = lib.platforms.linux;
    mainProgram = lib.head crates;
  };
}
