# The types of services.boxmaker's settings and of each grant (services.boxmaker.grants.<name>),
# called by ./module.nix, which declares the options of those types: brokerd's tables
# ([broker], [runner], [bwrap], [grants.NAME], [toolsets.NAME]) with the defaults brokerd takes,
# written as brokerd reads them (docs/design.md#config).
{
  lib,
  config,
  # config.services.boxmaker
  cfg,
  tomlFormat,
  # The tools and the modes a grant may name.
  toolNames,
  modes,
  # Written into the config where the image ID goes when it is computed at build time.
  imageIdPlaceholder,
}:
let
  inherit (lib)
    mkOption
    types
    literalExpression
    literalMD
    ;
in
{
  grantType = types.submodule {
    options = {
      mode = mkOption {
        type = types.enum modes;
        default = "safe";
        description = "safe (reading only), ask (mutations ask first) or auto.";
      };
      tools = mkOption {
        type = types.nonEmptyListOf (types.enum toolNames);
        description = "The tools this grant offers.";
      };
      paths = mkOption {
        type = types.listOf (
          types.submodule {
            options = {
              path = mkOption {
                type = types.str;
                description = "An absolute directory, readable by the service user.";
              };
              write = mkOption {
                type = types.bool;
                default = false;
                description = "Mounted read-write (the service user must be able to write it).";
              };
            };
          }
        );
        default = [ ];
        description = "The directories the sandbox sees, each read-only unless write = true.";
      };
      hosts = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [
          "docs.example.org"
          "*.example.net"
        ];
        description = "Host patterns http_fetch may reach (port 443, public addresses).";
      };
      shellHosts = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [
          "crates.io"
          "static.crates.io"
          "index.crates.io"
        ];
        description = ''
          Host patterns a shell call reaches through an egress proxy of its own (port 443,
          public addresses, by HTTPS_PROXY and the other standard variables); empty: a shell
          call has no network. A granted host is trusted with whatever the model sends it.
        '';
      };
      allowAddresses = mkOption {
        type = types.listOf types.str;
        default = [ ];
        description = ''
          Address ranges http_fetch, and a shell call with shellHosts, may reach although not
          public (never loopback, link-local, 100.64.0.0/10, 0.0.0.0/8 or multicast).
        '';
      };
      toolset = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "c";
        description = ''
          The toolset this grant's sandboxes run: a toolset of services.boxmaker.toolsets (or
          one pinned by hand in settings.toolsets); null (or "base"): the base toolset, the
          tools image.
        '';
      };
      cache = mkOption {
        type = types.bool;
        default = false;
        description = ''
          A persistent writable cache of this grant's own (XDG_CACHE_HOME and the common tool
          caches in its shell sandboxes), under the service user's home; removed by
          `boxctl gc --caches`.
        '';
      };
      maxCacheBytes = mkOption {
        type = types.nullOr (types.ints.between 1048576 9223372036854775807);
        default = null;
        example = 4294967296;
        description = "The cache's bound in bytes (null: 1 GiB); a cache found past it is emptied. Needs cache.";
      };
      writes = mkOption {
        type = types.enum [
          "direct"
          "staged"
        ];
        default = "direct";
        description = ''
          "staged": every write of a session lands in a layer of that session and reaches the
          directory only when an owner commits it (settings.broker.owners, `boxctl commit`);
          "direct": writes land at once.
        '';
      };
      approvals = mkOption {
        type = types.enum [
          "client"
          "owner"
        ];
        default = "client";
        description = ''
          Who approves an ask: the client re-sending the call with its ticket, or "owner": an
          owner (`boxctl approve TICKET`) first, so an agent loop cannot approve its own calls.
        '';
      };
      protect = mkOption {
        type = types.enum [
          "mount"
          "classifier"
        ];
        default = "mount";
        description = ''
          How generated, vendored and third-party files in writable directories are held:
          "mount" binds them read-only in every writable sandbox (found by a bounded walk,
          settings.runner.protect_max_*); "classifier" leaves them to the command classifier's
          refusals alone.
        '';
      };
    };
  };

  settingsType = types.submodule (settings: {
    freeformType = tomlFormat.type;
    options = {
      broker = mkOption {
        default = { };
        description = "The [broker] table.";
        type = types.submodule {
          freeformType = tomlFormat.type;
          options = {
            clients = mkOption {
              type = types.listOf (types.either types.str types.ints.unsigned);
              default = [ "@${cfg.clientGroup}" ];
              defaultText = literalExpression ''[ "@''${config.services.boxmaker.clientGroup}" ]'';
              description = "Who is served: user names, uids, or \"@group\". Root is not implied.";
            };
            owners = mkOption {
              type = types.listOf (types.either types.str types.ints.unsigned);
              default = [ ];
              example = [ "alice" ];
              description = ''
                Who may commit, discard and approve (staged grants, approvals = "owner"): user
                names, uids, or "@group". Root is not implied; an empty list leaves it to the
                service user, on its own socket (<home>/owner.sock).
              '';
            };
            audit_log = mkOption {
              type = types.str;
              default = "${cfg.home}/audit.jsonl";
              defaultText = literalExpression ''"''${config.services.boxmaker.home}/audit.jsonl"'';
              description = "The audit log (JSON lines, hash-chained).";
            };
            timeout_ms = mkOption {
              type = types.ints.positive;
              default = 120000;
              description = "The agent loop's broker timeout; every tool limit must stay under it.";
            };
            shutdown_grace_s = mkOption {
              type = types.ints.unsigned;
              default = 30;
              description = "How long calls in flight may finish on stop; TimeoutStopSec follows it.";
            };
          };
        };
      };
      runner = mkOption {
        default = { };
        description = "The [runner] table.";
        type = types.submodule (runner: {
          freeformType = tomlFormat.type;
          options = {
            backend = mkOption {
              type = types.enum [
                "podman"
                "bwrap"
              ];
              default = "podman";
              description = ''
                The sandbox backend: rootless Podman, or bubblewrap over the tools image's file
                tree (services.boxmaker.bwrap), which needs no Podman, subordinate IDs or image
                loading.
              '';
            };
            image = mkOption {
              type = types.nullOr types.str;
              default =
                if runner.config.backend == "bwrap" then
                  null
                else if cfg.toolsImageId != null then
                  cfg.toolsImageId
                else
                  imageIdPlaceholder;
              defaultText = literalMD "the image ID of `services.boxmaker.toolsImage`, computed at build time; `null` (left out) with the bwrap backend";
              description = "The tools image by its image ID. Podman only, and only the ID of toolsImage (the image the module loads): leave it unset and set toolsImageId to pin the ID yourself.";
            };
            podman = mkOption {
              type = types.nullOr types.str;
              default =
                if runner.config.backend == "bwrap" then null else lib.getExe config.virtualisation.podman.package;
              defaultText = literalMD "`lib.getExe config.virtualisation.podman.package`; `null` (left out) with the bwrap backend";
              description = "The podman program. Podman only; null leaves the key out.";
            };
            home = mkOption {
              type = types.str;
              default = cfg.home;
              defaultText = literalExpression "config.services.boxmaker.home";
              description = "The service user's home; egress directories live under <home>/run/egress/.";
            };
            read_file_ms = mkOption {
              type = types.ints.positive;
              default = 30000;
              description = "read_file's time limit.";
            };
            write_file_ms = mkOption {
              type = types.ints.positive;
              default = 30000;
              description = "write_file's time limit.";
            };
            shell_ms = mkOption {
              type = types.ints.positive;
              default = 100000;
              description = "shell's time limit.";
            };
            http_fetch_ms = mkOption {
              type = types.ints.positive;
              default = 60000;
              description = "http_fetch's time limit.";
            };
            egress_start_ms = mkOption {
              type = types.ints.positive;
              default = 5000;
              description = "How long brokerd waits for the egress proxy's socket.";
            };
            egress_network = mkOption {
              type = types.nullOr (
                types.enum [
                  "pasta"
                  "slirp4netns"
                ]
              );
              default = if runner.config.backend == "bwrap" then null else "pasta";
              defaultText = literalMD ''`"pasta"`; `null` (left out) with the bwrap backend'';
              description = "The egress proxy container's network. NixOS's Podman has pasta; slirp4netns only where it is installed for Podman. Podman only.";
            };
          };
        });
      };
      bwrap = mkOption {
        type = types.nullOr (
          types.submodule {
            options = {
              tools_root = mkOption {
                type = types.nullOr types.str;
                # toString: a package keeps its context (the tree is built and kept), a
                # path is the host's directory as written, not copied into the store.
                default = if cfg.bwrap.toolsRoot == null then null else toString cfg.bwrap.toolsRoot;
                defaultText = literalExpression "config.services.boxmaker.bwrap.toolsRoot";
                description = "The tools root mounted read-only as the sandbox's /.";
              };
              cgroup = mkOption {
                type = types.enum [
                  "delegated"
                  "systemd-scope"
                ];
                default = cfg.bwrap.cgroup;
                defaultText = literalExpression "config.services.boxmaker.bwrap.cgroup";
                description = "How sandboxes get their cgroup limits.";
              };
            };
          }
        );
        default = if settings.config.runner.backend == "bwrap" then { } else null;
        defaultText = literalMD "from `services.boxmaker.bwrap` when `runner.backend = \"bwrap\"`, else `null` (no `[bwrap]` table)";
        description = ''
          The [bwrap] table, written only with runner.backend = "bwrap" (brokerd refuses it
          otherwise). Set it through services.boxmaker.bwrap.
        '';
      };
      grants = mkOption {
        type = types.attrsOf tomlFormat.type;
        default = { };
        description = "[grants.NAME] tables as brokerd reads them; see also services.boxmaker.grants.";
      };
      toolsets = mkOption {
        type = types.attrsOf tomlFormat.type;
        default = { };
        description = ''
          [toolsets.NAME] tables as brokerd reads them: the toolsets of services.boxmaker.toolsets
          (built here), and any pinned by hand (an image ID or a tree built elsewhere).
        '';
      };
    };
  });
}
