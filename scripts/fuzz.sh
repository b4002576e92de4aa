#!/usr/bin/env bash
# Fuzzes with libFuzzer under ASan and UBSan (clang): configures the fuzz build
# if needed, runs a target for a bounded time on a copy of its seed and
# regression corpora, keeps every finding with its regressions and exits
# non-zero if there was one.
#
# Usage: scripts/fuzz.sh [SECONDS] [libFuzzer options...]   (default 60 s)
# FUZZ_TARGET picks the target: fuzz_source (default), the source-opening path
# (seeds in tests/fuzz/corpus, findings in tests/fuzz/regressions), or
# fuzz_split, parsing an index in slices against parsing it whole
# (tests/fuzz/split_corpus, tests/fuzz/split_regressions), fuzz_views,
# random ranges of every view of a model opened from arbitrary bytes written
# over one file in memory (seeds tests/fuzz/corpus, findings in
# tests/fuzz/views_regressions), or fuzz_reply, what a server sends back to
# the HTTP source (tests/fuzz/reply_corpus, tests/fuzz/reply_regressions).
# FUZZ_BUILD names the
# build directory (default build-fuzz). FUZZ_CORPUS names a directory that
# keeps the grown corpus across runs (default: a temporary copy, removed at
# the end). FUZZ_ONLY=build configures and builds the target and runs nothing;
# FUZZ_ONLY=run runs the target built before without touching the build (so
# that several targets can run at once, as scripts/test.sh runs them).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
[ $# -gt 0 ] && shift
build=${FUZZ_BUILD:-build-fuzz}
target=${FUZZ_TARGET:-fuzz_source}
case "$target" in
fuzz_source) seeds_dir=tests/fuzz/corpus regressions=tests/fuzz/regressions ;;
fuzz_split) seeds_dir=tests/fuzz/split_corpus regressions=tests/fuzz/split_regressions ;;
fuzz_views) seeds_dir=tests/fuzz/corpus regressions=tests/fuzz/views_regressions ;;
fuzz_reply) seeds_dir=tests/fuzz/reply_corpus regressions=tests/fuzz/reply_regressions ;;
*)
    echo "fuzz: FUZZ_TARGET=$target: not fuzz_source, fuzz_split, fuzz_views or fuzz_reply" >&2
    exit 2
    ;;
esac

only=${FUZZ_ONLY:-}
case "$only" in
'' | build | run) ;;
*)
    echo "fuzz: FUZZ_ONLY=$only: not build or run" >&2
    exit 2
    ;;
esac

# fuzzer-no-link gives every target, the library included, the coverage
# instrumentation libFuzzer steers by, but for the harnesses themselves
# (tests/fuzz/coverage.ignore); UBSan findings abort instead of going on.
if [ "$only" != run ]; then
    if [ ! -f "$build/build.ninja" ]; then
        CC=clang meson setup "$build" -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
            -Dc_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=all -fsanitize-coverage-ignorelist=$PWD/tests/fuzz/coverage.ignore"
    fi
    ninja -C "$build" "tests/fuzz/$target"
fi
[ "$only" = build ] && exit 0

# In memory (/dev/shm) unless TMPDIR says where: the target writes each
# input's container, blob and manifest files there, and on a disk's file
# system every execution would pay for its journal.
base=${TMPDIR:-/dev/shm}
[ -d "$base" ] && [ -w "$base" ] || base=/tmp
work=$(mktemp -d "$base/tbm-fuzz-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/artifacts"
corpus=${FUZZ_CORPUS:-$work/corpus}
mkdir -p "$corpus"
cp "$seeds_dir"/* "$corpus/"
if [ -d "$regressions" ]; then
    find "$regressions" -maxdepth 1 -type f -exec cp {} "$corpus/" \;
fi
seeds=$(find "$corpus" -type f | wc -l)

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
log="$build/$target.log"
status=0
# The target's own scratch directory goes under $work too, so that a run that
# stops on a finding leaves nothing behind.
# One dictionary serves the source and split targets: its JSON keys and values
# matter to both; fuzz_reply has its own, of header fields and S3's XML.
dict=tests/fuzz/fuzz_source.dict
[ "$target" = fuzz_reply ] && dict=tests/fuzz/fuzz_reply.dict
TMPDIR="$work" "$build/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=32768 -dict="$dict" -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "$@" "$corpus" > "$log" 2>&1 || status=$?

findings=0
for f in "$work"/artifacts/crash-* "$work"/artifacts/leak-* "$work"/artifacts/timeout-* \
    "$work"/artifacts/oom-*; do
    [ -e "$f" ] || continue
    mkdir -p "$regressions"
    cp "$f" "$regressions/"
    echo "fuzz: finding kept as $regressions/$(basename "$f")"
    findings=$((findings + 1))
done

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
grown=$(find "$corpus" -type f | wc -l)
echo "fuzz: $target: ${execs:-unknown} executions in ${seconds} s; corpus ${seeds} -> ${grown} inputs" \
    "(log: $log)"
if [ "$status" -ne 0 ] || [ "$findings" -ne 0 ]; then
    tail -n 40 "$log"
    echo "fuzz: FAILED (libFuzzer status $status, $findings finding(s))"
    exit 1
fi
