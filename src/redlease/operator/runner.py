"""Run the operator: kopf's own loop, signal handling and liveness endpoint."""

from __future__ import annotations

import logging

from redlease.operator.handlers import OperatorConfig, Runtime, build_registry, operator_settings


def run_operator(config: OperatorConfig) -> int:
    """Block running the operator until SIGTERM/SIGINT; returns the exit status."""
    import kopf

    kopf.configure(verbose=config.verbose, log_format=kopf.LogFormat.FULL)
    if not config.verbose:
        # One "Timer succeeded" line per lock per refresh would drown everything else.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    runtime = Runtime(config)
    registry = build_registry(runtime)
    kopf.run(
        registry=registry,
        settings=operator_settings(config),
        standalone=True,
        clusterwide=config.clusterwide,
        namespaces=list(config.namespaces),
        liveness_endpoint=config.liveness,
    )
    return 0
