# The image ID Podman will give `image` once loaded (sha256:<64 hex>), computed at build time by
# image-id.sh, in a file named image-id. The module pins [runner] image to it (and a toolset's
# [toolsets.NAME] image to its image's) and checks the loaded image against it before brokerd
# starts. `image` is a docker-archive (buildLayeredImage), or with `stream = true` a script that
# writes one (streamLayeredImage), which is run here for it. Said, not guessed: nixpkgs'
# buildLayeredImage passes on its stream's passthru, isExe = true among it.
{
  lib,
  runCommand,
  jq,
  image,
  stream ? false,
  name ? "boxmaker-tools-image-id",
}:
runCommand name
  {
    nativeBuildInputs = [ jq ];
  }
  ''
    mkdir -p $out
    bash ${./image-id.sh} ${lib.optionalString stream "--stream "}${image} > $out/image-id
    cat $out/image-id
  ''
