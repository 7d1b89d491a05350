"""Every parser under Hypothesis: any input gives a clean result or one of gpuseat's own errors, within
a time budget, never another exception.

Inputs are real upstream files (tests/fixtures, examples/) mutated byte by byte, cut short, spliced
with hostile fragments (entity declarations, alias chains, control characters, huge numbers, NaN),
or generated from scratch. A parser that raises anything but :class:`GpuseatError`, or that takes
longer than its budget on a small input, fails the test with the input that did it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuseat.catalog.bundle import load_catalog
from gpuseat.errors import GpuseatError

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "examples"
BUDGET_S = 5.0  # generous for a loaded 2-core machine; a quadratic blow-up on these sizes takes minutes
CATALOG = load_catalog()

HOSTILE = [
    '<!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>',
    '<!DOCTYPE x [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>',
    "&xxe;",
    "a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: [*b, *b, *b, *b]\n",
    "\x1b[2J\x1b]0;owned\x07",
    "\u202e",
    "nan",
    "inf",
    "-inf",
    "1e309",
    "99999999999999999999999999",
    '=HYPERLINK("http://x")',
    "\x00",
    '"',
    "'''",
    "[[",
    "\r\n",
    "2024-02-30",
    "\ufeff",
    "${HOME}",
    "$(id)",
    "; rm -rf /",
]


def _mutated(seed: bytes) -> st.SearchStrategy[bytes]:
    """``seed`` with a slice replaced by random bytes or a hostile fragment, or cut short."""
    hostile = st.sampled_from([h.encode() for h in HOSTILE])
    noise = st.binary(max_size=64)
    return st.tuples(st.integers(0, len(seed)), st.integers(0, 64), st.one_of(hostile, noise), st.booleans()).map(
        lambda t: (seed[: t[0]] + t[2] + seed[t[0] + t[1] :]) if t[3] else seed[: t[0]]
    )


def _check(parse: Callable[[bytes], Any], data: bytes) -> None:
    started = time.monotonic()
    with contextlib.suppress(GpuseatError):
        parse(data)
    elapsed = time.monotonic() - started
    assert elapsed < BUDGET_S, f"took {elapsed:.1f} s on {len(data)} bytes"


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _via_file(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


# -- the parsers -----------------------------------------------------------------------------------------


def parse_roster(data: bytes) -> Any:
    from gpuseat.core.roster import parse_roster

    return parse_roster(_text(data), groups=("participants",), where="roster.csv")


def parse_xml(data: bytes) -> Any:
    from gpuseat.nvsmi import parse_xml

    return parse_xml(_text(data), host="fuzz", where="capture.xml")


def parse_query_csv(data: bytes) -> Any:
    from gpuseat.nvsmi import parse_query_gpu_csv

    return parse_query_gpu_csv(_text(data), host="fuzz", where="gpus.csv")


def parse_apps_csv(data: bytes) -> Any:
    from gpuseat.nvsmi import parse_compute_apps_csv

    return parse_compute_apps_csv(_text(data), where="apps.csv")


def parse_listing(data: bytes) -> Any:
    from gpuseat.core.listing import parse_list

    return parse_list(_text(data))


def parse_mig_parted(data: bytes) -> Any:
    from gpuseat.core.inventory import parse_mig_parted

    return parse_mig_parted(_text(data), where="config.yaml")


def parse_inventory(data: bytes) -> Any:
    from gpuseat.core.inventory import server_from_toml
    from gpuseat.files import parse_toml

    return server_from_toml(parse_toml(_text(data), where="server.toml"), CATALOG, where="server.toml")


def parse_survey_template(data: bytes) -> Any:
    from gpuseat.services.survey import parse_template

    return parse_template(_text(data), where="template.toml")


FILE_FREE = {
    "roster": (parse_roster, EXAMPLES / "roster-16.csv"),
    "nvidia-smi-xml": (parse_xml, FIXTURES / "telegraf__tesla-t4.xml"),
    "nvidia-smi-xml-mig": (parse_xml, FIXTURES / "telegraf__a100-sxm4-v12.xml"),
    "query-gpu-csv": (parse_query_csv, None),
    "compute-apps-csv": (parse_apps_csv, None),
    "nvidia-smi-L": (parse_listing, None),
    "mig-parted": (parse_mig_parted, FIXTURES / "mig-parted__config-default.yaml"),
    "inventory": (parse_inventory, EXAMPLES / "ibm-2xM60.toml"),
}

QUERY_CSV = (
    b"index, uuid, name, memory.total [MiB], memory.used [MiB], utilization.gpu [%], temperature.gpu\n"
    b"0, GPU-11111111-2222-3333-4444-555555555555, Tesla T4, 15360 MiB, 0 MiB, 0 %, 31\n"
)
APPS_CSV = b"pid, process_name, gpu_uuid, used_gpu_memory [MiB]\n1234, python, GPU-11111111-2222-3333-4444-555555555555, 100 MiB\n"
LISTING = (
    b"GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n"
    b"  MIG 1g.5gb      Device  0: (UUID: MIG-11111111-2222-3333-4444-555555555555)\n"
)
SEEDS = {"query-gpu-csv": QUERY_CSV, "compute-apps-csv": APPS_CSV, "nvidia-smi-L": LISTING}


def _seed(name: str) -> bytes:
    path = FILE_FREE[name][1]
    return path.read_bytes()[:20000] if path is not None else SEEDS[name]


FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@pytest.mark.parametrize("name", sorted(FILE_FREE))
def test_parser_never_raises_foreign_errors(name: str) -> None:
    parse = FILE_FREE[name][0]

    @FUZZ
    @given(_mutated(_seed(name)))
    def run(data: bytes) -> None:
        _check(parse, data)

    run()


@pytest.mark.parametrize("name", sorted(FILE_FREE))
def test_parser_on_random_text(name: str) -> None:
    parse = FILE_FREE[name][0]

    @FUZZ
    @given(st.text(max_size=400).map(str.encode))
    def run(data: bytes) -> None:
        _check(parse, data)

    run()


# -- parsers that read files (course, offers, SkyPilot catalog, seats, replay) -------------------------


def _course(path: Path) -> Any:
    from gpuseat.services.planning import load_course

    return load_course(path)


def _offers(path: Path) -> Any:
    from gpuseat.catalog.offers import load_offers_file

    return load_offers_file(path, CATALOG)


def _skypilot(path: Path) -> Any:
    from datetime import date

    from gpuseat.catalog.skypilot import import_skypilot

    return import_skypilot(path, "aws", catalog=CATALOG, as_of=date(2026, 1, 1))


def _seats(path: Path) -> Any:
    from gpuseat.monitor.seats import read_seats

    return read_seats(path)


def _replay(path: Path) -> Any:
    from gpuseat.monitor.replay import read_replay

    return read_replay(path)


def _replay_seed() -> bytes:
    import json

    from gpuseat.monitor.replay import synthetic_snapshot
    from gpuseat.readings import snapshot_to_dict

    snap = synthetic_snapshot(gpus=1, migs_per_gpu=2, processes=1, taken_at=1_700_000_000.0)
    return (json.dumps(snapshot_to_dict(snap)) + "\n").encode()


FILE_PARSERS = {
    "course": (_course, "c.toml", lambda: (EXAMPLES / "course-lab-hours.toml").read_bytes()),
    "offers": (_offers, "o.toml", lambda: (EXAMPLES / "offers-h200.toml").read_bytes()),
    "skypilot": (_skypilot, "vms.csv", lambda: (FIXTURES / "aws_v8_vms_excerpt.csv").read_bytes()[:6000]),
    "seats-toml": (_seats, "seats.toml", lambda: (EXAMPLES / "seats.toml").read_bytes()),
    "replay": (_replay, "r.jsonl", _replay_seed),
}


@pytest.mark.parametrize("name", sorted(FILE_PARSERS))
def test_file_parser_never_raises_foreign_errors(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    parse, file_name, seed = FILE_PARSERS[name]
    folder = tmp_path_factory.mktemp("fuzz")

    @FUZZ
    @given(_mutated(seed()))
    def run(data: bytes) -> None:
        path = _via_file(folder, file_name, data)
        _check(lambda _d: parse(path), data)

    run()


def test_survey_template_never_raises_foreign_errors() -> None:
    from gpuseat.services.survey import template_text

    seed = template_text("course-2016").encode()

    @FUZZ
    @given(_mutated(seed))
    def run(data: bytes) -> None:
        _check(parse_survey_template, data)

    run()


# -- digits of other scripts: never read as numbers ------------------------------------------------------


def _csv_readings(text: str) -> Any:
    from gpuseat.nvsmi import parse_query_gpu_csv

    gpu = parse_query_gpu_csv(QUERY_CSV.decode().splitlines()[0] + "\n" + text, host="h", where="gpus.csv").gpus[0]
    return gpu.memory_used_mib, gpu.utilization_gpu, gpu.temperature_c


def _listed(text: str) -> Any:
    from gpuseat.core.listing import parse_list

    return parse_list(text)


def _xids(text: str) -> Any:
    from gpuseat.nvsmi_health import parse_xid_log

    return [(e.xid, e.uptime_s) for e in parse_xid_log(text)]


def _instances(text: str) -> Any:
    from gpuseat.nvsmi_mig import parse_lgi

    return parse_lgi(text)


def _driver(text: str) -> Any:
    from gpuseat.doctor.parse import parse_driver_version

    return parse_driver_version(text)


def _sysfs(text: str) -> Any:
    from gpuseat.doctor.parse import sysfs_int

    return sysfs_int(text)


def _probe_profile(name: str) -> Any:
    """The MIG profile called ``name`` in a probe bundle's driver table (``-lgip``/``-lgipp``) as carve reads it."""
    from gpuseat.services.probe import BUNDLE_VERSION, Bundle, profile_table

    lgip = (FIXTURES / "rtxpro6000__lgip.txt").read_text().replace("MIG 1g.24gb         14", f"MIG {name}   14", 1)
    files = {"mig-lgip.txt": lgip.encode(), "mig-lgipp.txt": (FIXTURES / "rtxpro6000__lgipp.txt").read_bytes()}
    table = profile_table(Bundle("bundle", files, {"bundle_version": BUNDLE_VERSION}), "RTX-PRO-6000", CATALOG)
    return [(p.compute_slices, p.memory_gb) for p in (table[1] if table else ()) if p.name == name]


#: a capture (nvidia-smi's CSV, -L, a kernel log, -lgi, the driver's version file, a sysfs count, a probe bundle's
#: MIG table) whose numbers are in other scripts' digits: ``\d`` and ``int()``/``float()`` read ``١٢`` and ``１２``
#: as 12, so each was read as a reading, a GPU index, an Xid, an instance, a driver version, a VF count or a MIG
#: profile's slices and memory; none is one
OTHER_DIGITS = [
    ("query-gpu-csv", _csv_readings,
     "0, GPU-11111111-2222-3333-4444-555555555555, Tesla T4, 15360 MiB, ١٢ MiB, ٥ %, ３１\n", (None, None, None)),
    ("nvidia-smi-L", _listed, "GPU ١: NVIDIA A100-SXM4-40GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n", []),
    ("kernel-log-xid", _xids, "[１２.5] NVRM: Xid (PCI:0000:86:00): ٧٩, pid=1, GPU has fallen off the bus.\n", []),
    ("mig-lgi", _instances, "|   ٠  MIG 1g.10gb          19        7          0:1     |\n", []),
    ("driver-version", _driver, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  ٥٣٥.54.03  Wed Jun  7 2023\n", None),
    ("sysfs-count", _sysfs, "١٦\n", None),
    ("probe-mig-profile", _probe_profile, "١g.٢٤gb", []),
]  # fmt: skip


@pytest.mark.parametrize(("parse", "text", "read"), [p[1:] for p in OTHER_DIGITS], ids=[p[0] for p in OTHER_DIGITS])
def test_digits_of_other_scripts_are_no_number(parse: Callable[[str], Any], text: str, read: Any) -> None:
    assert parse(text) == read
    assert parse(text.translate(str.maketrans("٠١٢٣٤٥٦٧٨٩１２３", "0123456789123"))) != read  # in plain digits: read
