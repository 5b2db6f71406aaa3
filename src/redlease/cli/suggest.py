"""Did-you-mean for the command line (pure): a misspelled flag, subcommand or choice gets the
closest real one, as argparse's ``suggest_on_error`` does from Python 3.14 on (redlease runs on
3.11, so the suggestion is made here, with :mod:`difflib`)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)$")


def closest(given: str, known: Iterable[str]) -> str | None:
    """The known word closest to ``given``, or None when none is close."""
    found = difflib.get_close_matches(given, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def unrecognized(extras: Sequence[str], options: Iterable[str]) -> str:
    """argparse's "unrecognized arguments" message, each misspelled flag with its suggestion
    (``--lok`` -> "did you mean --lock?")."""
    known = [o for o in options if o.startswith("--")]
    hints = []
    for word in extras:
        if word.startswith("--"):
            name = word.partition("=")[0]
            match = closest(name, known)
            if match is not None and match != name:
                hints.append(f"{name}: did you mean {match}?")
    message = f"unrecognized arguments: {' '.join(extras)}"
    return f"{message} ({'; '.join(hints)})" if hints else message


def with_choice_hint(message: str) -> str:
    """argparse's "invalid choice" message, with the closest choice when one is close."""
    found = _CHOICE.search(message)
    if found is None:
        return message
    choices = re.findall(r"'([^']*)'", found.group("choices"))
    match = closest(found.group("given"), choices)
    return message if match is None else f"{message}: did you mean {match!r}?"
