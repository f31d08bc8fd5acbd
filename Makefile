# The set-up commands of README.md: `make demo`, `make test` and `make test-fast`.
# Each makes the project's virtualenv (.venv) with $(PYTHON) first and installs into it,
# never into the python3 that happens to be active.
PYTHON ?= python3
VENV ?= .venv
PY = $(VENV)/bin/python
PIP = $(PY) -m pip install --quiet --disable-pip-version-check
# the fast tier: everything but the browser, PostgreSQL, Slurm and slow end-to-end tests
FAST = not browser and not postgres and not slurm and not slow

.PHONY: venv install install-test install-docs demo test test-fast coverage-fast lint bench docs

venv: $(PY)

# Each problem is one line (make's own "*** ...  Stop."), found by probes that change nothing
# (so `make -n` makes no virtualenv); Debian ships ensurepip in python3-venv.
NO_PYTHON = $(PYTHON) not found: install Python 3.10 or newer, or run make PYTHON=/path/to/python3
OLD_PYTHON = radT needs Python 3.10 or newer, $(PYTHON) is older: run make PYTHON=python3.12 (or another)
NO_VENV = $(PYTHON) cannot make a virtualenv (no ensurepip): install python3-venv (Debian, Ubuntu: apt-get install python3-venv) and run make again
PYTHON_NEW_ENOUGH = $(PYTHON) -c 'import sys; print("yes" if sys.version_info >= (3, 10) else "")'
PYTHON_CAN_VENV = $(PYTHON) -c 'import ensurepip, venv; print("yes")' 2>/dev/null

$(PY):
	$(if $(shell command -v $(PYTHON)),,$(error $(NO_PYTHON)))
	$(if $(shell $(PYTHON_NEW_ENOUGH)),,$(error $(OLD_PYTHON)))
	$(if $(shell $(PYTHON_CAN_VENV)),,$(error $(NO_VENV)))
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }
	@echo "made the virtualenv $(VENV) (radT and its tools go there; . $(VENV)/bin/activate to use them)"

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PIP) -e . torch==2.13.0
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PIP) -e '.[test]' torch==2.13.0
	@touch $@ $(VENV)/.installed

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

$(VENV)/.installed-docs: pyproject.toml | $(PY)
	$(PIP) -e '.[docs]'
	@touch $@

install-docs: $(VENV)/.installed-docs

demo: install
	$(PY) -m radt -e radt-demo examples/train.py --epochs 1
	@echo
	@echo "The run is in ./mlflow.db (experiment radt-demo). Look at it with:"
	@echo "  . $(VENV)/bin/activate                              # radt and mlflow are in the project's virtualenv"
	@echo "  radt ui                                             # radT's pages: runs, time series, compare; http://127.0.0.1:8050/"
	@echo "  mlflow ui --backend-store-uri sqlite:///mlflow.db   # MLflow's own UI; http://127.0.0.1:5000"
	@echo "Samples at full rate: the artifact radt/samples.parquet of the run."

lint: install-test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check radt listeners frontend

# every test, on two pytest-xdist workers: each test file on one worker (its module-scoped fixtures
# made once) and the tests of each cluster marker (slurm, postgres) on one (tests/conftest.py)
test: install-test lint
	$(PY) -m pytest -q --durations=15 -n 2 --dist loadgroup --no-loadscope-reorder

# two workers (pytest-xdist): every test has its own tmp folder, store, RADT_HOME and ports
test-fast: install-test
	$(PY) -m pytest -q --durations=15 -n 2 -m "$(FAST)"

# the fast tier under coverage, then each product module and whether a fast test exercised it
coverage-fast: install-test
	$(PY) -m coverage erase
	$(PY) -m coverage run -m pytest -q -p no:cacheprovider -n 2 -m "$(FAST)"
	$(PY) -m coverage combine -q
	$(PY) tests/modules_covered.py

# the documentation site from docs/ and mkdocs.yml into site/ (open site/index.html); --strict:
# a broken link, anchor or docstring reference is an error (tests/test_docs.py builds it too)
docs: install-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

bench: install
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/ingest.py
	$(PY) benchmarks/startup.py
