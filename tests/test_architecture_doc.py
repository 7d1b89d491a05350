"""docs/architecture.md names real packages and files: a newcomer who follows it finds them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
