# Two commands for users: `make run` and `make test`. Both create the environment first (idempotent).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.pipegnn-installed
# Raw Planetoid files (Cora, CiteSeer) are read from here when present; never written to.
export PIPEGNN_DATA ?= $(abspath ../shared/datasets)

.PHONY: setup run test test-all clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch alone and pinned first: an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -r requirements.txt
	# ogb without its `outdated` dependency (a PyPI version check in a thread at import); see requirements.txt.
	$(PY) -m pip install --quiet --no-deps ogb==1.3.6
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: setup
	$(PY) experiments/train.py $(ARGS)

test: setup
	$(PY) -m pytest -m "not slow" $(ARGS)

test-all: setup
	$(PY) -m pytest $(ARGS)

clean:
	rm -rf $(VENV) .cache outputs multirun .pytest_cache
