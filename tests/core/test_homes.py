"""redlease's state kept beside a pool or cluster node (core/homes.py): an object that takes no
attribute (asyncio cluster nodes) never inherits the state of a freed object at its address."""

from __future__ import annotations

from redlease.core import homes
from redlease.core.client import scripting


class Slotted:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class Plain:
    pass


def test_state_lives_on_an_object_with_a_dict() -> None:
    home = Plain()
    homes.state(home)["x"] = 1
    assert home.__dict__["x"] == 1


def test_a_new_slotted_object_never_inherits_a_freed_ones_state() -> None:
    first = Slotted("a")
    verdict = scripting(first)
    assert scripting(first) is verdict
    address = id(first)
    del first  # the table still holds it: its address cannot be reused
    others = [Slotted(str(i)) for i in range(1000)]
    assert all(id(o) != address for o in others)
    assert all(scripting(o) is not verdict for o in others)
