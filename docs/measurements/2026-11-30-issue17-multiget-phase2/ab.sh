#!/bin/bash
# MultiGet by READs, second phase batched (new, 8baefb0) against f32606a (old): values of 512 B
# (out of line), 8 in flight, farm only, one-sided path; 3 runs each in turns.
cd /work/meas41/mg2
for run in 1 2 3; do
  order="old new"; [ $((run % 2)) -eq 0 ] && order="new old"
  for v in $order; do
    timeout 600 $v/kvbench --provider='tcp;ofi_rxm,shm' --targets=farm --workloads=c --dists=zipf \
      --threads=1 --in_flight=8 --keys=5000 --value_size=400 --duration_ms=1000 --warmup_ms=300 \
      --store_cpus=1 --client_cpus=0 --poll=busy --multi_get=read --private_dev_shm \
      --read_ref_iters=0 --json > kv-$v-run$run.json 2> kv-$v-run$run.err
    echo "$(date +%T) run $run $v done"
  done
done
