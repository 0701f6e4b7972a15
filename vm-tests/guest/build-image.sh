#!/usr/bin/env bash
# The guest's root file system as a raw ext4 image: Debian 12 by debootstrap, with systemd as
# PID 1, rootless Podman on cgroup v2 (overlay storage), the service user `boxmaker` with its
# subordinate IDs and lingering, a client user `loopd`, the host's kernel modules, and the
# oneshot unit that runs /opt/boxmaker-guest/in-guest.sh from the per-run payload disk and
# powers off. Nothing of this build (binaries, units, config, checks) is in here: run.sh puts
# those on a second disk each run, so this image can be cached by the inputs that made it.
#
#   build-image.sh KERNEL_VERSION MIRROR OUT.img [DEB_CACHE_DIR]
#
# run.sh hashes this file (the package list is below), the kernel and the mirror into the cache
# key: any change here makes a new image.
set -euo pipefail

kver=$1
mirror=$2
out=$3
debs=${4:-}

# What the guest needs. containernetworking-plugins: without it (or netavark) podman's
# dependencies do not configure. curl, ca-certificates and binutils (readelf) are what
# images/build-tools-image.sh needs to make the tools image inside the guest; jq reads
# brokerd's answers; bubblewrap is for the scenario suite's bwrap half (tests/e2e/run.sh).
PACKAGES=bubblewrap,systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,podman,containernetworking-plugins,crun,uidmap,slirp4netns,passt,iproute2,busybox-static,fuse-overlayfs,kmod,udev,procps,catatonit,iptables,curl,ca-certificates,binutils,jq,e2fsprogs
SUITE=bookworm
IMAGE_SIZE=4G
SERVICE_USER=boxmaker
SERVICE_HOME=/var/lib/boxmaker
CLIENT_USER=loopd
SUBID_START=100000
SUBID_COUNT=65536
PAYLOAD_LABEL=bxpayload
PAYLOAD_MOUNT=/opt/boxmaker-guest

say() { printf 'guest-image: %s\n' "$*" >&2; }

[ -d "/lib/modules/$kver" ] || { say "/lib/modules/$kver is missing"; exit 1; }

root=$(mktemp -d "${out%/*}/.rootfs.XXXXXX")
trap 'rm -rf --one-file-system "$root"' EXIT

say "debootstrap $SUITE from $mirror"
opts=(--variant=minbase "--include=$PACKAGES")
if [ -n "$debs" ]; then
    mkdir -p "$debs"
    opts+=("--cache-dir=$debs")
fi
if ! debootstrap "${opts[@]}" "$SUITE" "$root" "$mirror" >"$root.debootstrap.log" 2>&1; then
    tail -n 30 "$root.debootstrap.log" >&2
    rm -f "$root.debootstrap.log"
    say "debootstrap failed"
    exit 1
fi
rm -f "$root.debootstrap.log"
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*_Packages

say "kernel modules $kver"
mkdir -p "$root/lib/modules"
cp -a "/lib/modules/$kver" "$root/lib/modules/"
depmod -b "$root" "$kver"

echo boxmaker-guest >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 boxmaker-guest\n::1 localhost\n' >"$root/etc/hosts"
cat >"$root/etc/fstab" <<EOF
LABEL=root / ext4 rw,errors=remount-ro 0 1
LABEL=$PAYLOAD_LABEL $PAYLOAD_MOUNT ext4 rw,nofail,x-systemd.device-timeout=60s 0 2
EOF
mkdir -p "$root$PAYLOAD_MOUNT"

# Podman's overlay driver, never the slow vfs fallback.
echo overlay >"$root/etc/modules-load.d/overlay.conf"
mkdir -p "$root/etc/containers"
cat >"$root/etc/containers/storage.conf" <<'EOF'
[storage]
driver = "overlay"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
EOF

# Nothing that waits on a terminal or wakes up for maintenance during a test.
for unit in serial-getty@ttyS0.service getty@tty1.service apt-daily.timer \
    apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer \
    systemd-timesyncd.service podman-auto-update.timer podman-restart.service; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
done

# The service user for rootless Podman, as scripts/setup.sh makes it on a Debian host.
chroot "$root" useradd --system --user-group --home-dir "$SERVICE_HOME" --create-home \
    --shell /usr/sbin/nologin --comment "boxmaker broker" "$SERVICE_USER"
echo "$SERVICE_USER:$SUBID_START:$SUBID_COUNT" >>"$root/etc/subuid"
echo "$SERVICE_USER:$SUBID_START:$SUBID_COUNT" >>"$root/etc/subgid"
install -d -m 0755 "$root/var/lib/systemd/linger"
: >"$root/var/lib/systemd/linger/$SERVICE_USER"
chroot "$root" install -d -o "$SERVICE_USER" -g "$SERVICE_USER" -m 0700 \
    "$SERVICE_HOME/run" "$SERVICE_HOME/run/egress" "$SERVICE_HOME/.config" \
    "$SERVICE_HOME/.config/containers"
printf '[storage]\ndriver = "overlay"\n' >"$root$SERVICE_HOME/.config/containers/storage.conf"
chroot "$root" chown "$SERVICE_USER:$SERVICE_USER" "$SERVICE_HOME/.config/containers/storage.conf"

# The client that talks to brokerd (loopd's stand-in), not allowed anything else.
chroot "$root" useradd --create-home --shell /bin/bash "$CLIENT_USER"

# The checks: run from the payload disk once the system is up, then power off either way.
cat >"$root/etc/systemd/system/boxmaker-guest-test.service" <<EOF
[Unit]
Description=boxmaker guest checks (from the payload disk)
After=multi-user.target
RequiresMountsFor=$PAYLOAD_MOUNT

[Service]
Type=oneshot
ExecStart=/bin/bash $PAYLOAD_MOUNT/in-guest.sh
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TTYReset=no
TimeoutStartSec=3600
SuccessAction=poweroff
FailureAction=poweroff

[Install]
WantedBy=multi-user.target
EOF
chroot "$root" systemctl enable boxmaker-guest-test.service >/dev/null 2>&1
# No root password, no login: the guest is driven only by the unit above.
chroot "$root" passwd -l root >/dev/null

say "ext4 image $IMAGE_SIZE"
rm -f "$out"
truncate -s "$IMAGE_SIZE" "$out"
mkfs.ext4 -q -F -L root -d "$root" "$out"
say "done: $(du -h "$out" | cut -f1) used of $IMAGE_SIZE"
