#!/usr/bin/env bash
# Installs the Debian packages that only the benchmarks use, when any is missing: the peers
# they are measured against (squashfuse and squashfuse_ll over a squashfs image for
# scripts/bench.py, aria2c -x16 for scripts/bench_far.py; rclone and nginx come with
# scripts/install-deps.sh, which the tests need too). Safe to run again.
set -euo pipefail

peers=(squashfuse squashfs-tools aria2)
missing=()
for p in "${peers[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing the benchmarks' peers: ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
