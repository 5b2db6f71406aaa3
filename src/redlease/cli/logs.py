"""structlog set-up for the `redlease` commands: JSON lines when stderr is not a TTY (containers,
log shippers), readable console output on a TTY. The library's stdlib ``redlease`` logger, and in
``redlease operator`` kopf's loggers, are routed through the same renderer, so every line has one
format.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("auto", "json", "console")


def configure(level: str = "info", fmt: str = "auto", stream: Any = None) -> None:
    """Route structlog and stdlib logging to ``stream`` (stderr) in one format."""
    stream = stream or sys.stderr
    if fmt == "auto":
        fmt = "console" if stream.isatty() else "json"
    renderer: Any = (
        # a plain traceback: with ``rich`` installed the default one prints every frame's
        # local variables, passwords included
        structlog.dev.ConsoleRenderer(
            colors=stream.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        pass_foreign_args=True,  # the formatter clears record.args before the pre-chain
        # other libraries' records (aiohttp's "Error handling request") carry exc_info: render
        # it as a traceback, not as the repr of a (type, value, <traceback object>) tuple
        foreign_pre_chain=[
            *shared,
            structlog.stdlib.ExtraAdder(),
            _library_fields,
            _kopf_fields,
            structlog.processors.format_exc_info,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))
    for noisy in ("aiohttp.access", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _library_fields(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Library records carry their fields in ``extra={"redlease": {...}}``: flatten them and keep
    only the message (not the pre-rendered key=value text) as the event."""
    fields = event.pop("redlease", None)
    args = event.pop("positional_args", None)
    if isinstance(fields, dict) and args:
        event["event"] = str(args[0])
        for key, value in fields.items():
            event.setdefault(key, value)
    return event


def _kopf_fields(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """kopf's per-object records carry the object as ``k8s_ref`` (``object``, as kopf's own JSON
    format names it) next to its internals (``settings``, ``k8s_skip``), which are dropped."""
    event.pop("settings", None)
    event.pop("k8s_skip", None)
    ref = event.pop("k8s_ref", None)
    if isinstance(ref, dict):
        event.setdefault("object", ref)
    return event
