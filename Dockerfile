# syntax=docker/dockerfile:1
# redlease: one image for the operator and the sidecar; the entrypoint is `redlease`.
#   docker build -t redlease:0.2.0 .
#   docker run --rm redlease:0.2.0 --help
#
# Supply chain: the base image is pinned by digest (refresh it deliberately with
# `docker buildx imagetools inspect python:3.11-slim-bookworm` and update the ARG), and every
# Python dependency comes from requirements/image.txt with hashes (`make lock` regenerates it
# from pyproject.toml; a test checks they agree), the build backend from requirements/build.txt.
# The runtime stage has no pip.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# --- build: a self-contained virtualenv with redlease and its sidecar/operator extras ----------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/redlease
COPY requirements/image.txt requirements/build.txt ./requirements/
RUN /opt/redlease/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: \
        -r requirements/image.txt -r requirements/build.txt
COPY pyproject.toml README.md ./
COPY src ./src
# The project itself (no dependencies: they are all pinned above), then no installer left.
RUN /opt/redlease/bin/pip install --no-cache-dir --no-deps --no-build-isolation . \
    && /opt/redlease/bin/redlease --version \
    && /opt/redlease/bin/pip uninstall --yes pip setuptools wheel

# --- runtime: no compiler, no pip, a fixed non-root user -----------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="redlease" \
      org.opencontainers.image.description="Leader election and distributed locks on Redis, for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN python -m pip uninstall --yes pip setuptools wheel \
    && rm -f /usr/local/bin/pip* \
    && groupadd --system --gid 10001 redlease \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin redlease
COPY --from=build /opt/redlease /opt/redlease
ENV PATH=/opt/redlease/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric user so that runAsNonRoot can verify it without resolving names.
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["redlease"]
CMD ["--help"]
