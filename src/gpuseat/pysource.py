"""Parsing Python source with :mod:`ast`, tried again past CPython 3.11's shared AST recursion counter.

CPython 3.11 keeps the recursion counter that ``ast.parse`` uses while it builds the tree's Python objects
once per interpreter, not per thread (python/cpython#106905): when another thread builds AST objects at the
same moment (it parses too, or prints a traceback: 3.11's :mod:`traceback` parses the source line to place
its ``^^^`` carets), the parse fails with ``SystemError: AST constructor recursion depth mismatch`` although
the source is fine. Every parse starts the counter afresh, so the parse is simply tried again; any other
error (another ``SystemError``, a ``SyntaxError``) is raised as it is, at once. gpuseat parses at run time
only here: the store reads its migrations' revisions (from the hub hooks' worker threads too) and the
SkyPilot catalog import reads its ``GpuInfo`` literals.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

#: the start of the message CPython 3.11 gives when two threads' parses mix up its counter
AST_COUNTER_MISMATCH = "AST constructor recursion depth mismatch"
#: tries in all: the race needs another thread's parse inside this one's few milliseconds, so a second is
#: all but always enough; a few more cover a busy process
PARSE_TRIES = 5


def _retried(parse: Callable[[], _T]) -> _T:
    for _ in range(PARSE_TRIES - 1):
        try:
            return parse()
        except SystemError as exc:
            if not str(exc).startswith(AST_COUNTER_MISMATCH):
                raise
    return parse()


def parse_python(source: str) -> ast.Module:
    """``ast.parse(source)``, tried again (up to :data:`PARSE_TRIES` in all) on CPython 3.11's counter mix-up."""
    return _retried(lambda: ast.parse(source))


def python_literal(text: str) -> Any:
    """``ast.literal_eval(text)`` (``ValueError`` / ``SyntaxError`` as it gives them), with its parse tried
    again like :func:`parse_python`'s."""
    return ast.literal_eval(_retried(lambda: ast.parse(text.lstrip(" \t"), mode="eval")))
