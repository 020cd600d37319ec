"""Another tool's files in the table directory before the first run, and what the user does
about the library's refusal of them.

A table refuses them (``ExistingFilesError``); the user then asks it to adopt them
(``adopt_existing_files=True``), which a JSON table refuses in turn (``ConfigError``: it adopts
Parquet files only, docs/operations.md). A dataset group's root refuses them too, and
``DatasetSink`` adopts no files (``ConfigError``, docs of ``adopt_existing_files``): the user
moves them out of the directory, as both refusals say, and no reader may show their rows again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.explorer.interpreter import Interpreter

FOREIGN_NAME = "part-00000-foreign.parquet"


def adopting_into_json(it: Interpreter) -> bool:
    """The user asked a JSON table to adopt the other tool's (Parquet) files: refused, the
    library adopts Parquet files only (docs/operations.md)."""
    return it.setup.foreign_files and it.query.adopt and it.model.foreign_kept and it.setup.format == "json"


def remedy_existing_files(it: Interpreter) -> None:
    """After ``ExistingFilesError``: a table adopts the files; a group's root cannot, so they move out."""
    if it.setup.group:
        forget_foreign_files(it)
    else:
        it.query = replace(it.query, adopt=True)


def remedy_json_adoption(it: Interpreter) -> None:
    """After a JSON table refused to adopt them: the files move out, the option goes."""
    forget_foreign_files(it)
    it.query = replace(it.query, adopt=False)


def forget_foreign_files(it: Interpreter) -> None:
    """The other tool's files leave the table directory: no reader may show their rows again."""
    for f in it.world.table.rglob(FOREIGN_NAME):
        f.unlink()
    it.model.foreign_kept = False
    foreign = {r.id for r in it.world.records.values() if r.source == "foreign"}
    for seen in it.model.acks.values():
        seen -= foreign
    it.say("    the other tool's files moved out of the table's directory")
