"""The docs name real things: a newcomer who follows README.md and docs/*.md finds every file, module,
command, flag and environment variable they cite.

docs/architecture.md's packages and files are checked on their own (below); then every doc but
docs/results.md (a dated log: its commands are quoted as they were run then) is read for repository paths,
``gpuseat.…`` names, ``gpuseat COMMAND … --flag`` lines (the flags are looked up on the real Click
command tree, not in ``--help`` text) and ``GPUSEAT_*`` variables.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import shlex
import tokenize
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import typer

from gpuseat.cli import build_app
from pysource import parse_text

ROOT = Path(__file__).resolve().parents[1]
#: every doc a newcomer follows (docs/results.md is a record of past runs, not instructions)
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "results.md")]


def test_every_path_the_architecture_doc_names_exists() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:src/)?gpuseat/[A-Za-z0-9_/]+(?:\.py)?/?)`", text))
    named |= {
        f"gpuseat/{m}"
        for m in re.findall(
            r"`((?:core|store|engines|services|web|cli|monitor|catalog|render|db)/[A-Za-z0-9_/]+\.py)", text
        )
    }
    assert len(named) > 15
    missing = []
    for name in sorted(named):
        path = ROOT / ("src/" + name if not name.startswith("src/") else name)
        if not path.exists():
            missing.append(name)
    assert missing == [], f"docs/architecture.md names what does not exist: {missing}"
    for test in re.findall(r"`(tests/[A-Za-z0-9_/]+\.py)`", text):
        assert (ROOT / test).exists(), test


# -- every doc ----------------------------------------------------------------------------------------

#: a path in the repository: src/gpuseat/…, tests/…, benchmarks/…, scripts/…, examples/…, docs/… (globs
#: allowed), and shared/…: notes beside the working tree that a clone does not have
PATH = re.compile(r"(?<![\w/.-])((?:src/gpuseat|tests|benchmarks|scripts|examples|docs|shared)/[\w./*-]*[\w/*])")
#: a dotted name under the package: a module, or a module's attribute
DOTTED = re.compile(r"(?<![\w/.-])(gpuseat(?:\.[A-Za-z_]\w*)+)")
FROM_IMPORT = re.compile(r"^\s*from (gpuseat[\w.]*) import ([\w, ]+)$", re.M)
FENCE = re.compile(r"^ *```[^\n]*\n(.*?)^ *```", re.M | re.S)
#: a command line in a code block: at the line's start (after "$ ", sudo, VAR=value or a …/bin/ path),
#: after && or |, or after exec
COMMAND_LINE = re.compile(
    r"(?:^\s*(?:\$\s+)?(?:sudo\s+)?(?:[A-Z_]+=\S+\s+)*(?:\S*/bin/)?|&&\s*|\|\s*|\bexec\s+)gpuseat\s+(.*)"
)
FLAG = re.compile(r"^(--?[A-Za-z][\w-]*)")


def _where(doc: Path, text: str, at: int) -> str:
    return f"{doc.relative_to(ROOT)}:{text.count(chr(10), 0, at) + 1}"


def _blocks(text: str) -> Iterator[tuple[int, str]]:
    """Each fenced code block: where its body starts, and the body."""
    for m in FENCE.finditer(text):
        yield m.start(1), m.group(1)


def _prose(text: str) -> str:
    """The doc with its fenced blocks blanked out (same length, so offsets keep their line numbers)."""
    return FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def test_the_docs_cover_the_newcomers_path() -> None:
    names = {p.name for p in DOCS}
    assert {"README.md", "course.md", "delivery.md", "plan.md", "carve.md", "api.md"} <= names
    assert "results.md" not in names


def test_every_repository_path_the_docs_name_exists() -> None:
    packages = "|".join(p.name for p in (ROOT / "src" / "gpuseat").iterdir() if (p / "__init__.py").is_file())
    #: a file named from the package's folder: `web/deps.py`, `catalog/data/rules.toml`
    inside = re.compile(rf"`((?:{packages})/[\w/.-]*\.\w+)`")
    missing = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in PATH.finditer(text):
            name = m.group(1)
            found = any(ROOT.glob(name)) if "*" in name else (ROOT / name).exists()
            if not found:
                missing.append(f"{_where(doc, text, m.start())}: {name}")
        for m in inside.finditer(text):
            if not (ROOT / "src" / "gpuseat" / m.group(1)).exists():
                missing.append(f"{_where(doc, text, m.start())}: src/gpuseat/{m.group(1)}")
    assert missing == [], "the docs name paths that do not exist:\n" + "\n".join(missing)


def _resolve(name: str) -> str | None:
    """None when ``name`` is a module or a module's attribute, else what is missing."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:k])} has no {attr!r}"
            obj = getattr(obj, attr)
        return None
    return "no such module"  # pragma: no cover - "gpuseat" itself always imports


def test_every_gpuseat_name_the_docs_cite_imports() -> None:
    wrong = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        prose = _prose(text)
        cited = [(m.start(), m.group(1)) for m in DOTTED.finditer(prose)]
        for start, body in _blocks(text):
            if re.search(r"^gpuseat = ", body, re.M):  # a hub config's SeatHooks object named `gpuseat`
                continue
            cited += [(start + m.start(), m.group(1)) for m in DOTTED.finditer(body)]
        for at, name in cited:
            if (why := _resolve(name.rstrip("."))) is not None:
                wrong.append(f"{_where(doc, text, at)}: {name}: {why}")
        for m in FROM_IMPORT.finditer(text):
            module = importlib.import_module(m.group(1))
            for name in (n.strip() for n in m.group(2).split(",") if n.strip()):
                if not hasattr(module, name):
                    wrong.append(f"{_where(doc, text, m.start())}: from {m.group(1)} import {name}: no such name")
    assert wrong == [], "the docs cite names that do not exist:\n" + "\n".join(wrong)


def _options(command: click.Command) -> set[str]:
    return {o for p in command.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)} | {"--help"}


def _words(line: str) -> list[str]:
    """The words of a command line up to its end: a comment, a redirection, a pipe or a command substitution."""
    words = []
    for word in line.split():
        if word.startswith(("#", ">", "<", "2>", "$(")) or word in ("&&", "||", "|", ";", "\\") or "$(" in word:
            break
        words.append(word.strip("\"'`,;[]()"))
    return words


def _check(root: click.Group, words: list[str]) -> list[str]:
    """What is wrong with ``gpuseat WORDS``: an unknown command, or a flag its command does not have."""
    command: click.Command = root
    path: list[str] = []
    rest = list(words)
    while rest and isinstance(command, click.Group):
        word = rest[0]
        if word.startswith("-"):
            if not path and word in _options(root):  # gpuseat --debug carve …
                rest.pop(0)
                continue
            break  # a group's own options (gpuseat agent --engine E)
        if "|" in word:  # gpuseat seat start|stop|restart --participant P: each alternative
            return [p for alt in word.split("|") if alt for p in _check(root, [*path, alt, *rest[1:]])]
        if not re.fullmatch(r"[a-z][a-z0-9-]*", word):
            return []  # a placeholder (COMMAND, …): nothing more to check
        sub = command.commands.get(word)
        if sub is None:
            return [f"gpuseat {' '.join([*path, word])}: no such command"]
        command, path = sub, [*path, word]
        rest.pop(0)
    options = _options(command)
    wrong = []
    for word in rest:
        for part in word.split("/") if word.startswith("--") else [word]:  # --ssh/--jump
            m = FLAG.match(part)
            if m and m.group(1) not in options:
                wrong.append(f"gpuseat {' '.join(path)}: no flag {m.group(1)}")
    return wrong


def _command_lines(text: str, commands: Collection[str]) -> Iterator[tuple[int, str]]:
    """Each ``gpuseat …`` command a doc shows: in code blocks (continuation lines joined, comments cut),
    in inline code that starts with it, and in inline code that starts with a command's name and has a
    flag (`doctor --for vgpu`; a name alone may be printed text, `offers files stored with it`)."""
    for start, body in _blocks(text):
        lines = body.split("\n")
        offset = start
        i = 0
        while i < len(lines):
            line, first = lines[i], offset
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                offset += len(lines[i]) + 1
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i]
            for m in COMMAND_LINE.finditer(line):
                yield first, m.group(1)
            offset += len(lines[i]) + 1
            i += 1
    for m in re.finditer(r"`(?:\$ |sudo )?gpuseat ([^`]+)`", _prose(text)):
        yield m.start(), m.group(1)
    for m in re.finditer(r"`([a-z]+(?:\|[a-z]+)*) ([^`]*--[^`]*)`", _prose(text)):
        if all(name in commands for name in m.group(1).split("|")):
            yield m.start(), f"{m.group(1)} {m.group(2)}"


def test_every_command_and_flag_the_docs_show_exists() -> None:
    root = typer.main.get_command(build_app())
    assert isinstance(root, click.Group)
    wrong, seen = [], 0
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for at, line in _command_lines(text, root.commands):
            seen += 1
            wrong += [f"{_where(doc, text, at)}: {w}" for w in _check(root, _words(line))]
    assert seen > 200, seen  # the docs show a few hundred command lines: the reader found them
    assert wrong == [], "the docs show commands or flags that do not exist:\n" + "\n".join(wrong)


def test_every_environment_variable_the_docs_name_is_read() -> None:
    code = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src").rglob("*.py"))
    tests = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("*.py"))
    unread = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(r"\bGPUSEAT_[A-Z0-9_]*[A-Z0-9]\b", text):
            name = m.group(0)
            if name not in code and not (name.startswith("GPUSEAT_TEST_") and name in tests):
                unread.append(f"{_where(doc, text, m.start())}: {name}")
    assert unread == [], "the docs name variables nothing reads:\n" + "\n".join(unread)


@pytest.mark.parametrize(
    ("line", "wrong"),
    [
        ("doctor --ssh h1", ["gpuseat doctor: no flag --ssh"]),
        ("seats connect S --ssh/--jump", []),
        ("seats connet S", ["gpuseat seats connet: no such command"]),
        ("seat start|stop|rest --participant P", ["gpuseat seat rest: no such command"]),
        ("agent --engine host --install", []),
        ("--debug carve --gpu X", []),
        ("carve …", []),
    ],
)
def test_the_command_reader_finds_what_is_wrong(line: str, wrong: list[str]) -> None:
    """The reader itself: a missing flag or command is found, real ones and placeholders pass."""
    root = typer.main.get_command(build_app())
    assert isinstance(root, click.Group)
    assert _check(root, _words(line)) == wrong


#: the README's course example: commands not run here, and why
README_NOT_RUN = {
    "gpuseat seats check": "probes each seat's machine over SSH",
    "gpuseat serve --demo": "a server that runs until stopped",
}


def test_the_readmes_course_example_runs_as_written(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """README's "a course's people and seats" block, in order, from the clone's folder on an empty store.
    Its `vms up` once ran on seats of no engine and was refused: the block's seats must be libvirt's."""
    pytest.importorskip("libvirt")  # vms up on libvirt's mock driver
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Worked example: a course's people and seats\n\n```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no course example"
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path / "data"))
    ran = []
    for line in block.group(1).splitlines():
        for command in line.partition("  #")[0].strip().split(" && "):
            if command in README_NOT_RUN:
                continue
            args = [tmp_path / a if a in ("sky/", "report.html") else a for a in shlex.split(command)]  # outputs
            assert args[0] == "gpuseat", command
            result = cli(*args[1:])
            assert result.code == 0 and "Traceback" not in result.err, f"$ {command}\n{result.out}{result.err}"
            ran.append(command)
    assert len(ran) >= 10 and any(c.startswith("gpuseat vms up") for c in ran), ran
    assert (tmp_path / "report.html").is_file() and (tmp_path / "sky" / "launch.sh").is_file()


def test_the_hub_config_the_jupyterhub_doc_shows_is_what_gpuseat_prints(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/jupyterhub.md's "The config": its command (with --no-check: the doc's database is not here)
    prints exactly the Python the doc shows under it, gpuseat's version aside."""
    text = (ROOT / "docs" / "jupyterhub.md").read_text(encoding="utf-8")
    m = re.search(r"## The config\n\n```\n(gpuseat .*?) > \S+\n```\n\nprints .*?```python\n(.*?)```", text, re.S)
    assert m, "docs/jupyterhub.md has no config example"
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path / "data"))
    args = shlex.split(m.group(1).replace("\\\n", " "))
    result = cli(*args[1:], "--no-check")
    assert result.code == 0, result.err
    version = re.compile(r"\(gpuseat [^)]*\)")
    shown, printed = version.sub("(gpuseat V)", m.group(2)), version.sub("(gpuseat V)", result.out)
    # the doc's block is laid out by `ruff format .` (CI checks docs' Python too): the same program, the
    # same comments, whatever the quotes and line breaks
    assert ast.dump(parse_text(shown)) == ast.dump(parse_text(printed)), shown
    assert _comments(shown) == _comments(printed), shown


def _comments(code: str) -> list[str]:
    """Every comment of a Python text, in order (what ``ast`` drops)."""
    return [t.string for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type == tokenize.COMMENT]
