"""Every command against a corpus of bad inputs: one clear message, exit 2 (1 for an outside engine),
never a traceback, a hang or a memory blow-up.

Each case runs the real ``gpuseat`` in a child process with a memory cap and a time limit, so a hang or
an allocation storm fails the test instead of the machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
COURSE = (EXAMPLES / "course-2016.toml").read_text(encoding="utf-8")
INVENTORY = (EXAMPLES / "ibm-2xM60.toml").read_text(encoding="utf-8")
AWS_CSV = (FIXTURES / "aws_v8_vms_excerpt.csv").read_text(encoding="utf-8")
M60_XML = FIXTURES / "gpuseat__tesla-m60-x2.xml"

OFFER = """
[[offer]]
id = "lab:box"
provider = "lab"
kind = "bare-metal"
instance_type = "box"
gpu = "T4"
gpu_count = 4
vcpus = 32
ram_gb = 128
price_usd = PRICE
billing = "month-prorated"
source = "test"
as_of = 2026-01-01
"""


@dataclass
class Case:
    """One bad input: files to make in a temp folder, the argv (``{d}`` = that folder), expected exits."""

    id: str
    argv: list[str]
    files: dict[str, str | bytes | Callable[[Path], None]]
    exits: tuple[int, ...] = (2,)
    env: dict[str, str] | None = None
    python: list[str] | None = None  # extra -c code run before the CLI (to hide torch, say)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _with_db(path: Path) -> None:
    """A real gpuseat database with monitor rows, written by the real monitor from a real capture."""
    subprocess.run(
        [sys.executable, "-m", "gpuseat", "monitor", "--from-xml", str(M60_XML), "--once", "--db", f"sqlite:///{path}"],
        check=True,
        capture_output=True,
        timeout=120,
    )


def _course(**replace: str) -> str:
    text = COURSE
    for old, new in replace.items():
        text = text.replace(old, new)
    return text


CASES = [
    # numbers in course and offer files
    Case(
        "course-participants-inf",
        ["plan", "{d}/c.toml"],
        {"c.toml": _course(**{"participants = 16": "participants = inf"})},
    ),
    Case(
        "course-participants-nan",
        ["plan", "{d}/c.toml"],
        {"c.toml": _course(**{"participants = 16": "participants = nan"})},
    ),
    Case(
        "course-participants-2^63",
        ["plan", "{d}/c.toml"],
        {"c.toml": _course(**{"participants = 16": "participants = 9223372036854775807"})},
    ),
    Case(
        "course-participants-bool",
        ["plan", "{d}/c.toml"],
        {"c.toml": _course(**{"participants = 16": "participants = true"})},
    ),
    Case("course-cuda-string", ["plan", "{d}/c.toml"], {"c.toml": _course(**{"cuda = true": 'cuda = "no"'})}),
    Case(
        "course-memory-1e309",
        ["plan", "{d}/c.toml"],
        {"c.toml": _course(**{"min_gpu_memory_gb = 4": "min_gpu_memory_gb = 1e309"})},
    ),
    Case("course-days-3000000", ["plan", "{d}/c.toml"], {"c.toml": _course(**{"days = 15": "days = 3000000"})}),
    Case("course-storage-inf", ["plan", "{d}/c.toml"], {"c.toml": COURSE + "\n[costs]\nstorage_gb_per_seat = inf\n"}),
    Case(
        "course-weekend-only-hours",
        ["plan", "{d}/c.toml"],
        {
            "c.toml": _course(**{"days = 15": 'end = 2016-06-05\nhours = "09:00-17:00"'}).replace(
                "2016-06-06", "2016-06-04"
            )
        },
    ),
    Case("course-not-toml", ["plan", "{d}/c.toml"], {"c.toml": "participants = [16\n"}),
    Case("course-not-utf8", ["plan", "{d}/c.toml"], {"c.toml": b'name = "\xff\xfe"\n'}),
    Case("course-fifo", ["plan", "{d}/c.toml"], {"c.toml": _fifo}),
    Case("course-dev-zero", ["plan", "{d}/c.toml"], {"c.toml": _zero}),
    Case("course-directory", ["plan", "{d}"], {}),
    Case(
        "offers-price-inf",
        ["plan", "{d}/c.toml", "--offers", "{d}/o.toml"],
        {"c.toml": COURSE, "o.toml": OFFER.replace("PRICE", "inf")},
    ),
    Case(
        "offers-price-1e309",
        ["plan", "{d}/c.toml", "--offers", "{d}/o.toml"],
        {"c.toml": COURSE, "o.toml": OFFER.replace("PRICE", "1e309")},
    ),
    Case(
        "offers-price-negative",
        ["plan", "{d}/c.toml", "--offers", "{d}/o.toml"],
        {"c.toml": COURSE, "o.toml": OFFER.replace("PRICE", "-5")},
    ),
    # offers import
    Case(
        "import-out-is-directory",
        ["offers", "import", "{d}/vms.csv", "--provider", "aws", "--out", "{d}"],
        {"vms.csv": AWS_CSV},
    ),
    Case(
        "import-out-missing-folder",
        ["offers", "import", "{d}/vms.csv", "--provider", "aws", "--out", "{d}/no/such/o.toml"],
        {"vms.csv": AWS_CSV},
    ),
    Case(
        "import-count-zero",
        ["offers", "import", "{d}/vms.csv", "--provider", "aws"],
        {"vms.csv": AWS_CSV.replace(",T4,1.0,", ",T4,0,", 1)},
        (0, 2),
    ),
    Case(
        "import-space-in-type",
        ["offers", "import", "{d}/vms.csv", "--provider", "aws"],
        {"vms.csv": AWS_CSV.replace("g4dn.xlarge", "g4dn xlarge; rm -rf", 1)},
        (0, 2),
    ),
    Case("import-not-csv", ["offers", "import", "{d}/vms.csv", "--provider", "aws"], {"vms.csv": "\x00\x01binary"}),
    # carve
    Case("carve-min-mem-nan", ["carve", "--gpu", "H100-80GB", "--min-mem", "nan"], {}),
    Case("carve-min-mem-inf", ["carve", "--gpu", "H100-80GB", "--min-mem", "inf"], {}),
    Case("carve-profile-comma", ["carve", "--gpu", "H100-80GB", "--mode", "mig", "--profile", ","], {}),
    Case("carve-unknown-gpu", ["carve", "--gpu", "Voodoo-2"], {}),
    Case(
        "carve-inventory-inf", ["carve", "{d}/inv.toml"], {"inv.toml": INVENTORY.replace("boards = 2", "boards = inf")}
    ),
    Case("carve-inventory-fifo", ["carve", "{d}/inv.toml"], {"inv.toml": _fifo}),
    Case(
        "carve-out-is-file",
        ["carve", "--gpu", "H200-141GB", "--mode", "mig", "--render", "k8s", "--out", "{d}/f"],
        {"f": "not a folder\n"},
    ),
    # monitor / top / usage
    Case("top-ssh-option", ["top", "--ssh", "-oProxyCommand=touch {d}/pwned", "--once"], {}),
    Case("top-ssh-bad-host", ["top", "--ssh", "host;touch {d}/pwned", "--once"], {}),
    Case("monitor-xml-fifo", ["top", "--from-xml", "{d}/x.xml", "--once"], {"x.xml": _fifo}),
    Case("monitor-xml-dev-zero", ["top", "--from-xml", "{d}/x.xml", "--once"], {"x.xml": _zero}),
    Case("monitor-xml-garbage", ["top", "--from-xml", "{d}/x.xml", "--once"], {"x.xml": "<nvidia_smi_log><gpu>"}),
    Case(
        "monitor-xml-huge-int",
        ["top", "--from-xml", "{d}/x.xml", "--once", "--format", "json"],
        {"x.xml": M60_XML.read_text().replace("<used>", "<used>99999999999999999999999 ", 1)},
        (0, 2),
    ),
    Case("usage-since-bad", ["usage", "--since", "yesterday-ish", "--db", "sqlite:///{d}/g.db"], {"g.db": _with_db}),
    Case(
        "usage-chart-missing-folder",
        ["usage", "--chart", "{d}/no/such/chart.html", "--db", "sqlite:///{d}/g.db"],
        {"g.db": _with_db},
    ),
    Case("usage-db-not-a-database", ["usage", "--db", "sqlite:///{d}/notes.txt"], {"notes.txt": "just text\n"}),
    Case("usage-db-missing", ["usage", "--db", "sqlite:///{d}/typo/g.db"], {}),
    Case(
        "usage-db-unreachable-pg",
        ["usage", "--db", "postgresql+psycopg://nobody@127.0.0.1:9/x?connect_timeout=3"],
        {},
        (1,),
    ),
    Case("usage-db-bad-url", ["usage", "--db", "nosuchdialect://x"], {}),
    # doctor
    Case("doctor-root-missing", ["doctor", "--root", "{d}/nothing"], {}),
    # bench
    Case("bench-iterations-huge", ["bench", "--device", "cpu", "--iterations", "100000000000"], {}),
    Case(
        "bench-without-torch",
        ["bench", "--device", "cpu", "--iterations", "10"],
        {},
        (1, 2),
        python=["import sys; sys.modules['torch'] = None"],
    ),
]


def _limits() -> None:
    gib = 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (6 * gib, 6 * gib))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_one_message_and_no_traceback(case: Case, tmp_path: Path) -> None:
    for name, content in case.files.items():
        path = tmp_path / name
        if callable(content):
            content(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    argv = [a.replace("{d}", str(tmp_path)) for a in case.argv]
    prelude = "; ".join(case.python or [])
    code = f"{prelude}\nimport sys\nfrom gpuseat.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = {**os.environ, **(case.env or {}), "COLUMNS": "200"}
    env.pop("GPUSEAT_DEBUG", None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
            preexec_fn=_limits,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"gpuseat {' '.join(argv)} hung (no answer in 90 s)")
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert done.returncode in case.exits, f"exit {done.returncode}: {done.stderr}"
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith(("error:", "Error:"))]
        assert len(errors) == 1, done.stderr
        assert "internal error" not in done.stderr, done.stderr
    assert not (tmp_path / "pwned").exists(), "an injected command ran"
