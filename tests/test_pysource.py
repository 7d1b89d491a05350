"""The parse that is tried again past CPython 3.11's shared AST recursion counter (python/cpython#106905):
``gpuseat.pysource`` (the store's migration read, the SkyPilot ``GpuInfo`` literals) and the tests' own
``tests/pysource.py``.

The race is made real and certain: while this thread's ``ast.parse`` builds its tree, the first garbage
collection it sets off (a ``gc.callbacks`` hook) hands the interpreter to a second thread, which parses a
line of its own and so resets the counter under the first; the first parse then ends off balance and CPython
3.11 raises ``SystemError: AST constructor recursion depth mismatch``. The hook acts once, so a second try
parses undisturbed, as it does when the race is left to chance.
"""

from __future__ import annotations

import ast
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gpuseat.catalog import skypilot
from gpuseat.pysource import AST_COUNTER_MISMATCH, PARSE_TRIES, _retried, parse_python, python_literal
from gpuseat.store import opening
from pysource import parse_file, parse_text

#: enough nodes that the parse's own allocations set off several collections while it builds the tree
SOURCE = "\n".join(f"def f{i}(a, b):\n    return [a + b * {i}, (a, b), {{'k': a}}]" for i in range(400))
#: a GpuInfo literal as SkyPilot's catalogs write it, with enough of them to build for a while
GPU_INFO = repr({"Gpus": [{"MemoryInfo": {"SizeInMiB": 81920}, "Name": "H100"}] * 300})


@contextmanager
def another_thread_parses_midway() -> Iterator[threading.Event]:
    """While the block runs, the first collection in this thread lets another thread run ``ast.parse``.

    The other thread starts with a shallower stack than this one (a test runs some dozens of frames deep),
    so the counter it leaves behind is below this parse's start, whatever depth of the tree it interrupts:
    the mismatch is certain, not left to chance. The event yielded is set once the other parse has run."""
    here = threading.get_ident()
    paused, other_done = threading.Event(), threading.Event()

    def hook(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and threading.get_ident() == here and not paused.is_set():
            paused.set()
            other_done.wait(10)  # waiting lets the other thread run

    def other() -> None:
        paused.wait(10)
        if not other_done.is_set():
            ast.parse("x = [1, (2, 3)]")
            other_done.set()

    thread = threading.Thread(target=other, daemon=True)
    thread.start()
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    gc.enable()
    gc.set_threshold(700, *threshold[1:])
    # the next collection comes from the parse's own allocations; only the young generation is collected
    # here: a full collection took 2.5 s in an xdist worker that had run a few hundred tests
    gc.collect(0)
    gc.callbacks.append(hook)
    try:
        yield other_done
    finally:
        gc.callbacks.remove(hook)
        gc.set_threshold(*threshold)
        if not enabled:
            gc.disable()
        other_done.set()
        paused.set()
        thread.join(10)


def _deep(frames: int, call: Callable[[], Any]) -> Any:
    """``call()`` some frames further down the stack, as deep as a test's call is under pytest anyway."""
    return call() if frames == 0 else _deep(frames - 1, call)


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the shared counter is CPython 3.11's")
def test_the_interleaving_trips_cpython_3_11_s_counter() -> None:
    """The reproduction is real: a plain ``ast.parse`` fails under it (the flake clean-clone CI saw)."""
    with another_thread_parses_midway() as other_parsed, pytest.raises(SystemError, match=AST_COUNTER_MISMATCH):
        _deep(30, lambda: ast.parse(SOURCE))
    assert other_parsed.is_set()


def test_a_parse_the_other_thread_trips_is_tried_again_and_gives_the_tree() -> None:
    with another_thread_parses_midway() as other_parsed:
        tree = _deep(30, lambda: parse_python(SOURCE))
    assert other_parsed.is_set()
    assert ast.dump(tree) == ast.dump(ast.parse(SOURCE))


def test_a_literal_the_other_thread_trips_is_tried_again() -> None:
    with another_thread_parses_midway() as other_parsed:
        value = _deep(30, lambda: python_literal(GPU_INFO))
    assert other_parsed.is_set()
    assert value == ast.literal_eval(GPU_INFO)


def test_the_skypilot_import_reads_a_gpu_info_the_other_thread_trips() -> None:
    skypilot._gpu_memory_gb.cache_clear()
    try:
        with another_thread_parses_midway() as other_parsed:
            memory = _deep(30, lambda: skypilot._gpu_memory_gb(GPU_INFO, "aws"))
    finally:
        skypilot._gpu_memory_gb.cache_clear()
    assert other_parsed.is_set()
    assert memory == 80.0


def test_the_store_reads_its_migrations_while_another_thread_parses() -> None:
    """Opening a store (the hub hooks do it from worker threads) reads the revisions with ``ast``."""
    expected = opening._read_revisions()
    opening._read_revisions.cache_clear()
    try:
        with another_thread_parses_midway() as other_parsed:
            revisions = _deep(30, opening._read_revisions)
    finally:
        opening._read_revisions.cache_clear()
    assert other_parsed.is_set()
    assert revisions == expected and len(revisions[1]) == 1


def test_the_tests_helper_parses_like_gpuseat(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(SOURCE, encoding="utf-8")
    with another_thread_parses_midway() as other_parsed:
        tree = _deep(30, lambda: parse_file(path))
    assert other_parsed.is_set()
    assert ast.dump(tree) == ast.dump(parse_text(SOURCE)) == ast.dump(ast.parse(SOURCE))


class _CountedParse:
    """A parse of ``source`` that counts its tries; ``fail(try)`` gives the error a try raises instead, if any.

    Handed to the retry itself (``gpuseat.pysource._retried``), not patched into :mod:`ast`, so that pytest's
    own use of ``ast.parse`` (to show a failure) is left alone."""

    def __init__(self, source: str, fail: Callable[[int], BaseException | None] = lambda _: None) -> None:
        self.source, self.fail, self.calls = source, fail, 0

    def __call__(self) -> ast.Module:
        self.calls += 1
        error = self.fail(self.calls)
        if error is not None:
            raise error
        return ast.parse(self.source)


def test_a_syntax_error_is_raised_at_once() -> None:
    counted = _CountedParse("def (:\n")
    with pytest.raises(SyntaxError):
        _retried(counted)
    assert counted.calls == 1
    with pytest.raises(SyntaxError):
        parse_python("def (:\n")
    with pytest.raises(SyntaxError):
        python_literal("{'a': ")
    with pytest.raises(ValueError, match="malformed"):
        python_literal("f(1)")


def test_another_system_error_is_raised_at_once() -> None:
    counted = _CountedParse("x = 1\n", lambda _: SystemError("error return without exception set"))
    with pytest.raises(SystemError, match="error return without exception set"):
        _retried(counted)
    assert counted.calls == 1


def test_the_mismatch_is_tried_again_a_few_times_then_raised() -> None:
    mismatch = f"{AST_COUNTER_MISMATCH} (before=12, after=11)"
    counted = _CountedParse("x = 1\n", lambda call: SystemError(mismatch) if call < PARSE_TRIES else None)
    assert ast.dump(_retried(counted)) == ast.dump(ast.parse("x = 1\n"))
    assert counted.calls == PARSE_TRIES  # the last try succeeded

    counted = _CountedParse("x = 1\n", lambda _: SystemError(mismatch))
    with pytest.raises(SystemError, match=AST_COUNTER_MISMATCH):
        _retried(counted)
    assert counted.calls == PARSE_TRIES  # never forever
