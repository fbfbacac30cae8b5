#!/usr/bin/env bash
# Set up selfcal on a fresh Debian 12 machine: system libraries, .venv/, the package itself.
# Idempotent: a second run with nothing changed takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the browser the 3D viewer's tests open it in (headless)
libs="libgomp1 libgl1 libegl1 libx11-6 libusb-1.0-0 chromium"
missing=""
for pkg in $libs; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "selfcal setup: installing system libraries:$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends $missing >/dev/null
    else
        echo "selfcal setup: missing system libraries:$missing" >&2
        echo "run as root:  apt-get install -y --no-install-recommends$missing" >&2
        exit 1
    fi
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "selfcal setup: creating .venv"
    "$python" -m venv .venv
fi

stamp=.venv/.selfcal-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "selfcal setup: installing selfcal and its dependencies into .venv (a few minutes the first time)"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e ".[test]"
    echo "$want" > "$stamp"
fi
