#!/bin/busybox sh
# shellcheck shell=sh
# /init of the SoftiWARP lane's initramfs (copied there by run.sh; runs under busybox, not bash).
#
# Builds the guest's root file system and hands over to the per-run guest script:
#   - the host's / arrives read-only over 9p (mount tag "hostroot");
#   - a tmpfs overlay on top makes it writable and throw-away;
#   - the kernel's module tree (cached on the host, path in farm_modules=) is bound over
#     /lib/modules, because the host's own modules belong to a different kernel;
#   - the per-run share (mount tag "farmshare", read-write) goes to /farm-siw and holds
#     guest.sh, the tests and the results.
# Any failure powers the guest off at once: run.sh then reports "guest did not finish".

/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

die() {
    echo "initramfs: FATAL: $*"
    echo o > /proc/sysrq-trigger
    sleep 30
}

# Value of NAME=VALUE on the kernel command line.
param() {
    # shellcheck disable=SC2013  # words are what we want
    for word in $(cat /proc/cmdline); do
        case "$word" in "$1="*) echo "${word#*=}" ;; esac
    done
}

# Drivers for virtio-pci, 9p and overlayfs, in dependency order (written by run.sh).
while read -r mod; do
    insmod "/lib/modules/$mod" || die "insmod $mod failed"
done < /lib/modules/load-order

opts=trans=virtio,version=9p2000.L,msize=512000
mkdir -p /lower /rw /newroot
mount -t 9p -o "$opts,ro,cache=loose" hostroot /lower || die "cannot mount the host root over 9p"
mount -t tmpfs tmpfs /rw || die "cannot mount tmpfs"
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot \
    || die "cannot mount the overlay root"

modules=$(param farm_modules)
[ -n "$modules" ] || die "farm_modules= missing from the kernel command line"
mount --bind "/newroot$modules" /newroot/lib/modules || die "cannot bind $modules over /lib/modules"

mkdir -p /newroot/farm-siw
mount -t 9p -o "$opts" farmshare /newroot/farm-siw || die "cannot mount the run share"
[ -f /newroot/farm-siw/guest.sh ] || die "guest.sh missing from the run share"

mount --move /dev /newroot/dev
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
exec switch_root /newroot /bin/bash /farm-siw/guest.sh
