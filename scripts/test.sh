#!/usr/bin/env bash
# The test command: set up, lint, run the whole suite (two workers on CI's 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests benchmarks
.venv/bin/python -m pytest -n 2 -q "$@"
