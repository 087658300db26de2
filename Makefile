# make train   - set up .venv (first time) and train the default model on the embedded corpus
# make test    - run the whole test suite (slow tests included)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Extra pip arguments, e.g. TORCH_SPEC="torch==2.13.0" to pin the wheel CI uses.
TORCH_SPEC ?=

.PHONY: setup train test test-fast lint bench tensorboard clean

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(if $(TORCH_SPEC),$(PY) -m pip install -q "$(TORCH_SPEC)")
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

setup: $(VENV)/.installed

train: setup
	$(PY) train.py $(ARGS)

test: setup
	$(PY) -m pytest -q $(ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(ARGS)

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(PY) bench.py $(ARGS)

tensorboard: setup
	$(PY) -m tensorboard.main --logdir runs

clean:
	rm -rf runs outputs multirun .pytest_cache
