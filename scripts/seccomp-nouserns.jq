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
#
# No setuid or setgid bit: the calls that set a mode (chmod, fchmod, fchmodat, fchmodat2, and
# open, openat, creat, mknod and mknodat with a creation mode) leave the default profile's
# unconditional allow list, then are allowed when their mode argument has neither bit and refused
# with EPERM when it has one, as the bwrap backend's filter does. Otherwise a sandbox of a grant
# it may write could leave a setuid program of the service user in the owner's directory, and any
# local user who runs it would act as the service user (its state, its owner socket). A call
# without a creation mode passes 0 there (the C libraries do), so it is allowed.

def clone_newuser: 268435456; # 0x10000000
def gated: ["clone", "clone3", "unshare"];
# [name, index of the mode argument] (the same on every architecture).
def mode_setting: [["chmod", 1], ["fchmod", 1], ["fchmodat", 2], ["fchmodat2", 2], ["open", 2],
    ["openat", 3], ["creat", 1], ["mknod", 1], ["mknodat", 2]];
def setuid: 2048; # 04000
def setgid: 1024; # 02000
def mode_rules($name; $index): [
    {
        names: [$name],
        action: "SCMP_ACT_ALLOW",
        args: [{index: $index, value: (setuid + setgid), valueTwo: 0, op: "SCMP_CMP_MASKED_EQ"}],
        comment: "\($name) with a mode without setuid and setgid"
    },
    (setuid, setgid) as $bit | {
        names: [$name],
        action: "SCMP_ACT_ERRNO",
        errnoRet: 1,
        args: [{index: $index, value: $bit, valueTwo: $bit, op: "SCMP_CMP_MASKED_EQ"}],
        comment: "\($name) with a setuid or setgid bit: EPERM"
    }
];
# The mode-setting calls the default allows without a condition of any kind.
def plainly_allowed: [.syscalls[] | select(.action == "SCMP_ACT_ALLOW" and (.args // [] | length) == 0
    and (.includes // {} | length) == 0 and (.excludes // {} | length) == 0) | .names[]];
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
| plainly_allowed as $plain
| [mode_setting[] | select(.[0] as $n | $plain | index($n) != null)] as $moded
| [$moded[] | .[0]] as $moded_names
| .syscalls |= map(
    if .action == "SCMP_ACT_ALLOW" then .names -= gated else . end
    | if .action == "SCMP_ACT_ALLOW" and (.args // [] | length) == 0
        and (.includes // {} | length) == 0 and (.excludes // {} | length) == 0
      then .names -= $moded_names else . end
    | select(.names | length > 0))
| .syscalls += [$moded[] | mode_rules(.[0]; .[1])[]]
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
