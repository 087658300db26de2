# `make` (or `make help`) lists the targets and variables. Every target that runs Python sets up .venv first.
# Lines starting with `##` and target lines ending in `## text` are what `make help` prints.

PYTHON     ?= python3
VENV       ?= .venv
TORCH      ?=
TORCH_SPEC ?=
ARGS       ?=
TEST_WORKERS ?= auto
PY         := $(VENV)/bin/python
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu

## Variables:
##   PYTHON      the interpreter that creates the virtual environment (default: python3)
##   VENV        where the virtual environment lives (default: .venv)
##   TORCH       empty: torch from PyPI (the CUDA build on Linux); cpu: the CPU-only build from PyTorch's index
##   TORCH_SPEC  the torch requirement installed first, e.g. TORCH_SPEC="torch==2.13.0" (CI pins its wheel this way)
##   TEST_WORKERS pytest-xdist workers for test and test-fast (default auto: one per core; 0 = in-process)
##   ARGS        extra arguments for the script or tool a target runs, e.g. ARGS="train.max_steps=300"
## TORCH and TORCH_SPEC apply when the environment is created; to switch builds, remove the VENV folder first.

# torch goes in before the requirements: `torch>=2.4` is then already satisfied and pip keeps that build.
ifeq ($(TORCH),cpu)
TORCH_INSTALL = $(PY) -m pip install -q --index-url $(TORCH_CPU_INDEX) "$(or $(TORCH_SPEC),torch)"
else ifeq ($(TORCH),)
TORCH_INSTALL = $(if $(TORCH_SPEC),$(PY) -m pip install -q "$(TORCH_SPEC)")
else
$(error TORCH=$(TORCH) is not a known build; use TORCH=cpu or leave TORCH empty (make help explains both))
endif

.DEFAULT_GOAL := help
.PHONY: help setup train test test-fast lint bench tensorboard clean serve notebooks notebooks-run

help: ## list the targets and variables (the default target)
	@echo "Targets:"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@sed -n 's/^## \{0,1\}//p' $(MAKEFILE_LIST)

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(TORCH_INSTALL)
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

setup: $(VENV)/.installed ## create the virtual environment (VENV) and install torch and the requirements (once)

train: setup ## train the default model on the built-in corpus; ARGS go to train.py
	$(PY) train.py $(ARGS)

# Tests run on one worker per core; then those marked cpu_precision again, on the CPU precision path this machine
# does not take (KOCHAR_CPU_BF16 forced by --cpu-bf16=other, tests/conftest.py), so every run proves both the bf16
# and the float32 path; then the `serial` ones (signals, kills, torchrun timing) one at a time. The second pass
# collects only the files that use the marker, unless ARGS choose the tests. Exit code 5 (ARGS selected none of
# them) is not a failure.
PRECISION_FILES = $(if $(ARGS),,$$(grep -rl cpu_precision tests --include='test_*.py'))
PRECISION_PASS = $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --cpu-bf16=other
test: setup ## run the whole test suite, slow tests included, one worker per core; ARGS go to pytest
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not serial" $(ARGS)
	$(PRECISION_PASS) -m "cpu_precision and not serial" $(PRECISION_FILES) $(ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest -q -m serial $(ARGS) || [ $$? -eq 5 ]

test-fast: setup ## run the tests not marked slow
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not slow and not serial" $(ARGS)
	$(PRECISION_PASS) -m "cpu_precision and not slow and not serial" $(PRECISION_FILES) $(ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest -q -m "serial and not slow" $(ARGS) || [ $$? -eq 5 ]

lint: setup ## check the code with ruff: its lint rules, and the layout ruff format gives it
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: setup ## print the speed benchmark's JSON; ARGS go to bench.py, e.g. ARGS=--quick
	$(PY) bench.py $(ARGS)

serve: setup ## start the browser playground on 127.0.0.1:8000; ARGS go to serve.py, e.g. ARGS=port=8080
	$(PY) serve.py $(ARGS)

tensorboard: setup ## serve TensorBoard for the runs in runs/
	$(PY) -m tensorboard.main --logdir runs

$(VENV)/.notebooks: $(VENV)/.installed requirements-notebooks.txt
	$(PY) -m pip install -q -r requirements-notebooks.txt
	touch $@

# JupyterLab starts in notebooks/ (ko/ the originals, en/ the same in English); its kernel is the VENV's Python.
notebooks: $(VENV)/.notebooks ## open the notebooks in JupyterLab (installed into VENV once); ARGS go to jupyter lab
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(ARGS)

# Each notebook runs with its own settings in a fresh kernel over a copy of the project (nothing is written here but the
# notebooks), and is stored with its outputs and its code's hash: tests/notebooks/test_notebooks.py names a notebook whose code
# changed since. All ten take several minutes on a CPU.
notebooks-run: setup ## execute the notebooks and store their outputs; ARGS picks some, e.g. ARGS="ko/04 en/04"
	$(PY) notebooks/execute.py $(ARGS)

clean: ## delete runs, Hydra outputs and the pytest cache (not the VENV folder)
	rm -rf runs outputs multirun .pytest_cache
