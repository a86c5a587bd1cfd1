#!/usr/bin/env bash
# Create reference/.venv with the pinned Python reference SDK (smallestai==5.14.0)
# and the harness dependencies. Idempotent: re-running is a no-op once the venv
# matches requirements.txt + constraints.txt. Needs only python3 (>= 3.9) and PyPI.
#
#   bash reference/setup.sh            # uses python3 from PATH
#   PYTHON=python3.12 bash reference/setup.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

PYTHON="${PYTHON:-python3}"
VENV=.venv
STAMP="$VENV/.reference-setup-stamp"

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "setup.sh: $PYTHON not found (set PYTHON=/path/to/python3)" >&2
    exit 1
fi
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)' || {
    echo "setup.sh: Python >= 3.9 required, got $("$PYTHON" --version 2>&1)" >&2
    exit 1
}

want="$(cat requirements.txt constraints.txt | sha256sum | cut -d' ' -f1)"
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] \
   && "$VENV/bin/python" -c 'import smallestai.atoms.crew.server, aiohttp, websockets' >/dev/null 2>&1; then
    echo "reference/.venv is up to date"
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt -c constraints.txt
"$VENV/bin/python" - <<'PY'
from importlib.metadata import version
import smallestai.atoms.crew.server  # noqa: F401  (the reference entrypoint imports)
assert version("smallestai") == "5.14.0", version("smallestai")
print("smallestai", version("smallestai"), "| fastapi", version("fastapi"), "| uvicorn", version("uvicorn"),
      "| openai", version("openai"), "| websockets", version("websockets"), "| aiohttp", version("aiohttp"))
PY
echo "$want" > "$STAMP"
echo "reference/.venv ready: run  reference/.venv/bin/python reference/record.py"
