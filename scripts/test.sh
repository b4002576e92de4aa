#!/usr/bin/env bash
# Installs what is missing, builds tbmfs and runs every test: the whole suite
# (unit tests and real FUSE mounts) in a normal build, a release build with
# warnings as errors, the suite again under ASan and UBSan, then bounded
# libFuzzer runs over the source-opening path, the
# sliced index parse and what a server sends back. Mounting
# needs root or a user allowed to use /dev/fuse.
#
# Usage: scripts/test.sh [--quick] [meson test arguments...]
#   --quick   only the normal build's suite
#   TBMFS_FUZZ_SECONDS (default 60) bounds each fuzz run.
set -uo pipefail
cd "$(dirname "$0")/.."

quick=0
if [ "${1:-}" = "--quick" ]; then
    quick=1
    shift
fi

# Runs meson test in build dir $1 and prints a plain passed/failed line.
suite() {
    local dir=$1
    shift
    meson test -C "$dir" --print-errorlogs "$@"
    local status=$?
    /usr/bin/python3 - "$dir/meson-logs/testlog.json" "$dir" <<'PY'
import json, sys
results = [json.loads(line)["result"] for line in open(sys.argv[1]) if line.strip()]
passed = sum(r == "OK" for r in results)
skipped = sum(r == "SKIP" for r in results)
print("%s: %d passed, %d failed, %d skipped"
      % (sys.argv[2], passed, len(results) - passed - skipped, skipped))
PY
    return $status
}

# Each step's wall time, printed as it ends: what keeps the whole run's time in view.
mark=$SECONDS
took() {
    echo "test.sh: $1: $((SECONDS - mark)) s (total $SECONDS s)"
    mark=$SECONDS
}

scripts/install-deps.sh || exit 1
took "dependencies"
# Warnings are errors here, though not in the default options: packagers
# build with flags of their own.
[ -d build ] || meson setup build -Dwerror=true || exit 1
meson configure build -Dwerror=true || exit 1
ninja -C build || exit 1
took "build"
suite build "$@" || exit 1
took "suite"
[ $quick -eq 1 ] && exit 0

# What a packager builds: the release configuration must build cleanly too.
[ -d build-release ] || meson setup build-release --buildtype=release -Dwerror=true || exit 1
ninja -C build-release || exit 1
took "release build"

if [ ! -d build-asan ]; then
    meson setup build-asan -Db_sanitize=address,undefined -Dwerror=true \
        -Dc_args=-fno-sanitize-recover=all || exit 1
fi
ninja -C build-asan || exit 1
took "ASan+UBSan build"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 suite build-asan "$@" || exit 1
took "ASan+UBSan suite"

# The fuzz targets are built one after another, then run two at a time, each
# for the whole bound: a libFuzzer run keeps one core busy.
fuzz_seconds=${TBMFS_FUZZ_SECONDS:-60}
for target in fuzz_source fuzz_split fuzz_views fuzz_reply; do
    FUZZ_ONLY=build FUZZ_TARGET=$target scripts/fuzz.sh || exit 1
done
took "fuzz build"
fuzz_two() {
    FUZZ_ONLY=run FUZZ_TARGET=$1 scripts/fuzz.sh "$fuzz_seconds" &
    local first=$!
    FUZZ_ONLY=run FUZZ_TARGET=$2 scripts/fuzz.sh "$fuzz_seconds"
    local second=$?
    wait $first && [ $second -eq 0 ]
}
fuzz_two fuzz_source fuzz_split || exit 1
fuzz_two fuzz_views fuzz_reply || exit 1
took "fuzzing, ${fuzz_seconds} s per target"
