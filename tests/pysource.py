"""Python source parsed with :mod:`ast` in the tests: every test that parses goes through here.

A parse goes through :func:`gpuseat.pysource.parse_python`, which tries again when another thread of the
process uses :mod:`ast` at the same moment (an xdist worker's thread printing a traceback, a store opened
from a thread) and trips CPython 3.11's shared AST recursion counter: ``SystemError: AST constructor
recursion depth mismatch`` (python/cpython#106905), once seen in clean-clone CI inside a layering test.
Any other error (a ``SyntaxError``, another ``SystemError``) is raised as it is.
"""

from __future__ import annotations

import ast
from pathlib import Path

from gpuseat.pysource import parse_python


def parse_text(text: str) -> ast.Module:
    """``ast.parse(text)``, tried again past python/cpython#106905."""
    return parse_python(text)


def parse_file(path: Path) -> ast.Module:
    """The module at ``path`` (read as UTF-8) parsed like :func:`parse_text`."""
    return parse_python(path.read_text(encoding="utf-8"))
