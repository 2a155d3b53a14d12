#!/usr/bin/env bash
# The GPU check (`experiments/gpu.sh check OUTDIR`): what a session lent a GPU runs first, in at most 7
# minutes on one H100/H200 with 16 cores. Each part has its own time limit (together 415 s), so one slow
# part cannot lose the others; OUTDIR gets summary.txt (each part: exit status, seconds, the figures) and
# check.tar.gz (records, CSVs, logs), nothing else.
#   1. the `gpu` tests (tests/test_cuda.py, tests/engines/test_capture.py), junit XML and log;
#   2. two pipelining ranks on one GPU (gloo, traffic through the host) against the single engine, eager
#      and with its step recorded as a CUDA graph (engine.capture=cuda_graph): GAT 2 layers on the
#      PubMed-shaped synthetic graph, exact halos, k=8;
#   3. the depth map on the host's 16 cores: 2 pipeline processes x 8 threads against one process with
#      16 (and with 8), GCNII 16 and 64 layers, historical halos, k=8 (benchmarks/depth.py);
#   4. the host overhead of a step on the GPU: aten and sync-forcing calls and step time of a plain PyG
#      loop and pipegnn's full batch, exact k=8 and 32, historical k=8, GAT 2 layers, eager and captured
#      (benchmarks/host_overhead.py --device cuda:0 --captured).
# With --dry-run (a CPU machine; tests/test_gpu_check.py): cpu for cuda:0, a tiny graph, two epochs, no
# capture (a CPU has no CUDA graphs): the same commands otherwise, so that the check cannot rot.
# Usage: experiments/gpu_check.sh OUTDIR [--dry-run]   (PYTHON: the interpreter, default python3)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: experiments/gpu_check.sh OUTDIR [--dry-run]}
dry=${2:-}
py=${PYTHON:-python3}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ "$dry" == --dry-run ]]; then
  device=cpu; epochs=2; depth_epochs=2; threads=1; limit=(120 120 120 120); capture=none; captured=()
  graph=(dataset.num_nodes=400 dataset.num_features=16 dataset.num_communities=6 dataset.train_per_class=10
         dataset.num_val=40 dataset.num_test=60)
  depths=(4)
else
  device=cuda:0; epochs=20; depth_epochs=4; threads=8; limit=(120 35 50 90); capture=cuda_graph; captured=(--captured)
  graph=()
  depths=(16 64)
fi
summary="$out/summary.txt"
{ echo "pipegnn GPU check, $(date -u +%FT%TZ), git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  "$py" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'devices',
[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]); import os; print('cores', os.cpu_count())"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
} >"$summary"

part() {  # part NAME SECONDS COMMAND...: run under its own limit, log to $work/NAME.log, note the outcome
  local name=$1 seconds=$2 start=$SECONDS
  shift 2
  timeout --kill-after=10 "$seconds" "$@" >"$work/$name.log" 2>&1
  local code=$?
  local note=$([[ $code == 124 || $code == 137 ]] && echo " (stopped at its ${seconds}s limit)")
  echo "part $name: exit $code, $((SECONDS - start)) s$note" >>"$summary"
}

part gpu_tests "${limit[0]}" "$py" -m pytest -m gpu tests/test_cuda.py tests/engines/test_capture.py -q -p no:cacheprovider \
  --junitxml="$work/gpu_tests.xml"
tail -n 3 "$work/gpu_tests.log" | sed 's/^/  /' >>"$summary"

train=("$py" experiments/train.py dataset=synthetic "${graph[@]}" model=gat chunks=8 microbatch.halo=exact
       train.epochs=$epochs logger=[])
part single_gpu "${limit[1]}" "${train[@]}" engine=single engine.device=$device hydra.run.dir="$work/records/single"
part single_gpu_graph "${limit[1]}" "${train[@]}" engine=single engine.device=$device engine.timeline=false \
  engine.capture=$capture hydra.run.dir="$work/records/single_graph"
part shared_gpu "${limit[1]}" "${train[@]}" engine=pipelining "engine.devices=[$device,$device]" \
  hydra.run.dir="$work/records/pipelining_shared"
"$py" - "$work/records" >>"$summary" 2>&1 <<'EOF'
import json, statistics, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("*/result.json")):
    r = json.loads(path.read_text())
    epoch = r["timing"].get("epoch_time_median_s", float("nan"))
    print(f"  {path.parent.name}: {r['status']}, median epoch {epoch:.4f} s, backend "
          f"{r.get('workers', {}).get('backend', '-')}, peak device bytes {r['memory'].get('peak_device_bytes')}"
          + (f", error {r['error']}" if r["error"] else ""))
EOF

for layers in "${depths[@]}"; do
  part "depth_gcn2_$layers" "${limit[2]}" "$py" benchmarks/depth.py --datasets synthetic --models gcn2 \
    --depths "$layers" --chunks 8 --halos historical --halo-dropout node --epochs "$depth_epochs" \
    --stage-threads "$threads" --csv "$work/depth_gcn2_$layers.csv" "${graph[@]}"
  grep -A3 "^best pipeline" "$work/depth_gcn2_$layers.log" | sed 's/^/  /' >>"$summary"
done

part host_overhead "${limit[3]}" "$py" benchmarks/host_overhead.py --models "GAT 2" --epochs 3 --device $device "${captured[@]}" \
  --cases "full batch" "exact k=8" "exact k=32" "historical k=8" --csv "$work/host_overhead.csv" "${graph[@]}"
grep -A10 "^per training step" "$work/host_overhead.log" | sed 's/^/  /' >>"$summary"

tar -czf "$out/check.tar.gz" -C "$work" .
echo "files: $out/summary.txt, $out/check.tar.gz" >>"$summary"
cat "$summary"
