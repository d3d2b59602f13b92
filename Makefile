# make help lists the targets. Every target sets up .venv first when it is missing or stale.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
# torch is installed only when the environment has none. The +cpu build is never a multi-GB
# CUDA build: PyPI has no +cpu wheels, so it comes from a local wheel or PyTorch's CPU index;
# its own dependencies come from PyPI with the project (--no-deps keeps them off that index).
TORCH_SPEC ?= torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: help setup run sweep-demo doctor test test-all test-gpu gpu-check lint format type imports bench ui

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'

setup: $(VENV)/.installed ## create .venv with a CPU torch (if none) and the runner with its dev tools

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q --no-deps "$(TORCH_SPEC)" --index-url $(TORCH_INDEX)
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

run: setup ## profile the naive RMSNorm once and log it to ./mlflow.db
	$(PY) -m runner +workload=rmsnorm_naive

sweep-demo: setup ## the three-variant RMSNorm study: one parent run, three children
	$(PY) -m runner -m +experiment=rmsnorm_comparison

doctor: setup ## check this host's assumptions (Neuron, CUDA, store, Slurm); report in doctor/
	$(PY) -m runner.doctor

test: setup ## unit and integration tests plus a few CLI smoke runs (minutes; tests/README.md)
	$(PY) -m pytest -m "unit or integration or smoke"

# test-all runs its files on TEST_WORKERS pytest-xdist workers, each file whole on one worker (its
# module fixtures and its timing-sensitive tests stay together): most of the time is subprocesses
# importing torch on one core each, so two workers keep both cores busy (tests/README.md, Times)
TEST_WORKERS ?= 2

test-all: setup ## every test: unit, integration, system (CLI, launchers, Slurm, stand-in, browser)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test-gpu: setup ## run only the CUDA tests
	$(PY) -m pytest -m gpu

gpu-check: setup ## on a GPU: the CUDA tests, the study under each launcher, the runner beside Timer (docs/benchmarks.md)
	$(PY) benchmarks/gpu_check.py

lint: setup ## ruff check, ruff format check and yamllint over conf/
	$(PY) -m ruff check . && $(PY) -m ruff format --check . && $(PY) -m yamllint --strict conf/

format: setup ## ruff's fixes and formatting, in place
	$(PY) -m ruff check --fix . && $(PY) -m ruff format .

type: setup ## mypy --strict over runner/ and workloads/
	$(PY) -m mypy

imports: setup ## the import-layer contract ([tool.importlinter] in pyproject.toml)
	$(VENV)/bin/lint-imports

bench: setup ## runner overhead against a hand-written script
	$(PY) benchmarks/runner_overhead.py

ui: setup ## open the MLflow UI on http://127.0.0.1:5000
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///mlflow.db
