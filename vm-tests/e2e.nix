# The one place that says how the NixOS VM tests drive the end-to-end scenario suite
# (tests/e2e, the static binary `boxmaker-e2e`): the same suite CI runs on Debian and in the
# QEMU guest, not a copy of it. If the suite's command line changes, change it here only.
#
# What this file assumes of boxmaker-e2e (to agree with tests/e2e):
#   boxmaker-e2e serve --listen ADDR --tailnet ADDR --ca-cert PEM --ca-key PEM
#       serves the suite's zone over DNS (ADDR:53) and HTTPS (ADDR:443, and a host on the
#       tailnet address), with leaf certificates signed by the given CA
#   boxmaker-e2e run --socket PATH --grant NAME --web ADDR --tailnet ADDR --rw DIR --ro DIR
#       runs every scenario against a brokerd that is already serving PATH, with the grant
#       below; exits non-zero when one fails
{
  runCommand,
  openssl,
  e2e,
}:
rec {
  # A CA made at build time: the web node signs with it and the test image trusts it.
  testCa = runCommand "boxmaker-e2e-test-ca" { nativeBuildInputs = [ openssl ]; } ''
    mkdir -p $out
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -keyout $out/ca.key -out $out/ca.pem -days 3650 \
      -subj '/CN=boxmaker end-to-end test CA' \
      -addext 'basicConstraints=critical,CA:TRUE' \
      -addext 'keyUsage=critical,keyCertSign,cRLSign'
  '';

  tailnet = "100.100.100.100";
  grantName = "e2e";
  rwDir = "/srv/e2e/rw";
  roDir = "/srv/e2e/ro";

  # The grant the suite runs under (services.boxmaker.grants.<grantName>).
  grant = webNet: {
    mode = "auto";
    tools = [
      "read_file"
      "write_file"
      "shell"
      "http_fetch"
    ];
    paths = [
      {
        path = rwDir;
        write = true;
      }
      { path = roDir; }
    ];
    hosts = [ "*.test" ];
    # The test network is private; the tailnet stays refused whatever this says.
    allowAddresses = [ webNet ];
  };

  serve =
    { listen }:
    "${e2e}/bin/boxmaker-e2e serve --listen ${listen} --tailnet ${tailnet} --ca-cert ${testCa}/ca.pem --ca-key ${testCa}/ca.key";

  run =
    { socket, web }:
    "${e2e}/bin/boxmaker-e2e run --socket ${socket} --grant ${grantName} --web ${web} --tailnet ${tailnet} --rw ${rwDir} --ro ${roDir}";
}
