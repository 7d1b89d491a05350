"""Helpers for the monitor tests: sections of the multi-section nvidia_gpu_exporter captures."""

from __future__ import annotations

import os
import uuid as uuidlib
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H100 = FIXTURES / "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
H100_MIG = FIXTURES / "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt"
RTX2080 = FIXTURES / "nvidia_gpu_exporter__windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt"


def section(path: Path, title: str) -> str:
    """The body of the section whose header line is ``# <title>`` (up to the next ``####`` rule)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"# {title}")
    body = []
    i = start + 1
    while lines[i].startswith("#"):  # the '# $ command' line and the closing rule
        i += 1
    while i < len(lines) and not lines[i].startswith("####"):
        body.append(lines[i])
        i += 1
    return "\n".join(body).strip() + "\n"


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    """An empty data dir for the default SQLite database, and no database URL from the environment."""
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("GPUSEAT_DB_URL", raising=False)
    return tmp_path / "data"


PG = os.environ.get("GPUSEAT_TEST_PG_URL")
ON_CI = os.environ.get("CI") == "true"


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "postgresql", marks=pytest.mark.skipif(not PG and not ON_CI, reason="GPUSEAT_TEST_PG_URL not set")
        ),
    ]
)
def url(request, tmp_path):
    """A fresh database URL: a SQLite file, or a new schema in the test PostgreSQL (required on CI)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'course.db'}"
        return
    assert PG, "GPUSEAT_TEST_PG_URL must be set on CI"
    schema = f"t_{uuidlib.uuid4().hex[:12]}"
    admin = create_engine(PG)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in PG else "?"
    yield f"{PG}{sep}options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()
