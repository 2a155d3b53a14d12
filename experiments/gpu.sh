#!/usr/bin/env bash
# pipegnn on a CUDA machine whose Python has CUDA torch and torch-geometric but no package index
# (README, "On a GPU"). Installs the wheels of experiments/gpu_wheels.sh (in .whl/, when present) into a
# folder of their own, then:
#   experiments/gpu.sh test [PYTEST ARGS]   the `gpu` tests (tests/test_cuda.py: exactness on cuda:0,
#                                           CUDA-event timelines, device memory, CUDA OOM records, bf16,
#                                           pipelining on one GPU; tests/engines/test_capture.py:
#                                           replayed CUDA graphs against eager steps)
#   experiments/gpu.sh run [TRAIN ARGS]     experiments/train.py, e.g. `-m experiment=poster_pubmed devices=gpu`
#   experiments/gpu.sh bench SCRIPT [ARGS]  benchmarks/SCRIPT, e.g. the depth map on the machine's CPU cores:
#                                           `bench depth.py --stage-threads 8 --datasets synthetic ...`
#   experiments/gpu.sh check OUTDIR         the GPU check, first thing a session lent a GPU runs (at most 8
#                                           minutes; experiments/gpu_check.sh): tests, figures, 2 files
#                                           in OUTDIR; `check OUTDIR --dry-run` runs it on a CPU machine,
#                                           `check OUTDIR --only PART,...` some parts again
# PYTHON picks the interpreter (default: .venv/bin/python when it has CUDA torch, else python3); SITE the
# wheels' folder (default /tmp/pipegnn-site). PIPEGNN_DATA defaults to ../shared/datasets, else to the
# datasets `make gpu-wheels` copied into .whl/datasets.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: experiments/gpu.sh test|run|bench|check [ARGS] (the header of experiments/gpu.sh says more)"
case "${1:-}" in
  -h|--help|help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  test|run|bench|check) ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
if [[ -z "${PYTHON:-}" && -x .venv/bin/python ]] && .venv/bin/python -c \
    "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  PYTHON=.venv/bin/python
fi
if [[ -z "${PIPEGNN_DATA:-}" ]]; then
  PIPEGNN_DATA=$PWD/../shared/datasets
  [[ -d "$PIPEGNN_DATA" || ! -d .whl/datasets ]] || PIPEGNN_DATA=$PWD/.whl/datasets
fi
export PIPEGNN_DATA
site=${SITE:-/tmp/pipegnn-site}
if [[ "$1" == check && " $* " == *" --dry-run "* ]]; then  # the check's commands on this CPU machine
  shift
  [[ -n "${PYTHON:-}" || ! -x .venv/bin/python ]] || PYTHON=.venv/bin/python
  PYTHON=${PYTHON:-python3} exec experiments/gpu_check.sh "$@"
fi
py=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$py" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device visible to torch'; \
print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name(0))"
what=$1
shift
case "$what" in
  test) exec "$py" -m pytest -m gpu tests/test_cuda.py tests/engines/test_capture.py "$@" ;;
  run) exec "$py" experiments/train.py "$@" ;;
  bench) script=${1:?usage: experiments/gpu.sh bench SCRIPT [ARGS]}; shift; exec "$py" "benchmarks/$script" "$@" ;;
  check) PYTHON=$py exec experiments/gpu_check.sh "$@" ;;
esac
