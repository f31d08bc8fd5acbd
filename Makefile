# The two set-up commands of README.md: `make demo` and `make test`.
PYTHON ?= python3
PIP = $(PYTHON) -m pip install --quiet --disable-pip-version-check

.PHONY: install install-test demo test lint bench

install:
	$(PIP) -e . torch==2.13.0

install-test:
	$(PIP) -e '.[test]' torch==2.13.0

demo: install
	$(PYTHON) -m radt -e radt-demo examples/train.py --epochs 1
	@echo
	@echo "The run is in ./mlflow.db (experiment radt-demo). Look at it with:"
	@echo "  radt ui                                             # radT's pages: runs, time series, compare; http://127.0.0.1:8050/"
	@echo "  mlflow ui --backend-store-uri sqlite:///mlflow.db   # MLflow's own UI; http://127.0.0.1:5000"
	@echo "Samples at full rate: the artifact radt/samples.parquet of the run."

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check radt listeners frontend

test: install-test lint
	$(PYTHON) -m pytest -q --durations=15

bench: install
	$(PYTHON) benchmarks/overhead.py
	$(PYTHON) benchmarks/ingest.py
	$(PYTHON) benchmarks/startup.py
