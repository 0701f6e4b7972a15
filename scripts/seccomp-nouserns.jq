# The service user's Podman seccomp profile: Podman's default profile (containers' JSON format)
# with nested user namespaces denied. A user namespace made inside a sandbox gives its processes
# every capability over the namespaces it then makes, the usual first step of a kernel exploit;
# the bwrap backend refuses them too.
#
#   jq -f scripts/seccomp-nouserns.jq /usr/share/containers/seccomp.json >seccomp-nouserns.json
#
# Used by scripts/setup.sh (Debian) and nixos/module.nix (from Podman's own default), so both
# hosts derive the same profile from the default their Podman would otherwise apply.
#
# What changes: clone, clone3 and unshare leave every rule that allows them, whatever its
# conditions. Then clone and unshare are allowed when their flags lack CLONE_NEWUSER and refused
# with EPERM when they have it; seccomp reads clone's flags from its first argument (the second
# on s390). clone3 takes its flags in a structure seccomp cannot read, so it answers ENOSYS, as
# for a kernel without it: the C libraries then fall back to clone. Everything else of the
# default profile stays as it is.
#
# setns stays allowed: entering a user namespace needs CAP_SYS_ADMIN in it, and the only ones
# a sandbox can name are its own and its ancestors, which the kernel does not let it enter; with
# no nested namespace there is none to join.

def clone_newuser: 268435456; # 0x10000000
def gated: ["clone", "clone3", "unshare"];
def s390: {arches: ["s390", "s390x"]};
def flags($index; $has_newuser): {
    index: $index,
    value: clone_newuser,
    valueTwo: (if $has_newuser then clone_newuser else 0 end),
    op: "SCMP_CMP_MASKED_EQ"
};
def allow($name; $index): {
    names: [$name],
    action: "SCMP_ACT_ALLOW",
    args: [flags($index; false)],
    comment: "\($name) without CLONE_NEWUSER"
};
def refuse($name; $index): {
    names: [$name],
    action: "SCMP_ACT_ERRNO",
    errnoRet: 1,
    args: [flags($index; true)],
    comment: "\($name) with CLONE_NEWUSER: EPERM, no nested user namespace"
};

if (.syscalls | type) != "array" or
    ([.syscalls[] | select(.action == "SCMP_ACT_ALLOW") | .names[]] | index("clone")) == null then
    error("this is not a seccomp profile that allows clone: expected Podman's default profile")
else
    .
end
| .syscalls |= map(if .action == "SCMP_ACT_ALLOW" then .names -= gated else . end
    | select(.names | length > 0))
| .syscalls += [
    allow("clone"; 0) + {excludes: s390},
    allow("clone"; 1) + {includes: s390},
    allow("unshare"; 0),
    refuse("clone"; 0) + {excludes: s390},
    refuse("clone"; 1) + {includes: s390},
    refuse("unshare"; 0),
    {
        names: ["clone3"],
        action: "SCMP_ACT_ERRNO",
        errnoRet: 38,
        comment: "clone3's flags are out of seccomp's reach: ENOSYS, so the C library falls back to clone"
    }
]
