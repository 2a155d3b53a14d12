#!/usr/bin/env bash
# The GPU check (`experiments/gpu.sh check OUTDIR`): what a session lent a GPU runs first, in at most 8
# minutes on one H100/H200 with 16 cores. Each part has its own time limit (together 470 s), so one slow
# part cannot lose the others; OUTDIR gets summary.txt (each part: exit status, seconds, the figures) and
# check.tar.gz (records, CSVs, logs), nothing else.
#   gpu_tests      the `gpu` tests (tests/test_cuda.py, tests/engines/test_capture.py), junit XML and log;
#   single, single_graph, shared_gpu, cpu_stages
#                  GAT 2 layers on the PubMed-shaped synthetic graph, exact halos, k=8, dropout 0: the single
#                  engine on cuda:0 eager (its default timeline on) and with its step recorded as a CUDA
#                  graph (engine.capture=cuda_graph), and engine=pipelining with two ranks sharing the GPU
#                  (gloo) and with two CPU stages on this CUDA machine; every epoch's loss against the
#                  single engine's;
#   physics_full, physics_k8, physics_sampled
#                  a real graph larger than PubMed (Coauthor Physics, 34,493 nodes, 8,415 features; its
#                  .npz travels with the tree, `make gpu-wheels`): GCN full batch, exact k=8 and sampled
#                  k=8 (fan-outs [25,10], drawn anew every epoch on the GPU, one epoch ahead: what large-graph
#                  users run instead; the summary gives the draw's time and the step's wait for it), dense
#                  split;
#   host_overhead  aten and sync-forcing calls and step time of a plain PyG loop and pipegnn's full batch,
#                  exact k=8 and 32, historical k=8 (GAT 2 layers), and full batch and historical k=8
#                  (GCNII 64), eager and captured (benchmarks/host_overhead.py --device cuda:0 --captured);
#   capacity       the largest PubMed-shaped graph whose full-batch step fits 1 GiB of the GPU, against
#                  exact and historical micro-batches at k=8 and 32 on graphs 2x and 4x larger
#                  (benchmarks/device_capacity.py).
# With --dry-run (a CPU machine; tests/test_gpu_check.py): cpu for cuda:0, a tiny graph, two epochs, no
# capture (a CPU has no CUDA graphs) and Amazon Computers for Coauthor Physics: the same commands otherwise,
# so that the check cannot rot. --only PART[,PART...] runs those parts alone (a second run after a fix).
# Usage: experiments/gpu_check.sh OUTDIR [--dry-run] [--only PARTS]   (PYTHON: the interpreter, default python3)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: experiments/gpu_check.sh OUTDIR [--dry-run] [--only PARTS]}
shift
dry=
only=
while (($#)); do
  case "$1" in
    --dry-run) dry=1 ;;
    --only) only=,${2:?--only takes a comma-separated list of parts},; shift ;;
    *) echo "unknown argument $1; usage: experiments/gpu_check.sh OUTDIR [--dry-run] [--only PARTS]" >&2; exit 2 ;;
  esac
  shift
done
py=${PYTHON:-python3}
"$py" -c "import torch, torch_geometric, hydra" 2>/dev/null || {
  echo "$py lacks torch, torch_geometric or hydra: set PYTHON to the interpreter that has them" >&2; exit 2; }
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ -n "$dry" ]]; then
  device=cpu; epochs=2; limit=(120 120 120 120 120); capture=none; captured=(); real=amazon_computers
  graph=(dataset.num_nodes=400 dataset.num_features=16 dataset.num_communities=6 dataset.train_per_class=10
         dataset.num_val=40 dataset.num_test=60)
  capacity=(--device cpu --start-nodes 400 --max-nodes 800 --epochs 2 "${graph[@]:1}")
else
  device=cuda:0; epochs=20; limit=(90 25 60 120 160); capture=cuda_graph; captured=(--captured)
  real=coauthor_physics; graph=()
  capacity=(--device cuda:0 --cap-gb 1 --start-nodes 50000 --epochs 3 --size-timeout-s 60)
fi
summary="$out/summary.txt"
{ echo "pipegnn GPU check, $(date -u +%FT%TZ), git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  "$py" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'devices',
[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]); import os; print('cores', os.cpu_count())"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
} >>"$summary"

part() {  # part NAME SECONDS COMMAND...: run under its own limit, log to $work/NAME.log, note the outcome
  local name=$1 seconds=$2 start=$SECONDS
  shift 2
  [[ -z "$only" || "$only" == *",$name,"* ]] || return 1
  timeout --kill-after=10 "$seconds" "$@" >"$work/$name.log" 2>&1
  local code=$?
  local note=$([[ $code == 124 || $code == 137 ]] && echo " (stopped at its ${seconds}s limit)")
  echo "part $name: exit $code, $((SECONDS - start)) s$note" >>"$summary"
}

part gpu_tests "${limit[0]}" "$py" -m pytest -m gpu tests/test_cuda.py tests/engines/test_capture.py -q \
  -p no:cacheprovider --junitxml="$work/gpu_tests.xml" && tail -n 3 "$work/gpu_tests.log" | sed 's/^/  /' >>"$summary"

train=("$py" experiments/train.py dataset=synthetic "${graph[@]}" model=gat model.dropout=0 chunks=8
       microbatch.halo=exact train.epochs=$epochs logger=[])
part single "${limit[1]}" "${train[@]}" engine=single engine.device=$device hydra.run.dir="$work/records/single"
part single_graph "${limit[1]}" "${train[@]}" engine=single engine.device=$device engine.timeline=false \
  engine.capture=$capture hydra.run.dir="$work/records/single_graph"
part shared_gpu "${limit[2]}" "${train[@]}" engine=pipelining "engine.devices=[$device,$device]" \
  hydra.run.dir="$work/records/pipelining_shared"
part cpu_stages "${limit[2]}" "${train[@]}" engine=pipelining "engine.devices=[cpu,cpu]" \
  hydra.run.dir="$work/records/pipelining_cpu"

physics=("$py" experiments/train.py dataset=$real dataset.split=random model=gcn microbatch.targets=all
         engine=single engine.device=$device train.epochs=$epochs logger=[])
part physics_full "${limit[2]}" "${physics[@]}" chunks=1 microbatch.halo=none hydra.run.dir="$work/records/physics_full"
part physics_k8 "${limit[2]}" "${physics[@]}" chunks=8 microbatch.halo=exact hydra.run.dir="$work/records/physics_k8"
part physics_sampled "${limit[2]}" "${physics[@]}" chunks=8 microbatch.halo=sampled "microbatch.fanouts=[25,10]" \
  hydra.run.dir="$work/records/physics_sampled"

"$py" - "$work/records" >>"$summary" 2>&1 <<'EOF'
import json, sys
from pathlib import Path
records = {p.parent.name: json.loads(p.read_text()) for p in sorted(Path(sys.argv[1]).glob("*/result.json"))}
base = [e["train_loss"] for e in records.get("single", {}).get("epochs", [])]
for name, r in records.items():
    losses = [e["train_loss"] for e in r["epochs"]]
    same = ""
    if base and name in ("single_graph", "pipelining_shared", "pipelining_cpu") and losses:
        diff = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, base))
        same = f", losses vs single: {len(losses)} epochs, max relative difference {diff:.1e}"
    final = r.get("final") or {}
    stream = (r.get("microbatch") or {}).get("sample_stream")
    if stream:  # sampled halos: where later epochs were drawn, the draw's time and the step's wait for it
        drawn = r["epochs"][1:] or r["epochs"]
        mid = lambda key: sorted(e.get(key, float("nan")) for e in drawn)[len(drawn) // 2]
        same += (f", drawn on {stream['device']} ({stream['generator']}), median draw {mid('sample_s'):.4f} s, "
                 f"median wait {mid('sample_wait_s'):.4f} s")
    print(f"  {name}: {r['status']}, median epoch {r['timing'].get('epoch_time_median_s', float('nan')):.4f} s, "
          f"test acc at best val {final.get('test_acc_at_best_val')}, backend {r.get('workers', {}).get('backend', '-')}, "
          f"peak device bytes {r['memory'].get('peak_device_bytes')}{same}" + (f", error {r['error']}" if r["error"] else ""))
EOF

part host_overhead "${limit[3]}" "$py" benchmarks/host_overhead.py --models "GAT 2" "GCNII 64" --epochs 3 \
  --device $device "${captured[@]}" --cases "full batch" "exact k=8" "exact k=32" "historical k=8" \
  --csv "$work/host_overhead.csv" "${graph[@]}" \
  && grep -A20 "^per training step" "$work/host_overhead.log" | sed 's/^/  /' >>"$summary"

part capacity "${limit[4]}" "$py" benchmarks/device_capacity.py "${capacity[@]}" --cache "$work/cache" \
  --csv "$work/capacity.csv" \
  && grep -A30 "^device capacity" "$work/capacity.log" | sed 's/^/  /' >>"$summary"

rm -rf "$work/cache"
tar -czf "$out/check.tar.gz" -C "$work" .
echo "files: $out/summary.txt, $out/check.tar.gz" >>"$summary"
cat "$summary"
