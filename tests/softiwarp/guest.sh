#!/bin/bash
# Runs inside the QEMU guest as PID 1 (started by init.sh), once per run of run.sh.
#
# Sets up a software RDMA device on a dummy interface, runs every test in the run share, records
# each exit code, and powers the guest off. Talks to the host only through files in the share:
#   /farm-siw/config.sh        settings written by run.sh (sourced below)
#   /farm-siw/tests/NNN.name   test name           /farm-siw/tests/NNN.cmd   its bash command line
#   /farm-siw/results/setup.log, setup.rc           RDMA set-up output and status
#   /farm-siw/results/NNN.log, NNN.rc, NNN.secs     test output, exit code, wall time
#   /farm-siw/results/done                          written after the last test
# An .rc file appears only once its test is over (written then renamed), so the host can stream.
#
# Traffic stays inside the guest: QEMU gives it no network card, and the only addresses used are
# loopback and the dummy interface's own address.

set -uo pipefail   # no -e: whatever happens, we must reach the power-off below

SHARE=/farm-siw
RESULTS=$SHARE/results

power_off() {
    sync
    echo o > /proc/sysrq-trigger
    sleep 30
}
trap power_off EXIT

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
uptime_s() { cut -d' ' -f1 /proc/uptime; }
say() { echo "guest[$(uptime_s)s]: $*"; }

# shellcheck source=/dev/null
source "$SHARE/config.sh"   # FARM_ROOT FARM_DRIVER FARM_ADDR FARM_PREFIX FARM_TEST_TIMEOUT FARM_BAZEL_BIN

mkdir -p /dev/shm /dev/pts /tmp
mount -t tmpfs tmpfs /dev/shm
mount -t devpts devpts /dev/pts
# devtmpfs lacks the links udev would make; bash process substitution needs /dev/fd.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
ulimit -l unlimited   # verbs memory registration pins pages
ulimit -n 65536
dmesg -n 1            # keep kernel chatter off the console
say "up; driver=$FARM_DRIVER address=$FARM_ADDR/$FARM_PREFIX"

# --- RDMA set-up -------------------------------------------------------------------------------
# siw/rxe cannot use lo, so the device sits on a dummy interface that owns the test address.
case "$FARM_DRIVER" in
    siw) KMOD=siw RDMA_DEV=siw0 ;;
    rxe) KMOD=rdma_rxe RDMA_DEV=rxe0
        # rxe caps a CQ at 32767 entries; ofi_rxm sizes its MSG CQ as queue sizes x universe size
        # (default 256), which is over that, so fi_enable fails with EINVAL. A smaller universe fits.
        export FI_UNIVERSE_SIZE=${FI_UNIVERSE_SIZE:-32} ;;
    *) say "unknown driver '$FARM_DRIVER'"; echo 2 > "$RESULTS/setup.rc"; exit 1 ;;
esac
NETDEV=dummy0

setup_rdma() {
    set -e
    ip link set lo up
    modprobe dummy
    ip link add "$NETDEV" type dummy
    ip addr add "$FARM_ADDR/$FARM_PREFIX" dev "$NETDEV"
    ip link set "$NETDEV" up
    modprobe "$KMOD"
    modprobe rdma_ucm   # rdma_cm for user space: libfabric's verbs provider connects through it
    rdma link add "$RDMA_DEV" type "$FARM_DRIVER" netdev "$NETDEV"
    # The device shows up asynchronously; wait (bounded) for its verbs node and an active port.
    for _ in $(seq 50); do
        if [ -e /dev/infiniband/rdma_cm ] && ls /dev/infiniband/uverbs* >/dev/null 2>&1 &&
            rdma link show "$RDMA_DEV/1" 2>/dev/null | grep -q 'state ACTIVE'; then
            break
        fi
        sleep 0.2
    done
    rdma link show
    ibv_devices
    rdma link show "$RDMA_DEV/1" | grep -q 'state ACTIVE'
    ls -l /dev/infiniband
    if [ -n "${FARM_BAZEL_BIN:-}" ] && [ ! -d "$FARM_BAZEL_BIN" ]; then
        echo "warning: bazel-bin ($FARM_BAZEL_BIN) is not visible in the guest"
    fi
}

( setup_rdma ) > "$RESULTS/setup.log" 2>&1
rc=$?
echo "$rc" > "$RESULTS/setup.rc"
if [ "$rc" -ne 0 ]; then
    say "RDMA set-up FAILED (rc=$rc):"
    cat "$RESULTS/setup.log"
    exit 1
fi
say "RDMA device $RDMA_DEV on $NETDEV is active"

# Stacks of every thread of every process a test left running (its process group, without the
# shells and timeout around it), appended to the test's log: a hang shows where it waits.
dump_stacks() {
    local group=$1 p comm
    for p in $(pgrep -g "$group"); do
        comm=$(cat "/proc/$p/comm" 2>/dev/null) || continue
        case $comm in timeout | bash | sleep) continue ;; esac
        echo "softiwarp: stacks of $comm (pid $p):"
        timeout 120 gdb -batch -nx -p "$p" -ex "set pagination off" -ex "thread apply all bt" \
            2>&1 | grep -v '^\[New LWP\|^warning: '
    done
}
# The dump comes this long before the time limit (gdb in a TCG guest takes a while).
DUMP_LEAD=$(( FARM_TEST_TIMEOUT >= 240 ? 120 : FARM_TEST_TIMEOUT / 2 ))

# --- tests -------------------------------------------------------------------------------------
for cmd_file in "$SHARE"/tests/*.cmd; do
    [ -e "$cmd_file" ] || continue
    id=$(basename "$cmd_file" .cmd)
    name=$(cat "$SHARE/tests/$id.name")
    tmp=/tmp/farm-test/$id
    mkdir -p "$tmp"
    say "start $name"
    start=$(date +%s.%N)
    # GNU timeout makes itself a process-group leader, so after the test we can kill whatever it
    # left behind (a server of a pair that never got its client, say) with one group kill.
    (
        cd "$FARM_ROOT" &&
            exec env FARM_TEST_PROVIDERS=verbs FARM_TEST_HOST="$FARM_ADDR" \
                FARM_TEST_DRIVER="$FARM_DRIVER" FARM_TEST_RDMA_DEVICE="$RDMA_DEV" \
                FARM_TEST_NETDEV="$NETDEV" FARM_TEST_IN_VM=1 FARM_BAZEL_BIN="${FARM_BAZEL_BIN:-}" \
                TEST_TMPDIR="$tmp" TMPDIR="$tmp" \
                timeout -k 10 "$FARM_TEST_TIMEOUT" bash -c "$(cat "$cmd_file")"
    ) < /dev/null > "$RESULTS/$id.log" 2>&1 &
    pid=$!
    # A watchdog: if the test is still running DUMP_LEAD seconds before its limit, it is most
    # likely hung; record its stacks before timeout kills it. gdb stops the process for seconds,
    # long enough for its nodes' leases to expire: a test that was only slow fails after a dump.
    (
        sleep $(( FARM_TEST_TIMEOUT - DUMP_LEAD )) &
        wait $!
        if kill -0 "$pid" 2>/dev/null; then
            echo "softiwarp: still running after $(( FARM_TEST_TIMEOUT - DUMP_LEAD ))s; stacks:"
            dump_stacks "$pid"
        fi
    ) >> "$RESULTS/$id.stacks" 2>&1 &
    watchdog=$!
    wait "$pid"
    rc=$?
    pkill -P "$watchdog" sleep 2>/dev/null
    wait "$watchdog"
    [ -s "$RESULTS/$id.stacks" ] && cat "$RESULTS/$id.stacks" >> "$RESULTS/$id.log"
    rm -f "$RESULTS/$id.stacks"
    kill -KILL -- "-$pid" 2>/dev/null
    [ "$rc" -eq 124 ] && echo "softiwarp: test timed out after ${FARM_TEST_TIMEOUT}s" >> "$RESULTS/$id.log"
    if [ "$rc" -ne 0 ]; then  # what the kernel said (siw, the network) while it ran
        { echo "softiwarp: the kernel's last messages (dmesg):"; dmesg 2>&1 | tail -n 60; } \
            >> "$RESULTS/$id.log"
    fi
    secs=$(echo "$(date +%s.%N) $start" | awk '{ printf "%.1f", $1 - $2 }')
    echo "$secs" > "$RESULTS/$id.secs"
    echo "$rc" > "$RESULTS/$id.rc.tmp" && mv "$RESULTS/$id.rc.tmp" "$RESULTS/$id.rc"
    say "end $name rc=$rc ${secs}s"
    rm -rf "$tmp"
done

touch "$RESULTS/done"
say "all tests done"
