# nbagent: the README's commands. `make test` is the one command that sets up and runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test unit bench lab clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	NBAGENT_BLOCK_NETWORK=1 $(PY) -m pytest tests -q

bench: $(STAMP)
	$(PY) bench/run_all.py

lab: $(STAMP)
	$(PY) -m jupyterlab notebooks

clean:
	rm -rf $(VENV) build *.egg-info
