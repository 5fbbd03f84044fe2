#!/bin/bash
# A/B in turns: old (messenger WRITEs placed: delivery-complete) vs new (unplaced on tcp).
# Same tree otherwise. 3 runs each, targets in turns.
cd /work/meas41/unplaced
for run in 1 2 3; do
  order="old new"; [ $((run % 2)) -eq 0 ] && order="new old"
  for v in $order; do
    if pgrep -f qemu-system >/dev/null; then echo "BUSY qemu at run $run $v"; fi
    timeout 300 $v/msg_bench --provider='tcp;ofi_rxm' --sizes=64,512,4096 --json > msg-$v-run$run.json 2> msg-$v-run$run.err
    timeout 600 $v/kvbench --provider='tcp;ofi_rxm' --targets=farm --workloads=b,c --dists=zipf \
      --threads=1,2 --in_flight=1,8 --keys=100000 --duration_ms=1000 --warmup_ms=300 --store_cpus=1 \
      --client_cpus=0 --poll=busy --private_dev_shm --read_ref_iters=0 --json > kv-$v-run$run.json 2> kv-$v-run$run.err
    timeout 600 $v/txn_bench --provider='tcp;ofi_rxm' --threads=1,4 --kinds=write_1,bank --dists=uniform \
      --poll=busy --targets=farm --cpus=0-1 --private_dev_shm --duration_ms=2000 --json > txn-$v-run$run.json 2> txn-$v-run$run.err
    echo "$(date +%T) run $run $v done"
  done
done
