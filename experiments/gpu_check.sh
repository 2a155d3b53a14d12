#!/usr/bin/env bash
# The GPU check (`experiments/gpu.sh check OUTDIR`): what a session lent a GPU runs first, in at most 5
# minutes on one H100/H200 with 16 cores (a session holds the GPU 15 minutes, start-up included: room for a
# second run). Each part has its own time limit (together 280 s), so one slow part cannot lose the others,
# and writes into OUTDIR as it goes: logs/<part>.log while it runs, its records under records/, its CSV,
# and a line in summary.txt when it ends. A run cut short keeps every part that finished, and the log of
# the one it cut.
#   gpu_tests      the `gpu` tests (tests/test_cuda.py, tests/engines/test_capture.py), junit XML and log;
#   single, single_graph, shared_gpu
#                  GAT 2 layers on the PubMed-shaped synthetic graph, exact halos, k=8, dropout 0: the single
#                  engine on cuda:0 eager (its default timeline on) and with its step recorded as a CUDA
#                  graph (engine.capture=cuda_graph), and engine=pipelining with two ranks sharing the GPU
#                  (gloo); every epoch's loss against the single engine's;
#   tta_full, tta_exact, tta_historical, tta_sampled
#                  the map's headline slice on the GPU (experiment=sampled_map, devices=gpu): Amazon
#                  Computers, dense split, GCN, seed 0, full batch and exact, historical and sampled
#                  ([10,10], drawn on the GPU one epoch ahead) k=8, at most 200 epochs each: the wall time to
#                  98% of the best validation accuracy, the median epoch, a sampled epoch's draw and wait;
#   host_overhead  aten and sync-forcing calls and step time of a plain PyG loop and pipegnn's full batch,
#                  exact k=8 and historical k=8 (GAT 2 layers; GCNII 64: full batch and historical k=8),
#                  eager and captured (benchmarks/host_overhead.py --device cuda:0 --captured).
# Not run unless named (--only): cpu_stages (two CPU pipeline stages on this CUDA machine), physics_full,
# physics_k8, physics_sampled (Coauthor Physics, GCN) and capacity (benchmarks/device_capacity.py).
# With --dry-run (a CPU machine; tests/test_gpu_check.py): cpu for cuda:0, a tiny graph, two epochs, no
# capture (a CPU has no CUDA graphs): the same commands otherwise, so that the check cannot rot.
# --only PART[,PART...] runs those parts alone (a second run after a fix).
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
mkdir -p "$out/logs" "$out/records"
out=$(cd "$out" && pwd)
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
if [[ -n "$dry" ]]; then
  device=cpu; epochs=2; tta_epochs=2; capture=none; captured=(); devices=cpu
  limit=(150 150 150 150 150); real=amazon_computers
  graph=(dataset.num_nodes=400 dataset.num_features=16 dataset.num_communities=6 dataset.train_per_class=10
         dataset.num_val=40 dataset.num_test=60)
  capacity=(--device cpu --start-nodes 400 --max-nodes 800 --epochs 2 "${graph[@]:1}")
else
  # gpu_tests, single and single_graph, shared_gpu, each tta run, host_overhead: 60 + 2x20 + 40 + 4x25 + 40
  device=cuda:0; epochs=20; tta_epochs=200; capture=cuda_graph; captured=(--captured); devices=gpu
  limit=(60 20 40 25 40); real=coauthor_physics; graph=()
  capacity=(--device cuda:0 --cap-gb 1 --start-nodes 50000 --epochs 3 --size-timeout-s 60)
fi
summary="$out/summary.txt"
{ echo "pipegnn GPU check, $(date -u +%FT%TZ), git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  "$py" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'devices',
[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]); import os; print('cores', os.cpu_count())"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
} >>"$summary"

wanted() {  # wanted NAME [extra]: whether the part runs (an extra part only when --only names it)
  [[ -n "$only" ]] && { [[ "$only" == *",$1,"* ]]; return; }
  [[ "${2:-}" != extra ]]
}

part() {  # part NAME SECONDS COMMAND...: run under its own limit, log to logs/NAME.log, note the outcome
  local name=$1 seconds=$2 start=$SECONDS
  shift 2
  timeout --kill-after=10 "$seconds" "$@" >"$out/logs/$name.log" 2>&1
  local code=$?
  local note=$([[ $code == 124 || $code == 137 ]] && echo " (stopped at its ${seconds}s limit)")
  echo "part $name: exit $code, $((SECONDS - start)) s$note" >>"$summary"
  return $code
}

record() {  # record RUN: one line of summary.txt for records/RUN (against records/single's losses)
  "$py" - "$out/records" "$1" >>"$summary" 2>&1 <<'EOF'
import json, sys
from pathlib import Path
root, name = Path(sys.argv[1]), sys.argv[2]
def load(run):
    path = root / run / "result.json"
    return json.loads(path.read_text()) if path.is_file() else None
r = load(name)
if r is None:
    print(f"  {name}: no record")
    sys.exit()
base = [e["train_loss"] for e in (load("single") or {}).get("epochs", [])]
losses = [e["train_loss"] for e in r["epochs"]]
same = ""
if base and name in ("single_graph", "pipelining_shared", "pipelining_cpu") and losses:
    diff = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, base))
    same = f", losses vs single: {len(losses)} epochs, max relative difference {diff:.1e}"
final = r.get("final") or {}
tta = final.get("time_to_accuracy") or {}
if tta:
    same += f", to 98% of best val: epoch {tta.get('epoch')}, wall {tta.get('wall_s')} s"
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
}

if wanted gpu_tests; then
  part gpu_tests "${limit[0]}" "$py" -m pytest -m gpu tests/test_cuda.py tests/engines/test_capture.py -q \
    -p no:cacheprovider --junitxml="$out/logs/gpu_tests.xml"
  tail -n 3 "$out/logs/gpu_tests.log" | sed 's/^/  /' >>"$summary"
fi

train=("$py" experiments/train.py dataset=synthetic "${graph[@]}" model=gat model.dropout=0 chunks=8
       microbatch.halo=exact train.epochs=$epochs logger=[] data.cache="$cache")
run() {  # run PART LIMIT RUN OVERRIDES...: a training run as a part, its record summarised
  local name=$1 seconds=$2 folder=$3
  shift 3
  wanted "$name" "${extra:-}" || return 0
  part "$name" "$seconds" "$@" hydra.run.dir="$out/records/$folder"
  record "$folder"
}
run single "${limit[1]}" single "${train[@]}" engine=single engine.device=$device
run single_graph "${limit[1]}" single_graph "${train[@]}" engine=single engine.device=$device \
  engine.timeline=false engine.capture=$capture
run shared_gpu "${limit[2]}" pipelining_shared "${train[@]}" engine=pipelining "engine.devices=[$device,$device]"

tta=("$py" experiments/train.py experiment=sampled_map dataset=amazon_computers_dense model=gcn
     map_runner=process devices=$devices train.seed=0 train.epochs=$tta_epochs logger=[] data.cache="$cache")
for setting in full exact_k8 historical_k8 sampled10_k8; do
  name=tta_${setting%_k8}
  name=${name%10}
  run "$name" "${limit[3]}" "$name" "${tta[@]}" map_setting=$setting
done

if wanted host_overhead; then
  part host_overhead "${limit[4]}" "$py" benchmarks/host_overhead.py --models "GAT 2" "GCNII 64" --epochs 2 \
    --device $device "${captured[@]}" --cases "full batch" "exact k=8" "historical k=8" \
    --csv "$out/host_overhead.csv" "${graph[@]}"
  grep -A20 "^per training step" "$out/logs/host_overhead.log" | sed 's/^/  /' >>"$summary"
fi

extra=extra
run cpu_stages 60 pipelining_cpu "${train[@]}" engine=pipelining "engine.devices=[cpu,cpu]"
physics=("$py" experiments/train.py dataset=$real dataset.split=random model=gcn microbatch.targets=all
         engine=single engine.device=$device train.epochs=$epochs logger=[] data.cache="$cache")
run physics_full 60 physics_full "${physics[@]}" chunks=1 microbatch.halo=none
run physics_k8 60 physics_k8 "${physics[@]}" chunks=8 microbatch.halo=exact
run physics_sampled 60 physics_sampled "${physics[@]}" chunks=8 microbatch.halo=sampled "microbatch.fanouts=[25,10]"
if wanted capacity extra; then
  part capacity 160 "$py" benchmarks/device_capacity.py "${capacity[@]}" --cache "$cache/capacity" \
    --csv "$out/capacity.csv"
  grep -A30 "^device capacity" "$out/logs/capacity.log" | sed 's/^/  /' >>"$summary"
fi
echo "files: $out (summary.txt, logs/, records/, CSVs)" >>"$summary"
cat "$summary"
