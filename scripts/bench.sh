#!/usr/bin/env bash
# Builds tbmfs and runs the mount throughput benchmarks (scripts/bench.py, then
# scripts/bench_http.py for HTTP sources);
# needs root for the mounts and about 2 GiB of free space in /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null
/usr/bin/python3 scripts/bench.py "$@"
# HTTP sources, against a private nginx on loopback (scripts/bench_http.py)
exec /usr/bin/python3 scripts/bench_http.py "$@"
