"""Every sidecar's terms over the whole run, and the checks on them: no two sidecars of a lock
leading at the same real time, and fencing tokens that only rise.

Each sidecar's ``/status`` is long-polled (``?wait=30&since=VERSION``): the answer comes as
soon as what it says changes (leader, holder, token...), so a step-down is seen within one
local HTTP answer, without polling. A *term* is one sidecar process leading with one fencing
token. Its interval, in wall-clock seconds (every process here reads the one machine's clock):

* start: the term's ``acquired_at``, the Redis server's time of the grant as the sidecar
  reports it; the sidecar claims to lead only once the grant came back, so not before;
* end: the first of the moments an answer of that process that no longer claims the term was
  *received*, the time of its own log line saying it stopped leading or stepped down (written
  once the term was over, before the answer), its SIGKILL was sent, or the monitor stopped (the
  end of the run). The process stopped claiming the term before that. (The log line matters for
  a planned step-down: the successor acquires milliseconds after the release, which comes after
  the step-down, and an answer received a little late must not make that an overlap.)

Each interval therefore contains the time its sidecar claimed to lead, and intervals of two
processes that do not intersect prove that their terms did not overlap. An intersection is
counted as an overlap (it could also be an answer that came late: the gap figures say how close
the hand-overs came). Tokens: per lock, a term whose token is not above that of every term
acquired before it is a regression (:func:`chaos.checker.count_late` on the ``acquired_at``
points); :func:`chaos.checker.count_dual_leaders` checks the leader answers themselves (an
answer claiming a term, requested after another answer claiming a newer one had arrived).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from bench.failover import Sidecar
from chaos.checker import Observed, Sample, count_dual_leaders, count_late
from redlease.core.times import parse_time
from soak.common import get_json

WAIT = 30.0  # s a long-poll waits for a change
RETRY = 0.2  # s before asking again a sidecar that did not answer (starting, or busy)


@dataclass
class Term:
    """One sidecar process (``proc``: identity#pid) leading ``lock`` with ``token``, from
    ``start`` to at most ``end`` (epoch seconds; None while it still leads)."""

    lock: str
    proc: str
    token: int
    start: float
    end: float | None = None


class Monitor:
    """Long-polls the sidecars it is told to :meth:`watch` and records their terms."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.terms: list[Term] = []
        self.open: dict[str, Term] = {}  # process -> the term its latest answer claims
        self.claims: dict[str, list[Sample]] = defaultdict(list)  # lock -> leader answers
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.sidecars: dict[str, Sidecar] = {}
        self.no_acquired_at: dict[str, int] = defaultdict(int)  # leader answers without it
        self._changed = asyncio.Event()

    @staticmethod
    def proc(sc: Sidecar) -> str:
        return f"{sc.identity}#{sc.proc.pid}"

    def watch(self, lock: str, sc: Sidecar) -> None:
        key = self.proc(sc)
        self.sidecars[key] = sc
        self.tasks[key] = asyncio.create_task(self._follow(lock, sc, key), name=f"soak {key}")

    def killed(self, sc: Sidecar) -> None:
        """``sc`` was just sent SIGKILL: its term (if any) ends now."""
        at = time.time()
        key = self.proc(sc)
        task = self.tasks.pop(key, None)
        if task is not None:
            task.cancel()
        self._close(key, at, answered=False)
        self.sidecars.pop(key, None)

    async def stop(self) -> None:
        """Stop following; the terms still claimed end now."""
        at = time.time()
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.tasks.clear()
        for key in list(self.open):
            self._close(key, at, answered=False)

    async def _follow(self, lock: str, sc: Sidecar, key: str) -> None:
        base = f"http://127.0.0.1:{sc.port}/status"
        version: str | None = None
        while True:
            url = base if version is None else f"{base}?wait={WAIT:g}&since={quote(version)}"
            sent = time.time()
            doc = await get_json(self.session, url, WAIT + 10)
            received = time.time()
            if not isinstance(doc, dict):
                await asyncio.sleep(RETRY)
                continue
            self._record(lock, key, sent, received, doc)
            version = doc.get("version")

    def _record(
        self, lock: str, key: str, sent: float, received: float, doc: dict[str, Any]
    ) -> None:
        token = doc.get("fencing_token") if doc.get("leader") is True else None
        term = self.open.get(key)
        if term is not None and term.token != token:
            self._close(key, received)
        if isinstance(token, int):
            self.claims[lock].append((sent, received, key, True, token))
            if key not in self.open:
                start = parse_time(doc.get("acquired_at"))
                if start is None:
                    self.no_acquired_at[lock] += 1
                else:
                    self.open[key] = Term(lock, key, token, start)
                    self.terms.append(self.open[key])
        self._changed.set()
        self._changed = asyncio.Event()

    def _close(self, key: str, at: float, answered: bool = True) -> None:
        """End ``key``'s open term at ``at``; ``answered``: ``at`` is when an answer no longer
        claiming it came in, and the process's log may say when the term really ended."""
        term = self.open.pop(key, None)
        if term is not None:
            ended = self._logged_end(key, term) if answered else None
            term.end = at if ended is None else min(at, ended)
            self._changed.set()
            self._changed = asyncio.Event()

    def _logged_end(self, key: str, term: Term) -> float | None:
        """The time of the process's log line saying that ``term`` ended (the elector writes
        it, flushed, once the term is over and before it publishes ``leader: false``)."""
        sc = self.sidecars.get(key)
        try:
            text = (sc.state_dir / "sidecar.log").read_text(errors="replace") if sc else ""
        except OSError:
            return None
        for line in reversed(text.splitlines()):
            if '"stopped leading"' in line or '"stepped down"' in line:
                with contextlib.suppress(ValueError):
                    doc = json.loads(line)
                    if doc.get("fencing_token") == term.token:
                        return parse_time(doc.get("timestamp"))
        return None

    # -- what the fault drivers ask ----------------------------------------------------------

    def max_token(self, lock: str) -> int:
        """The highest token of any term of ``lock`` seen so far (0: none)."""
        return max((t.token for t in self.terms if t.lock == lock), default=0)

    def leader(self, lock: str, above: int = 0) -> Term | None:
        """A term of ``lock`` above token ``above`` that its sidecar claims now."""
        return next((t for t in self.open.values() if t.lock == lock and t.token > above), None)

    def first_above(self, lock: str, token: int) -> Term | None:
        """The first acquired term of ``lock`` with a token above ``token``."""
        later = (t for t in self.terms if t.lock == lock and t.token > token)
        return min(later, key=lambda t: t.start, default=None)

    async def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Whether ``predicate`` held within ``timeout`` s (checked on every new answer)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return True

    # -- the verdict ---------------------------------------------------------------------------

    def verdict(self, locks: Iterable[str]) -> dict[str, Any]:
        """Over the terms of ``locks``: overlaps (pairs of terms of different processes whose
        intervals intersect), the smallest gap between a term's end and a later term's start
        (another process's), token regressions and dual-leader answers."""
        locks = set(locks)
        overlaps: list[dict[str, Any]] = []
        gap: float | None = None
        regressions = dual = terms = unreadable = 0
        for lock in sorted(locks):
            mine = sorted((t for t in self.terms if t.lock == lock), key=lambda t: t.start)
            terms += len(mine)
            for i, a in enumerate(mine):
                assert a.end is not None, "verdict() before stop()"
                for b in mine[i + 1 :]:
                    if b.proc == a.proc:
                        continue
                    if b.start < a.end:
                        overlaps.append({"lock": lock, "a": _term(a), "b": _term(b)})
                    else:
                        gap = b.start - a.end if gap is None else min(gap, b.start - a.end)
            regressions += count_late(
                (Observed(t.start, t.start, t.token) for t in mine), strict=True
            )
            dual += count_dual_leaders(self.claims[lock])
            unreadable += self.no_acquired_at[lock]
        return {
            "terms": terms,
            "overlaps": overlaps,
            "smallest_gap_s": None if gap is None else round(gap, 3),
            "token_regressions": regressions,
            "dual_leader_samples": dual,
            "leader_answers_without_acquired_at": unreadable,
        }


def _term(t: Term) -> dict[str, Any]:
    return {"proc": t.proc, "token": t.token, "start": t.start, "end": t.end}
