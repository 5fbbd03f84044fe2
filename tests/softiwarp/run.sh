#!/bin/bash
# SoftiWARP lane: run test commands inside a QEMU guest that has a software RDMA NIC.
#
#   tests/softiwarp/run.sh [OPTIONS] [--tests FILE|T1,T2]... [--test NAME=COMMAND]...
#                          [--repeat N] [--again T1,T2] [-- CMD [ARGS...]]
#
# With no test given, runs tests/softiwarp/smoke.tests. See tests/softiwarp/README.md.
#
# What happens:
#   1. Installs the Debian packages it needs (only the missing ones).
#   2. Prepares a cache under the work dir (default /var/tmp/farm-siw), once: Debian's kernel
#      image, the SoftiWARP module siw.ko built out of tree from Debian's kernel source (Debian
#      leaves CONFIG_RDMA_SIW unset), and a busybox initramfs (init.sh). Later runs reuse it.
#   3. Boots the kernel under QEMU (TCG: KVM cannot boot it here) with the host's / shared
#      read-only over 9p, so host-built binaries (bazel-bin) run unchanged in the guest.
#   4. guest.sh brings up siw0 (or rxe0) on a dummy interface and runs each test from the
#      project root; this script prints PASS/FAIL as results arrive and a closing summary.
# Everything is time-bounded; QEMU is killed on exit, timeout or Ctrl-C.
#
# Exit status: 0 all tests passed; 1 a test failed or did not finish; 2 usage error;
#              3 the host could not be prepared (packages, kernel, module build).

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# ---- settings (options override the environment) ----------------------------------------------
WORKDIR=${FARM_SIW_WORKDIR:-/var/tmp/farm-siw}
TIMEOUT=${FARM_SIW_TIMEOUT:-}                # whole guest run: boot + all tests, seconds (default below)
TEST_TIMEOUT=${FARM_SIW_TEST_TIMEOUT:-300}   # one test, seconds
DRIVER=${FARM_SIW_DRIVER:-siw}               # siw (SoftiWARP) or rxe (Soft-RoCE)
GUEST_ADDR=${FARM_SIW_ADDR:-10.10.0.1}       # lives on the guest's dummy0 only; never leaves it
GUEST_PREFIX=24
# Guest memory. ofi_rxm's shared receive context (FI_OFI_RXM_USE_SRX=1, set by platform/fabric.cc
# against the verbs close crash) gives every endpoint a receive pool of its own: txn_test (3 nodes
# with 8 workers' channels each) was killed by the guest's OOM killer with 2G in 2 runs of 3, and
# passed with 4G (and with 2G without the shared receive context).
MEM=${FARM_SIW_MEM:-4G}
SMP=${FARM_SIW_SMP:-2}
# The guest's CPU model. QEMU's TCG emulates vector instructions at a cost that grows with their
# width, and the guest's glibc (memcpy, strlen, ...) picks the widest the CPU model offers: the
# same two tests (txn_test, kv_test) took 97-108 s in the guest with qemu64 (SSE2) and 134-172 s
# with max (AVX2), alternated on this 2-core host on 2026-11-28 (tests/softiwarp/README.md).
# Nothing under test depends on the model: the verbs provider and siw are plain C.
CPU=${FARM_SIW_CPU:-qemu64}
KEEP_RUNS=5                                  # run directories (logs) kept under $WORKDIR/runs
APT_TIMEOUT=1200                             # apt-get update/install/download, seconds
BUILD_TIMEOUT=900                            # building siw.ko, seconds
CACHE_RECIPE=2                               # bump to force a rebuild of the kernel cache

usage() {
    cat <<EOF
usage: $0 [OPTIONS] [--tests FILE|T1,T2]... [--test NAME=COMMAND]... [--repeat N]
          [-- CMD [ARGS...]]

Runs each test command inside a QEMU guest with a software RDMA device and prints
'PASS name' or 'FAIL name (rc=N)' per test, then 'softiwarp: N passed, N failed'.
Without tests, runs $HERE/smoke.tests.

Tests:
  --tests FILE          lines 'NAME<TAB>COMMAND' (# comments and blank lines ignored)
  --tests T1,T2         the tests of that name in $HERE/project.tests
                        (an argument that is not a file path: no '/', no existing file)
  --repeat N            run every test N times in a row (NAME.r1 .. NAME.rN)
  --again T1,T2         after all the others, once more each of these tests of
                        $HERE/project.tests (NAME.again; CI's verbs teardown runs)
  --test NAME=COMMAND   one test; COMMAND is a bash command line
  -- CMD [ARGS...]      one test named after CMD, arguments passed as given
Options:
  --timeout SECS        limit for the whole guest run, boot included (default: 300 s plus
                        60 s per test run, at least 900 s)
  --test-timeout SECS   limit for one test (default $TEST_TIMEOUT)
  --driver siw|rxe      SoftiWARP (default) or Soft-RoCE
  --workdir DIR         cache and logs (default $WORKDIR)
  --mem SIZE            guest memory (default $MEM)
  --smp N               guest CPUs (default $SMP)
  --cpu MODEL           QEMU CPU model (default $CPU: TCG emulates wider vector
                        instructions more slowly; see the comment at CPU=)
  --rebuild             rebuild the cached kernel, siw.ko and initramfs
  --prepare             only install packages and build the cache, run no test
  -h, --help            this text
Environment: FARM_SIW_WORKDIR FARM_SIW_TIMEOUT FARM_SIW_TEST_TIMEOUT FARM_SIW_DRIVER
             FARM_SIW_ADDR FARM_SIW_MEM FARM_SIW_SMP FARM_SIW_CPU
Tests see: FARM_TEST_PROVIDERS=verbs FARM_TEST_HOST=<guest RDMA address> TEST_TMPDIR
           FARM_TEST_DRIVER FARM_TEST_RDMA_DEVICE FARM_TEST_NETDEV FARM_TEST_IN_VM=1 FARM_BAZEL_BIN
EOF
}

log() { echo "softiwarp: $*"; }
die() { echo "softiwarp: ERROR: $*" >&2; exit "${2:-3}"; }
usage_error() { echo "softiwarp: $*" >&2; echo "try: $0 --help" >&2; exit 2; }

# ---- arguments --------------------------------------------------------------------------------
TEST_NAMES=()
TEST_CMDS=()
PROJECT_TESTS=$HERE/project.tests
REPEAT=1
AGAIN=""
REBUILD=0
PREPARE_ONLY=0

add_test() {  # add_test NAME COMMAND
    local name=$1 cmd=$2 n
    [[ $name =~ ^[A-Za-z0-9_.:+-]+$ ]] || usage_error "bad test name '$name' (use letters, digits, _ . : + -)"
    [[ -n $cmd ]] || usage_error "test '$name' has an empty command"
    [[ $cmd != *$'\n'* ]] || usage_error "test '$name': command must be one line"
    for n in "${TEST_NAMES[@]+"${TEST_NAMES[@]}"}"; do
        [[ $n != "$name" ]] || usage_error "duplicate test name '$name'"
    done
    TEST_NAMES+=("$name")
    TEST_CMDS+=("$cmd")
}

# Prints the tests of FILE as 'NAME<TAB>COMMAND' lines, checking the format.
test_file_lines() {  # test_file_lines FILE
    local file=$1 line lineno=0
    [[ -r $file ]] || usage_error "cannot read test file '$file'"
    while IFS= read -r line || [[ -n $line ]]; do
        lineno=$((lineno + 1))
        [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
        [[ $line == *$'\t'* ]] || usage_error "$file:$lineno: expected NAME<TAB>COMMAND"
        printf '%s\n' "$line"
    done < "$file"
}

add_test_file() {  # add_test_file FILE
    local line lines
    lines=$(test_file_lines "$1") || exit 2
    while IFS= read -r line; do
        [[ -n $line ]] && add_test "${line%%$'\t'*}" "${line#*$'\t'}"
    done <<< "$lines"
}

# add_named_tests T1,T2 [SUFFIX]: the tests of those names in project.tests, in the order given
# (named NAME+SUFFIX).
add_named_tests() {
    local list=$1 suffix=${2:-} want line lines found
    lines=$(test_file_lines "$PROJECT_TESTS") || exit 2
    IFS=, read -ra wanted <<< "$list"
    for want in "${wanted[@]}"; do
        found=0
        while IFS= read -r line; do
            if [[ ${line%%$'\t'*} == "$want" ]]; then
                add_test "$want$suffix" "${line#*$'\t'}"
                found=1
                break
            fi
        done <<< "$lines"
        [[ $found -eq 1 ]] || usage_error "no test named '$want' in $PROJECT_TESTS (names: $(
            cut -f1 <<< "$lines" | paste -sd' '))"
    done
}

# --tests ARG: a file of tests, or a comma-separated list of names from project.tests. A path
# (with a '/') or an existing file is a file; anything else must look like a list of names.
add_tests_arg() {  # add_tests_arg ARG
    local arg=$1
    if [[ $arg == */* || -e $arg ]]; then
        add_test_file "$arg"
    elif [[ $arg =~ ^[A-Za-z0-9_.:+-]+(,[A-Za-z0-9_.:+-]+)*$ ]]; then
        add_named_tests "$arg"
    else
        usage_error "--tests wants a file or a list of test names like node_test,rpc_test; got '$arg'"
    fi
}

# Runs every test REPEAT times in a row: NAME.r1 .. NAME.rN, all of NAME's runs before the next
# test's, so that a failure rate shows per test.
expand_repeats() {
    local names=("${TEST_NAMES[@]}") cmds=("${TEST_CMDS[@]}") i r
    TEST_NAMES=()
    TEST_CMDS=()
    for i in "${!names[@]}"; do
        for ((r = 1; r <= REPEAT; r++)); do
            TEST_NAMES+=("${names[$i]}.r$r")
            TEST_CMDS+=("${cmds[$i]}")
        done
    done
}

need_value() { [[ $# -ge 2 ]] || usage_error "$1 needs a value"; }
need_number() { [[ $2 =~ ^[1-9][0-9]*$ ]] || usage_error "$1 needs a positive number, got '$2'"; }

while [[ $# -gt 0 ]]; do
    case $1 in
        --tests) need_value "$@"; add_tests_arg "$2"; shift 2 ;;
        --repeat) need_value "$@"; need_number --repeat "$2"; REPEAT=$2; shift 2 ;;
        --again) need_value "$@"
            [[ $2 =~ ^[A-Za-z0-9_.:+-]+(,[A-Za-z0-9_.:+-]+)*$ ]] ||
                usage_error "--again wants a list of test names like node_test,rpc_test; got '$2'"
            AGAIN=${AGAIN:+$AGAIN,}$2; shift 2 ;;
        --test) need_value "$@"; [[ $2 == *=* ]] || usage_error "--test wants NAME=COMMAND"
            add_test "${2%%=*}" "${2#*=}"; shift 2 ;;
        --timeout) need_value "$@"; TIMEOUT=$2; shift 2 ;;
        --test-timeout) need_value "$@"; TEST_TIMEOUT=$2; shift 2 ;;
        --driver) need_value "$@"; DRIVER=$2; shift 2 ;;
        --workdir) need_value "$@"; WORKDIR=$2; shift 2 ;;
        --mem) need_value "$@"; MEM=$2; shift 2 ;;
        --smp) need_value "$@"; SMP=$2; shift 2 ;;
        --cpu) need_value "$@"; CPU=$2; shift 2 ;;
        --rebuild) REBUILD=1; shift ;;
        --prepare) PREPARE_ONLY=1; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift
            [[ $# -gt 0 ]] || usage_error "nothing after --"
            add_test "$(basename "$1" | tr -c 'A-Za-z0-9_.:+\n-' _)" "$(printf '%q ' "$@")"
            break ;;
        *) usage_error "unknown argument '$1'" ;;
    esac
done

[[ -z $TIMEOUT ]] || need_number --timeout "$TIMEOUT"
need_number --test-timeout "$TEST_TIMEOUT"
need_number --smp "$SMP"
[[ $DRIVER == siw || $DRIVER == rxe ]] || usage_error "--driver must be siw or rxe, not '$DRIVER'"
[[ $WORKDIR == /* && $WORKDIR != *[[:space:]]* ]] || usage_error "--workdir must be an absolute path without spaces"
[[ $ROOT != *[[:space:]]* ]] || die "the project path '$ROOT' contains spaces; the guest cannot handle that"
if [[ ${#TEST_NAMES[@]} -eq 0 && $PREPARE_ONLY -eq 0 ]]; then
    add_test_file "$HERE/smoke.tests"
fi
[[ $REPEAT -le 1 ]] || expand_repeats
# --again: one more run of each named project test, after all the others (so that a teardown
# crash shows in a second run without a second guest boot).
[[ -z $AGAIN ]] || add_named_tests "$AGAIN" .again
# The whole-run limit only catches a guest that stopped making progress (each test has its own
# limit inside the guest), so it grows with the number of test runs: 300 s for boot and set-up
# plus 60 s per run, at least 900 s. A fixed 900 s for the 15 tests of the CI lane (408 s on a
# quiet host) ran out on a host busy with other work, in the middle of a test that was passing.
[[ -n $TIMEOUT ]] || TIMEOUT=$(( 300 + 60 * ${#TEST_NAMES[@]} > 900 ? 300 + 60 * ${#TEST_NAMES[@]} : 900 ))
[[ ${#TEST_NAMES[@]} -le 9999 ]] || usage_error "${#TEST_NAMES[@]} test runs; at most 9999"
[[ $(id -u) -eq 0 ]] || die "must run as root (apt-get, and QEMU's 9p export of /)"

T0=$SECONDS
elapsed() { echo "$((SECONDS - T0))s"; }

# ---- 1. packages ------------------------------------------------------------------------------
# Needed on the host to run the guest, and (through the shared root) inside the guest.
RUNTIME_PKGS=(qemu-system-x86 kmod iproute2 rdma-core ibverbs-providers ibverbs-utils
    rdmacm-utils perftest libfabric1 libfabric-bin coreutils util-linux procps)
# Needed only to build the cache (kernel headers are added once the kernel version is known).
BUILD_PKGS=(busybox-static cpio gzip xz-utils make)
APT_UPDATED=0

missing_pkgs() {  # prints the packages among "$@" that are not installed
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
    done
}

apt_update_once() {
    [[ $APT_UPDATED -eq 1 ]] && return 0
    log "apt-get update"
    timeout "$APT_TIMEOUT" apt-get update -qq || die "apt-get update failed (no access to Debian's archive?)"
    APT_UPDATED=1
}

ensure_pkgs() {
    local missing
    missing=$(missing_pkgs "$@")
    [[ -z $missing ]] && return 0
    apt_update_once
    # shellcheck disable=SC2086
    log "installing:" $missing
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive timeout "$APT_TIMEOUT" \
        apt-get install -y -qq --no-install-recommends $missing > "$WORKDIR/apt.log" 2>&1 ||
        { tail -20 "$WORKDIR/apt.log" >&2; die "apt-get install failed (log: $WORKDIR/apt.log)"; }
}

# ---- 2. cache: kernel + siw.ko + initramfs ------------------------------------------------------
# Layout: $WORKDIR/kernel/{vmlinuz, lib/modules/$K/..., initrd.gz, VERSION}
KCACHE=$WORKDIR/kernel

cached_kernel_ok() {
    [[ -f $KCACHE/VERSION && -f $KCACHE/vmlinuz ]] || return 1
    # VERSION holds "recipe K debian-version"
    local recipe k
    read -r recipe k _ < "$KCACHE/VERSION"
    [[ $recipe == "$CACHE_RECIPE" && -f $KCACHE/lib/modules/$k/extra/siw.ko ]]
}

# A fix of a race in siw (Linux 6.1 as Debian ships it; the same code is in later kernels):
# siw_try_1seg() copies a payload of at most MAX_HDR_INLINE (32) bytes - a small WRITE's or SEND's
# data, or a small READ's answer - into the packet with copy_from_user() when the transmit flag
# in_syscall is set, i.e. when the queue pair's owner is sending from its own post_send system
# call. But that system call hands the queue pair to siw's transmit kthread whenever its burst
# budget (SQ_USER_MAXBURST segments) runs out (siw_qp_sq_process: -EINPROGRESS -> siw_sq_start)
# while in_syscall is still set, and in_syscall is a bitfield that the kthread's own writes to
# the neighbouring bits (do_crc, pad, use_sendpage) can write back as set. The kthread then calls
# copy_from_user() without a user address space: -EFAULT, the queue pair sends TERMINATE and its
# connection ends, and the peer's operations on it end "Work Request Flushed Error". Seen in the
# chaos_verbs loop with siw's debug messages on: "wqe type 9 processing failed: -14" (a 1-byte
# fence READ's answer) while the cluster formed, and the healthy node whose fence READ was
# flushed was evicted. The fix takes the path siw already uses outside system calls: the pages,
# which the memory registration keeps pinned, mapped with kmap. Stock siw keeps the race, so on
# a stock kernel a connection may still end so (README, Providers: SoftiWARP).
patch_siw_try_1seg() {
    local f=$1
    perl -0pi -e 's/\} else if \(c_tx->in_syscall\) \{\n\t+if \(copy_from_user\(paddr, u64_to_user_ptr\(sge->laddr\),\n\s+bytes\)\)\n\t+return -EFAULT;\n\t+\} else \{/} else {/' "$f"
    ! grep -q 'copy_from_user' "$f" ||
        die "patching siw_try_1seg failed: siw_qp_tx.c differs from the code the fix was written for"
}

build_kernel_cache() {
    local K V SRC tmp
    apt_update_once
    # The kernel that linux-image-amd64 points at, e.g. 6.1.0-56-amd64.
    K=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: linux-image-//p' | head -1)
    [[ $K =~ ^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-amd64$ ]] || die "cannot tell the kernel version from linux-image-amd64 (got '$K')"
    ensure_pkgs "${BUILD_PKGS[@]}" "linux-headers-$K"
    # Take image and source at exactly the installed headers' version so siw.ko's symbol
    # versions match the kernel we boot.
    V=$(dpkg-query -W -f='${Version}' "linux-headers-$K")
    SRC=linux-source-${K%%.0-*}   # linux-source-6.1
    log "building the kernel cache: kernel $K ($V), siw.ko from $SRC"

    tmp=$WORKDIR/build.tmp
    rm -rf "$tmp" "$KCACHE"
    mkdir -p "$tmp/debs" "$tmp/image" "$tmp/source"
    (cd "$tmp/debs" && timeout "$APT_TIMEOUT" apt-get download -qq "linux-image-$K=$V" "$SRC=$V") \
        > "$tmp/download.log" 2>&1 ||
        { cat "$tmp/download.log" >&2; die "apt-get download of linux-image-$K=$V / $SRC=$V failed"; }
    log "unpacking kernel image ($(elapsed))"
    dpkg-deb -x "$tmp"/debs/linux-image-*.deb "$tmp/image"
    # The source package holds one big tarball; take only the siw driver from it.
    dpkg-deb -x "$tmp"/debs/"$SRC"_*.deb "$tmp/source"
    tar -xJf "$tmp"/source/usr/src/linux-source-*.tar.xz -C "$tmp/source" \
        --wildcards '*/drivers/infiniband/sw/siw/*'
    mkdir -p "$tmp/siw"
    cp "$tmp"/source/linux-source-*/drivers/infiniband/sw/siw/* "$tmp/siw/"
    rm -rf "$tmp/source"   # ~1 GiB unpacked; not needed any more
    patch_siw_try_1seg "$tmp/siw/siw_qp_tx.c"

    log "building siw.ko against linux-headers-$K ($(elapsed))"
    timeout "$BUILD_TIMEOUT" make -C "/usr/src/linux-headers-$K" M="$tmp/siw" CONFIG_RDMA_SIW=m \
        -j"$(nproc)" modules > "$tmp/build.log" 2>&1 ||
        { tail -30 "$tmp/build.log" >&2; die "building siw.ko failed (log above)"; }
    [[ -f $tmp/siw/siw.ko ]] || die "siw.ko was not produced"
    mkdir -p "$tmp/image/lib/modules/$K/extra"
    cp "$tmp/siw/siw.ko" "$tmp/image/lib/modules/$K/extra/"
    depmod -b "$tmp/image" "$K"

    mkdir -p "$KCACHE"
    cp "$tmp/image/boot/vmlinuz-$K" "$KCACHE/vmlinuz"
    mkdir -p "$KCACHE/lib/modules"
    mv "$tmp/image/lib/modules/$K" "$KCACHE/lib/modules/$K"
    rm -rf "$tmp"
    echo "$CACHE_RECIPE $K $V" > "$KCACHE/VERSION"   # written last: marks the cache complete
    log "kernel cache ready ($(elapsed))"
}

# The initramfs depends on init.sh too; its hash is kept beside it so an edit rebuilds it.
initrd_key() { echo "$CACHE_RECIPE $(sha256sum < "$HERE/init.sh" | cut -c1-16) $(cat "$KCACHE/VERSION")"; }

build_initrd() {
    local K=$1 dir=$WORKDIR/initrd.tmp mod path
    ensure_pkgs "${BUILD_PKGS[@]}"
    log "building the initramfs"
    rm -rf "$dir"
    mkdir -p "$dir"/{bin,dev,proc,sys,lib/modules}
    cp /bin/busybox "$dir/bin/busybox"
    cp "$HERE/init.sh" "$dir/init"
    chmod 755 "$dir/init"
    # modprobe resolves the dependency order of what init.sh must insmod by hand.
    : > "$dir/lib/modules/load-order"
    for mod in virtio_pci 9pnet_virtio 9p overlay; do
        modprobe -d "$KCACHE" -S "$K" --show-depends "$mod" | awk '$1 == "insmod" { print $2 }'
    done | awk '!seen[$0]++' | while read -r path; do
        case $path in
            *.ko) cp "$path" "$dir/lib/modules/" ;;
            *.ko.xz) xz -dc "$path" > "$dir/lib/modules/$(basename "$path" .xz)" ;;
            *) die "cannot handle module file $path" ;;
        esac
        basename "${path%.xz}" >> "$dir/lib/modules/load-order"
    done
    [[ -s $dir/lib/modules/load-order ]] || die "no initramfs modules found in $KCACHE"
    (cd "$dir" && find . | cpio -o -H newc --quiet | gzip -1) > "$KCACHE/initrd.gz.tmp"
    mv "$KCACHE/initrd.gz.tmp" "$KCACHE/initrd.gz"
    initrd_key > "$KCACHE/initrd.key"
    rm -rf "$dir"
}

prepare_cache() {
    mkdir -p "$WORKDIR"
    # One builder at a time; a second run waits (bounded) and then finds the cache ready.
    exec 9> "$WORKDIR/.lock"
    flock -w "$((APT_TIMEOUT + BUILD_TIMEOUT))" 9 || die "timed out waiting for another run's cache build"
    BUILDING=1
    [[ $REBUILD -eq 1 ]] && rm -rf "$KCACHE"
    ensure_pkgs "${RUNTIME_PKGS[@]}"
    cached_kernel_ok || build_kernel_cache
    read -r _ KVER _ < "$KCACHE/VERSION"
    if [[ ! -f $KCACHE/initrd.gz || $(cat "$KCACHE/initrd.key" 2>/dev/null) != "$(initrd_key)" ]]; then
        build_initrd "$KVER"
    fi
    BUILDING=0
    flock -u 9
    exec 9>&-
}

# ---- 3. one run -------------------------------------------------------------------------------
RUN=""
QEMU_PID=""
BUILDING=0

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $QEMU_PID ]] && kill -0 "$QEMU_PID" 2>/dev/null; then
        kill -TERM "$QEMU_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$QEMU_PID" 2>/dev/null || true
        wait "$QEMU_PID" 2>/dev/null || true
    fi
    # Keep the logs of a run; drop what only the guest needed.
    if [[ -n $RUN && -d $RUN ]]; then
        rm -rf "$RUN/share/tests" "$RUN/share/guest.sh" "$RUN/share/config.sh"
    fi
    # Half-built cache pieces, only if this run was the builder (another run may be building).
    if [[ $BUILDING -eq 1 ]]; then
        rm -rf "$WORKDIR/build.tmp" "$WORKDIR/initrd.tmp" 2>/dev/null || true
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'echo; log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

prepare_cache
log "cache ready in $WORKDIR (kernel $KVER, driver $DRIVER) after $(elapsed)"
[[ $PREPARE_ONLY -eq 1 ]] && exit 0

# Run directory: share/ is the guest's read-write 9p share; console.log beside it.
mkdir -p "$WORKDIR/runs"
RUN=$(mktemp -d "$WORKDIR/runs/$(date +%Y%m%d-%H%M%S)-XXXX")
SHARE=$RUN/share
mkdir -p "$SHARE/tests" "$SHARE/results"
cp "$HERE/guest.sh" "$SHARE/guest.sh"
CONSOLE=$RUN/console.log

# bazel-bin points into Bazel's output base under /root/.cache, which the guest sees through the
# shared root; pass its real path along and warn early about test binaries not built yet.
BAZEL_BIN=""
if [[ -L $ROOT/bazel-bin || -d $ROOT/bazel-bin ]]; then
    BAZEL_BIN=$(readlink -f "$ROOT/bazel-bin" || true)
fi
{
    printf 'FARM_ROOT=%q\n' "$ROOT"
    printf 'FARM_DRIVER=%q\n' "$DRIVER"
    printf 'FARM_ADDR=%q\n' "$GUEST_ADDR"
    printf 'FARM_PREFIX=%q\n' "$GUEST_PREFIX"
    printf 'FARM_TEST_TIMEOUT=%q\n' "$TEST_TIMEOUT"
    printf 'FARM_BAZEL_BIN=%q\n' "$BAZEL_BIN"
} > "$SHARE/config.sh"

for i in "${!TEST_NAMES[@]}"; do
    id=$(printf '%04d' "$i")
    printf '%s\n' "${TEST_NAMES[$i]}" > "$SHARE/tests/$id.name"
    printf '%s\n' "${TEST_CMDS[$i]}" > "$SHARE/tests/$id.cmd"
    read -ra words <<< "${TEST_CMDS[$i]}"   # rough split, only to spot bazel-bin/... paths
    for word in "${words[@]}"; do
        word=${word#[\"\']}; word=${word%[\"\']}
        if [[ $word == bazel-bin/* && ! -e $ROOT/$word ]]; then
            log "warning: test ${TEST_NAMES[$i]}: $word does not exist (not built yet?)"
        fi
    done
done

log "booting the guest: ${#TEST_NAMES[@]} test(s), timeout ${TIMEOUT}s, log $CONSOLE"
# -nic none: the guest has no network card at all, so no test traffic can leave it.
# timeout(1) is a backstop; the loop below enforces the same limit and cleanup() kills QEMU.
timeout -k 10 "$((TIMEOUT + 30))" qemu-system-x86_64 \
    -accel tcg,thread=multi -cpu "$CPU" -m "$MEM" -smp "$SMP" \
    -display none -monitor none -serial "file:$CONSOLE" -no-reboot -nic none \
    -kernel "$KCACHE/vmlinuz" -initrd "$KCACHE/initrd.gz" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 farm_modules=$KCACHE/lib/modules" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$SHARE,mount_tag=farmshare,security_model=none" \
    < /dev/null > "$RUN/qemu.log" 2>&1 &
QEMU_PID=$!
BOOT_T0=$SECONDS

# ---- 4. results, streamed ---------------------------------------------------------------------
PASSED=0
FAILED=0
NEXT=0            # index of the next test whose result we wait for
SETUP_SEEN=0
GUEST_STATE=running

show_tail() {  # show_tail FILE N
    [[ -f $1 ]] || return 0
    tr -d '\r' < "$1" | tail -n "$2" | sed 's/^/    | /'
}

report_ready() {  # print every finished test, in order
    local id rc secs
    while [[ $NEXT -lt ${#TEST_NAMES[@]} ]]; do
        id=$(printf '%04d' "$NEXT")
        [[ -f $SHARE/results/$id.rc ]] || return 0
        rc=$(cat "$SHARE/results/$id.rc")
        secs=$(cat "$SHARE/results/$id.secs" 2>/dev/null || echo '?')
        echo -e "${TEST_NAMES[$NEXT]}\t$rc\t$secs" >> "$RUN/summary.tsv"
        if [[ $rc == 0 ]]; then
            echo "PASS ${TEST_NAMES[$NEXT]}"
            PASSED=$((PASSED + 1))
        else
            echo "FAIL ${TEST_NAMES[$NEXT]} (rc=$rc)"
            [[ $rc == 124 ]] && echo "    (timed out after ${TEST_TIMEOUT}s)"
            echo "    last lines of $SHARE/results/$id.log:"
            show_tail "$SHARE/results/$id.log" 20
            FAILED=$((FAILED + 1))
        fi
        NEXT=$((NEXT + 1))
    done
}

while true; do
    if [[ $SETUP_SEEN -eq 0 && -f $SHARE/results/setup.rc ]]; then
        SETUP_SEEN=1
        log "guest RDMA set-up finished after $((SECONDS - BOOT_T0))s (rc=$(cat "$SHARE/results/setup.rc"))"
    fi
    report_ready
    if [[ -f $SHARE/results/done ]]; then GUEST_STATE="done"; break; fi
    if ! kill -0 "$QEMU_PID" 2>/dev/null; then
        GUEST_STATE=stopped
        break
    fi
    if (( SECONDS - BOOT_T0 >= TIMEOUT )); then
        GUEST_STATE=timeout
        break
    fi
    sleep 1
done
report_ready

# Let the guest power itself off (it does so right after 'done'); then make sure QEMU is gone.
for _ in $(seq 100); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$QEMU_PID" 2>/dev/null; then
    kill -TERM "$QEMU_PID" 2>/dev/null || true
fi
set +e
wait "$QEMU_PID"
QEMU_RC=$?
set -e
QEMU_PID=""
GUEST_SECS=$((SECONDS - BOOT_T0))

problem=""
case $GUEST_STATE in
    "done") ;;
    timeout) problem="the guest did not finish within the ${TIMEOUT}s timeout" ;;
    stopped) problem="the guest stopped before finishing (qemu exit status $QEMU_RC)" ;;
esac
if [[ -n $problem ]]; then
    if [[ -f $SHARE/results/setup.rc && $(cat "$SHARE/results/setup.rc") != 0 ]]; then
        problem="RDMA set-up failed in the guest ($DRIVER); output:"
        log "$problem"
        show_tail "$SHARE/results/setup.log" 40
    elif [[ ! -f $SHARE/results/setup.rc ]]; then
        log "$problem, before RDMA set-up finished (boot problem?)"
    else
        log "$problem"
    fi
    while [[ $NEXT -lt ${#TEST_NAMES[@]} ]]; do
        echo "FAIL ${TEST_NAMES[$NEXT]} (did not finish: guest ${GUEST_STATE})"
        echo -e "${TEST_NAMES[$NEXT]}\tunfinished\t-" >> "$RUN/summary.tsv"
        FAILED=$((FAILED + 1))
        NEXT=$((NEXT + 1))
    done
fi

if [[ $FAILED -gt 0 ]]; then
    log "guest console log: $CONSOLE (last 40 lines):"
    show_tail "$CONSOLE" 40
    [[ -s $RUN/qemu.log ]] && { log "qemu said:"; show_tail "$RUN/qemu.log" 10; }
    log "test logs: $SHARE/results/"
fi

# Keep the newest $KEEP_RUNS run directories (logs only).
# shellcheck disable=SC2012
ls -1d "$WORKDIR"/runs/*/ 2>/dev/null | sort | head -n "-$KEEP_RUNS" | xargs -r rm -rf

log "guest ran ${GUEST_SECS}s; total $(elapsed); logs in $RUN"
echo "softiwarp: $PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
