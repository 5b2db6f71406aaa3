"""Library logging: stdlib ``logging`` under the ``redlease`` logger, with key=value fields.

A library must not print: applications decide where logs go. The sidecar and operator route
this logger through structlog (JSON or console); plain users get standard logging.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("redlease")


def event(level: int, message: str, **fields: object) -> None:
    """Log ``message`` with ``fields`` (rendered as key=value, also passed as ``extra``)."""
    if not logger.isEnabledFor(level):
        return
    text = " ".join(f"{k}={v!r}" for k, v in fields.items())
    logger.log(level, "%s %s", message, text, extra={"redlease": fields})


def warning(message: str, **fields: object) -> None:
    event(logging.WARNING, message, **fields)


def exception(message: str, **fields: object) -> None:
    text = " ".join(f"{k}={v!r}" for k, v in fields.items())
    logger.exception("%s %s", message, text, extra={"redlease": fields})


def cleanup_failed(lock: str, node: str, exc: BaseException, *, reached: bool) -> None:
    """An undo after a failed flow failed too. A warning only when Redis had answered the flow
    (a grant may be left until its TTL ends); when nothing reached Redis (an outage, a refused
    login) there is nothing to undo, and the caller reports the outage itself."""
    level = logging.WARNING if reached else logging.DEBUG
    event(level, "cleanup failed", lock=lock, node=node, error=str(exc))
