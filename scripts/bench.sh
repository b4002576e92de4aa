#!/usr/bin/env bash
# Builds tbmfs and runs the mount throughput benchmark (scripts/bench.py);
# needs root for the mounts and about 2 GiB of free space in /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null
exec /usr/bin/python3 scripts/bench.py "$@"
