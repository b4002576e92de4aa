#!/usr/bin/env bash
# Installs what is missing, builds tbmfs and runs every test (unit tests and
# real FUSE mounts; mounting needs root or a user allowed to use /dev/fuse).
set -uo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh || exit 1
if [ ! -d build ]; then
    meson setup build || exit 1
fi
ninja -C build || exit 1
meson test -C build --print-errorlogs "$@"
status=$?
# One closing line in the plain form CI tools read, counted from meson's log.
/usr/bin/python3 - build/meson-logs/testlog.json <<'PY'
import json, sys
results = [json.loads(line)["result"] for line in open(sys.argv[1]) if line.strip()]
passed = sum(r == "OK" for r in results)
skipped = sum(r == "SKIP" for r in results)
print("tests: %d passed, %d failed, %d skipped" % (passed, len(results) - passed - skipped, skipped))
PY
exit $status
