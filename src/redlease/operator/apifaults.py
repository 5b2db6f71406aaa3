"""How the operator's kopf rides out API server faults (docs/operator.md, "API faults").

Found by tests/operator/test_api_faults.py against kopf's defaults:

* a request that is never answered (a partition) waits kopf's 5-minute request timeout, so the
  statuses stayed stale for minutes after the API server was back: requests now time out after
  :data:`REQUEST_TIMEOUT` and are retried;
* kopf retries a failed request for 54 s, then gives up; a timer whose status patch is given up
  ends, and kopf does not start it again (kopf's ``daemons._runner``: "forever stopped"), so
  that DistributedLock would not be refreshed again until a restart. Retries now go on for as
  long as the outage lasts, every :data:`MAX_BACKOFF` seconds at most, and Events wait for the
  API server the same way (:mod:`.events`);
* an HTTP 410 Gone answer to a watch request stopped the whole operator: it relists now
  (:mod:`.watchgone`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from redlease.errors import KubeError
from redlease.operator import watchgone

REQUEST_TIMEOUT = 15.0  # s: one API request, answer included (kopf's default: 300)
CONNECT_TIMEOUT = 5.0  # s: to open a connection to the API server
WATCH_SERVER_TIMEOUT = 300  # s: the API server ends a watch after this; kopf resumes it
MAX_BACKOFF = 10.0  # s: the longest pause between two attempts of a request


def transient(exc: KubeError) -> bool:
    """Whether a failed request may succeed if made again: no answer, 5xx, 408 or 429 (the
    API server is away or busy), not a refusal such as 403 or 404."""
    return exc.status is None or exc.status >= 500 or exc.status in (408, 429)


class EndlessBackoff:
    """1, 2, 4, ... seconds, capped at ``cap`` and never exhausted; a fresh sequence for every
    request (kopf iterates it once per request)."""

    def __init__(self, cap: float = MAX_BACKOFF) -> None:
        self.cap = cap

    def __iter__(self) -> Iterator[float]:
        delay = 1.0
        while True:
            yield delay
            delay = min(delay * 2, self.cap)


def harden(settings: Any) -> None:
    """Apply the above to kopf ``settings`` (and install the HTTP 410 relist)."""
    watchgone.install()
    settings.networking.request_timeout = REQUEST_TIMEOUT
    settings.networking.connect_timeout = CONNECT_TIMEOUT
    settings.networking.error_backoffs = EndlessBackoff()
    settings.posting.default_backoffs = EndlessBackoff()
    settings.watching.connect_timeout = CONNECT_TIMEOUT
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT
