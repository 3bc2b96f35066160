#!/usr/bin/env bash
# Install the lowest version of every runtime dependency pyproject.toml declares (each `>=X`
# pinned to `==X`) into a scratch venv, check that they fit together, and run a smoke test.
#
#   tests/lowest_versions.sh [PYTEST ARGS...]     # default: the smoke tests below
#   LOWEST_VENV=/tmp/low tests/lowest_versions.sh # reuse a venv between runs
#
# Needs PyPI (or its cache) and nothing else: the tests run against the fake Ollama.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${LOWEST_VENV:-$(mktemp -d)/venv}"
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
pins="$venv/lowest-pins.txt"
python3 - >"$pins" <<'EOF'
import re
import tomllib

with open("pyproject.toml", "rb") as file:
    project = tomllib.load(file)["project"]
for requirement in project["dependencies"]:
    match = re.match(r"\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([^,;\s]+)", requirement)
    if match is None:
        raise SystemExit(f"no lower bound in {requirement!r}: declare one (>=X)")
    print(f"{match.group(1)}=={match.group(3)}")
EOF
echo "Installing the declared lowest versions into $venv:" >&2
sed 's/^/  /' "$pins" >&2
"$venv/bin/python" -m pip install -q --upgrade pip
# The dev extras (pytest, pexpect, …) resolve freely, but never above or below a pinned
# runtime dependency: the constraints file holds every runtime requirement at its minimum.
"$venv/bin/python" -m pip install -q -c "$pins" -e ".[dev]"
"$venv/bin/python" -m pip check
if ! "$venv/bin/python" - "$pins" <<'EOF'; then
import sys
from importlib.metadata import version


def release(text: str) -> tuple[int, ...]:
    parts = [int(part) for part in text.split(".")]
    while parts and parts[-1] == 0:  # 1.0 == 1.0.0
        parts.pop()
    return tuple(parts)


wrong = []
for line in open(sys.argv[1]):
    name, pinned = line.strip().split("==")
    if release(version(name)) != release(pinned):
        wrong.append(f"{name} {version(name)} (declared lowest {pinned})")
if wrong:
    raise SystemExit("Not the declared lowest versions: " + ", ".join(wrong))
EOF
    exit 1
fi
if [[ $# -eq 0 ]]; then
    set -- -q -x -p no:cacheprovider -n auto --dist loadfile \
        tests/test_cli.py tests/test_loaders.py tests/test_chat_loop.py tests/test_eval.py \
        tests/test_edge.py tests/test_chat_terminal.py tests/test_cli_conventions.py
fi
"$venv/bin/python" -m pytest "$@"
