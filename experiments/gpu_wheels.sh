#!/usr/bin/env bash
# Fetch, where PyPI is reachable, the wheels a CUDA machine without a package index needs to run pipegnn
# (README, "On a GPU"): the pinned packages of requirements.txt that such a machine's usual image (CUDA
# torch, torch-geometric, numpy, scipy, pandas, matplotlib, psutil, pytest, PyYAML) lacks, for its Python;
# and into DIR/datasets the real graphs the GPU check trains (Amazon Computers' and Coauthor Physics'
# .npz, 3.4 and 3.6 MB, from $PIPEGNN_DATA), so that they travel with the checkout.
#   experiments/gpu_wheels.sh [DIR] [PYTHON_VERSION]      (defaults: .whl, 3.12; `make gpu-wheels
#                                                          GPU_PYTHON=3.11` for another Python)
# antlr4-python3-runtime (hydra's parser runtime) has no wheel on PyPI: it is built here (pure Python).
# DGL is not among them: no DGL wheel matches a recent CUDA torch, so GPU runs are PyG only.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.whl}
pyver=${2:-3.12}
py=${PYTHON:-.venv/bin/python}
pin() { grep -E "^$1==" requirements.txt | cut -d' ' -f1; }
mkdir -p "$dir"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms+=(--platform "$p")
done
"$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  "${platforms[@]}" -d "$dir" "$(pin hydra-core)" "$(pin omegaconf)" "$(pin torchgpipe)" "$(pin pymetis)"
"$py" -m pip wheel --quiet --no-deps -w "$dir" antlr4-python3-runtime==4.9.3
for graph in Amazon/Computers/raw/amazon_electronics_computers.npz Coauthor/Physics/raw/ms_academic_phy.npz; do
  if [[ -f "${PIPEGNN_DATA:-}/$graph" ]]; then
    mkdir -p "$dir/datasets/$(dirname $graph)"
    cp "$PIPEGNN_DATA/$graph" "$dir/datasets/$graph"
  else
    echo "note: ${PIPEGNN_DATA:-\$PIPEGNN_DATA}/$graph not found; the GPU check's real graph will download or fail" >&2
  fi
done
ls -1R "$dir"
