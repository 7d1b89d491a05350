#!/usr/bin/env bash
# What a new user does: `pip install .` into a fresh virtualenv as a user without root, then the main
# job (`gpuseat plan examples/course-2016.toml`). Run by scripts/test.sh; as root it drops to `nobody`.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/gpuseat-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
git ls-files -z | xargs -0 cp --parents -t "$work" 2>/dev/null || cp -r . "$work"
as_user=()
if [ "$(id -u)" = 0 ]; then
  chown -R nobody "$work"
  as_user=(runuser -u nobody --)
fi
"${as_user[@]}" env HOME="$work" PIP_CACHE_DIR="$work/.cache" bash -c '
  set -euo pipefail
  cd "$1"
  python3 -m venv venv
  venv/bin/python -m pip --disable-pip-version-check -q install .
  venv/bin/gpuseat plan examples/course-2016.toml --format json > plan.json
  venv/bin/python -c "import json; d = json.load(open(\"plan.json\")); assert d[\"options\"], d; print(\"check_install: pip install . as\", __import__(\"getpass\").getuser(), \"then gpuseat plan: ok,\", len(d[\"options\"]), \"options\")"
  # ... and the README literally: its set-up command, then gpuseat by the venv path and by activation
  bash scripts/setup.sh > setup.log
  .venv/bin/gpuseat --version > /dev/null
  . .venv/bin/activate
  gpuseat plan examples/course-h200-mig.toml --format json > plan2.json
  echo "check_install: README set-up (scripts/setup.sh), then .venv/bin/gpuseat and activate + gpuseat: ok"
' _ "$work"
