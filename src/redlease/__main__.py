"""``python -m redlease`` is the ``redlease`` command."""

from redlease.cli import program

program()
