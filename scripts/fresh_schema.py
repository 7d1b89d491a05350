"""Write ``src/gpuseat/db/migrations/head.sqlite.json`` (gpuseat.db.fresh) from a walk of every revision on a
new SQLite database. Run it after adding a revision: ``.venv/bin/python scripts/fresh_schema.py``;
tests/store/test_fresh_schema.py fails until the file stands for the newest revision."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from gpuseat.db import make_engine, upgrade
from gpuseat.db.fresh import SCHEMA, schema_of


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'walk.db'}", create=True)
        upgrade(engine, walk=True)
        with engine.connect() as conn:
            SCHEMA.write_text(json.dumps(schema_of(conn), indent=1) + "\n", encoding="utf-8")
        engine.dispose()
    print(f"wrote {SCHEMA}", file=sys.stderr)


if __name__ == "__main__":
    main()
