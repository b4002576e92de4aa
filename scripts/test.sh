#!/usr/bin/env bash
# Installs what is missing, builds tbmfs and runs every test (unit tests and
# real FUSE mounts; mounting needs root or a user allowed to use /dev/fuse).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
if [ ! -d build ]; then
    meson setup build
fi
ninja -C build
meson test -C build --print-errorlogs "$@"
