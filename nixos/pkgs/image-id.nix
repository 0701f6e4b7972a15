# The image ID Podman will give `image` once loaded (sha256:<64 hex>), computed at build time by
# image-id.sh, in a file named image-id. The module pins [runner] image to it and checks the
# loaded image against it before brokerd starts.
{
  runCommand,
  jq,
  image,
}:
runCommand "boxmaker-tools-image-id"
  {
    nativeBuildInputs = [ jq ];
  }
  ''
    mkdir -p $out
    bash ${./image-id.sh} ${image} > $out/image-id
    cat $out/image-id
  ''
