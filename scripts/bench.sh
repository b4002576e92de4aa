#!/usr/bin/env bash
# Builds tbmfs and runs the benchmarks: scripts/bench.py [RUNS [FIGURES]] (throughput through
# the mount, side by side with squashfuse and squashfuse_ll, which it installs when missing),
# then scripts/bench_bridges.py (model.safetensors against raw.tb and a user's script),
# scripts/bench_gguf.py (model.gguf and model.Q8_0.gguf, llama.cpp from the mount) and
# scripts/bench_http.py (HTTP sources against a private nginx on loopback); needs root for the
# mounts and about 8 GiB of free space in /tmp and /var/tmp.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
# the peers of figure 8: squashfuse and squashfuse_ll over a squashfs image
scripts/install-bench-deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null
/usr/bin/python3 scripts/bench.py "$@"
# model.safetensors, a bf16 2:4 model of 1 GiB (scripts/bench_bridges.py; RUNS only)
/usr/bin/python3 scripts/bench_bridges.py "${1:-3}"
# model.gguf and model.Q8_0.gguf of a 2 GiB llama model, llama.cpp from the mount
# (scripts/bench_gguf.py; RUNS only)
/usr/bin/python3 scripts/bench_gguf.py "${1:-3}"
# HTTP sources, against a private nginx on loopback (scripts/bench_http.py)
exec /usr/bin/python3 scripts/bench_http.py "$@"
