"""What every ``seo`` command shares: the group's options (where to print, storage options),
``--json`` after the command, and the exit codes."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .printer import Printer

if TYPE_CHECKING:
    from ..storage.base import Storage

CommandFunction = TypeVar("CommandFunction", bound=Callable[..., Any])

EXIT_FAILED = 1
EXIT_WARNINGS = 3
#: an extra the command needs for this table is not installed (``extras``), or an Iceberg catalog it
#: uses has no configuration here (``CatalogNotConfiguredError``); nothing was changed
EXIT_MISSING_EXTRA = 4


class CliContext:
    """What every command gets from the group's options: where to print, storage options."""

    def __init__(self, as_json: bool, storage_options: dict[str, Any]) -> None:
        self.out = Printer(as_json)
        self.as_json = as_json
        self.storage_options = storage_options

    def storage(self, table: str) -> Storage:
        from ..readers.table_location import locate

        return locate(table, self.storage_options, allow_group=True).storage


def storage_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in os.environ.items():  # SEO_STORAGE__ENDPOINT_URL=... (secrets from the environment)
        if key.startswith("SEO_STORAGE__"):
            options[key[len("SEO_STORAGE__") :].lower()] = value
    for pair in pairs:
        if "=" not in pair:
            raise click.BadParameter(f"expected key=value, got {pair!r}", param_hint="--storage-option")
        key, value = pair.split("=", 1)
        options[key] = value
    return options


def json_option(f: CommandFunction) -> CommandFunction:
    """Allow ``--json`` after the subcommand too (``seo status T --json``)."""
    return click.option("--json", "local_json", is_flag=True, help="Print JSON.")(f)


def printer_for(ctx: CliContext, local_json: bool) -> Printer:
    if local_json:
        ctx.out.as_json = True
    return ctx.out
