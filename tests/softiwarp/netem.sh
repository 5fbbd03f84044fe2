#!/usr/bin/env bash
# Runs a command in the SoftiWARP guest with netem delaying every packet on the loopback device,
# which carries the guest's RDMA traffic (its address is local). Then a WRITE's bytes and a READ's
# answer arrive a while after the WRITE completed at its sender: iWARP's completion semantics,
# which siw over an idle loopback hides, made visible.
#
#   tests/softiwarp/netem.sh DELAY COMMAND [ARG]...     e.g. netem.sh 1ms bazel-bin/platform/fabric_test
#
# Guest only (it changes the loopback device of the machine it runs on; the lane's guest is
# discarded after the run). Exit status: the command's, or 2 if the delay could not be set up.
set -u
if [[ $# -lt 2 || $1 == -h || $1 == --help ]]; then
    echo "usage: $0 DELAY COMMAND [ARG]...   (DELAY as tc takes it: 500us, 1ms)" >&2
    exit 2
fi
if [[ ${FARM_TEST_IN_VM:-} != 1 ]]; then
    echo "netem.sh: refusing to delay this machine's loopback outside the SoftiWARP guest" >&2
    exit 2
fi
delay=$1
shift
modprobe sch_netem || { echo "netem.sh: cannot load sch_netem" >&2; exit 2; }
tc qdisc replace dev lo root netem delay "$delay" || { echo "netem.sh: tc failed" >&2; exit 2; }
trap 'tc qdisc del dev lo root 2>/dev/null' EXIT
echo "netem.sh: every packet on lo is delayed by $delay"
"$@"
