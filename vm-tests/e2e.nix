# The one place that says how the NixOS VM tests drive the end-to-end scenario suite
# (tests/e2e, the static binary `boxmaker-e2e`): the same suite CI runs on Debian, through the
# same script, tests/e2e/in-netns.sh, which tests/e2e/run.sh calls after its builds. It makes a
# network namespace holding the suite's own hosts (192.0.2.1 ok.test, 192.0.2.2 other.test,
# 192.0.2.53 the nameserver, 100.100.100.100 the fake tailnet host; no route out), runs
# `boxmaker-e2e serve` in it and `boxmaker-e2e run` once per backend, each starting its own
# brokerd as the service user. If the suite's command line changes, change it here only.
#
# What comes from Nix here rather than from run.sh's builds: the test CA (made at build time by
# `boxmaker-e2e ca`, so its files are what `serve --ca` reads), the test variant of the tools
# image (the CA in its bundle) with its image ID, and the same files as a plain tree for the
# bwrap backend.
{
  lib,
  runCommand,
  callPackage,
  # flake.nix's packages.<system>.e2e and .toolkit.
  e2e,
  toolkit,
}:
rec {
  # ca.pem (the image trusts it) and ca-key.pem (serve signs its leaf certificates with it).
  testCa = runCommand "boxmaker-e2e-test-ca" { } ''
    ${e2e}/bin/boxmaker-e2e ca --out $out >/dev/null
    test -s $out/ca.pem && test -s $out/ca-key.pem
  '';

  # The tools image the suite needs: the same expression, with the test CA in its bundle.
  testImage = callPackage ../images/tools-image.nix {
    inherit toolkit;
    extraCaCerts = [ "${testCa}/ca.pem" ];
  };
  # $out/image-id: sha256:<64 hex>, what the module pins and what `run --image` names.
  testImageId = callPackage ../nixos/pkgs/image-id.nix { image = testImage; };
  # The bwrap backend's tools root ([bwrap] tools_root): the test image's files as a tree.
  toolsRoot = testImage.root;

  # in-netns.sh, what it calls beside it (hosts-net.sh, the test hosts' layout, which the VM
  # test's own test hosts use too; pasta-layout.sh, which proves that layout against the VM's
  # pasta) and scripts/as-boxmaker, at their paths relative to each other, as in the
  # repository. `make nix-check` fails if a script here calls one this list lacks.
  driver = lib.fileset.toSource {
    root = ../.;
    fileset = lib.fileset.unions [
      ../tests/e2e/in-netns.sh
      ../tests/e2e/suite-tally.sh
      ../tests/e2e/hosts-net.sh
      ../tests/e2e/pasta-layout.sh
      ../scripts/as-boxmaker
    ];
  };

  # How many scenarios a full run has on each backend: the entries of the table in
  # tests/e2e/src/scenarios.rs, a `match backend` entry once (each backend runs one of its
  # arms; the suite's own test checks this count against the table). A run that passed fewer
  # ran less than the suite.
  scenarioCount =
    let
      source = builtins.readFile ../tests/e2e/src/scenarios.rs;
      table = lib.head (lib.splitString "];" (lib.elemAt (lib.splitString "let scenarios" source) 1));
      count = marker: lib.length (lib.splitString marker table) - 1;
    in
    count "Suite::" - count "Backend::Bwrap =>";

  # A shell command (run as root on a host with the service user `boxmaker`, its Podman and
  # bwrap) that runs the suite on `backends` against `brokerd`; it prints the scenario lines,
  # `<backend>: N passed, M failed` per backend and the total last, and fails if one failed.
  # `work` must not exist; `runArgs` go to every `boxmaker-e2e run` (e.g. --enforce-limits true).
  run =
    {
      brokerd,
      backends,
      work,
      runArgs ? [ ],
    }:
    lib.escapeShellArgs (
      [
        "bash"
        "${driver}/tests/e2e/in-netns.sh"
        "--e2e"
        "${e2e}/bin/boxmaker-e2e"
        "--brokerd"
        brokerd
        "--ca"
        "${testCa}"
        "--work"
        work
        "--tools-root"
        "${toolsRoot}"
        "--backends"
        (lib.concatStringsSep " " backends)
      ]
    )
    # The image ID is known only once testImageId is built: read at run time.
    + " --image \"$(cat ${testImageId}/image-id)\" -- "
    + lib.escapeShellArgs runArgs;
}
