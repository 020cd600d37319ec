"""The library stays readable in pieces: no function over 80 lines, no module over 550 lines, no
module docstring over 40 lines (an essay goes to docs/design/, the docstring says why in a few
lines and points there). Each failure names the place and its size."""

from __future__ import annotations

import ast
from pathlib import Path

import streaming_exactly_once

PACKAGE = Path(streaming_exactly_once.__file__).parent
MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 550
MAX_DOCSTRING_LINES = 40


def _modules() -> list[tuple[str, str, ast.Module]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found.append((str(path.relative_to(PACKAGE.parent)), text, ast.parse(text)))
    assert len(found) > 100  # the walk found the library
    return found


def _lines(text: str) -> int:
    return len(text.splitlines())


def test_no_function_is_longer_than_80_lines():
    """From the ``def`` line to the function's last line, decorators not counted."""
    long = [
        f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, _, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines: split them - {long}"


def test_no_module_is_longer_than_550_lines():
    long = [f"{path} ({_lines(text)} lines)" for path, text, _ in _modules() if _lines(text) > MAX_FILE_LINES]
    assert long == [], f"modules over {MAX_FILE_LINES} lines: split them by concept - {long}"


def test_no_module_docstring_is_longer_than_40_lines():
    long = []
    for path, _, tree in _modules():
        doc = ast.get_docstring(tree, clean=False)
        if doc is not None and _lines(doc) > MAX_DOCSTRING_LINES:
            long.append(f"{path} ({_lines(doc)} lines)")
    assert long == [], f"module docstrings over {MAX_DOCSTRING_LINES} lines: move the essay to docs/design/ - {long}"


def test_the_checks_see_an_oversized_function():
    """The measure itself: a function of 81 lines counts as 81, one of 80 as 80."""
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    tree = ast.parse(f"def f():\n{body}\n    return 0\n\n\ndef g():\n{body}\n")
    sizes = {n.name: n.end_lineno - n.lineno + 1 for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert sizes == {"f": 81, "g": 80}
