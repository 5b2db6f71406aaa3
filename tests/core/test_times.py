"""The one RFC 3339 formatter and parser: precisions, the Z, offsets, bad input."""

from __future__ import annotations

import pytest

from redlease.core.times import format_time, parse_time

WHEN = 1_767_323_045.678901  # 2026-01-02T03:04:05.678901Z


def test_each_precision_is_cut_not_rounded_and_written_in_utc() -> None:
    assert format_time(WHEN) == "2026-01-02T03:04:05Z"
    assert format_time(WHEN, "milliseconds") == "2026-01-02T03:04:05.678Z"
    assert format_time(WHEN, "microseconds") == "2026-01-02T03:04:05.678901Z"
    assert format_time(0.999, "seconds") == "1970-01-01T00:00:00Z"


def test_round_trip_at_every_precision() -> None:
    assert parse_time(format_time(WHEN)) == 1_767_323_045
    assert parse_time(format_time(WHEN, "milliseconds")) == pytest.approx(WHEN, abs=1e-3)
    assert parse_time(format_time(WHEN, "microseconds")) == pytest.approx(WHEN, abs=1e-6)


def test_reads_any_offset() -> None:
    assert parse_time("2026-01-02T05:04:05+02:00") == parse_time("2026-01-02T03:04:05Z")


@pytest.mark.parametrize("text", [None, "", 17, "yesterday", "2026-13-01T00:00:00Z"])
def test_absent_or_unreadable_is_none(text: object) -> None:
    assert parse_time(text) is None
