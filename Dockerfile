# syntax=docker/dockerfile:1
# redlease: one image for the operator and the sidecar; the entrypoint is `redlease`.
#   docker build -t redlease:0.1.0 .
#   docker run --rm redlease:0.1.0 --help

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# --- build: a self-contained virtualenv with redlease and its sidecar/operator extras ----------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/redlease
COPY pyproject.toml README.md ./
COPY src ./src
RUN /opt/redlease/bin/pip install --no-cache-dir ".[sidecar,operator]" \
    && /opt/redlease/bin/redlease --version

# --- runtime: no compiler, no pip cache, a fixed non-root user -----------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="redlease" \
      org.opencontainers.image.description="Leader election and distributed locks on Redis, for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 redlease \
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
