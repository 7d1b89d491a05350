#!/usr/bin/env bash
# The main job on embedded defaults: set up, then price the 2016 course on the bundled catalog.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/gpuseat plan examples/course-2016.toml --explain "$@"
