"""What a long command is doing, on stderr, for a person at a terminal.

``seo verify`` on a table of 300k files lists and checks them for a while; silence for that long
looks like a hang. On a terminal the command shows a spinner with its current step and the time
spent (``rich``); with ``--json``, or when stderr is a pipe or a file, nothing is shown, so
scripts and logs get only the result.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TextIO


def wanted(as_json: bool, stream: TextIO | None = None) -> bool:
    """Show progress: not for ``--json``, only on a terminal."""
    target = stream or sys.stderr
    return not as_json and bool(getattr(target, "isatty", lambda: False)())


@contextlib.contextmanager
def activity(label: str, *, show: bool) -> Iterator[Callable[[str], None]]:
    """A context whose value tells the display the current step (a no-op when ``show`` is false)."""
    if not show:
        yield lambda _: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda step: bar.update(task, description=f"{label}: {step}")
