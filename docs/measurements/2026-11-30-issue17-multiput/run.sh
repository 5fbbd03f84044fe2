#!/bin/bash
# Before (872b0bf) and after (multiput) kvbench binaries in turns, 2 runs each, only while no QEMU runs.
cd /tmp
CMD=(--provider='shm,tcp;ofi_rxm' --targets=farm --workloads=a,b --dists=zipf --threads=1 --in_flight=8 --keys=100000 --duration_ms=1000 --warmup_ms=300 --store_cpus=1 --client_cpus=0 --poll=busy --multi_get=auto --private_dev_shm --read_ref_iters=0 --json)
for run in ${RUNS:-1 2}; do
  for which in before after; do
    while ps -eo args | grep -q '^qemu-system' || ps -eo args | grep -v grep | grep -q 'meas40/copies\|txn_bench\|--role=node\|fabric_bench'; do sleep 5; done
    echo "$(date +%T) $which run $run" >&2
    /work/meas40/multiput/$which/kvbench "${CMD[@]}" > /work/meas40/multiput/$which-run$run.jsonl 2> /work/meas40/multiput/$which-run$run.log
    echo "rc=$?" >> /work/meas40/multiput/$which-run$run.log
  done
done
echo "$(date +%T) done" >&2
