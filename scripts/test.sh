#!/usr/bin/env bash
# `make test`'s runner: `cargo test --workspace --all-targets`, but with the test binaries run
# KBIND_TEST_JOBS at a time (default 3) instead of one after another. Most e2e binaries wait on
# their own loopback cluster pair and on watches, not on the CPU, so running a few at once cuts
# the wall time; every binary starts its own clusters on free ports, so they are independent.
#
# What it does, in cargo test's terms:
#   - builds every test target once: cargo test --workspace --all-targets --no-run
#     (diagnostics rendered on stderr, artifacts read from the JSON messages);
#   - runs each test executable in its package's directory with the runtime environment cargo
#     gives it (CARGO, CARGO_MANIFEST_DIR, CARGO_MANIFEST_PATH, CARGO_PKG_NAME,
#     CARGO_PKG_VERSION*, LD_LIBRARY_PATH with target/<profile>/deps), and the arguments given
#     here (e.g. a test name filter), like `cargo test -- ARGS`. Bench targets
#     (`harness = false`) run as cargo test runs them: no `--bench` flag, the same arguments;
#   - unlike cargo test, it does not stop at the first failing binary (as --no-fail-fast);
#   - each binary's output goes to target/test-logs/<name>.log and is printed whole when the
#     binary ends, in order of completion; binaries start longest first (durations of the last
#     run, kept in target/test-logs/durations; unknown binaries start first of all).
# The end: a table (binary, result, seconds), each failing test's error or panic, and the line
# `N passed, M failed`: the sums of the binaries' "test result:" lines, plus one failure per
# failing binary that reported none (a crash, a failing bench). Exit status 1 when a binary or
# the build failed.
#
# Usage: scripts/test.sh [ARGS passed to every test binary]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
jobs=${KBIND_TEST_JOBS:-3}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "KBIND_TEST_JOBS must be a positive integer" >&2; exit 2; }

# jq reads cargo's JSON messages; installed from the distribution's packages when missing.
if ! command -v jq >/dev/null; then
    echo "scripts/test.sh: installing jq" >&2
    apt-get update -qq >/dev/null && apt-get install -y -qq jq >/dev/null ||
        { echo "scripts/test.sh: jq is required (apt-get install jq)" >&2; exit 2; }
fi

target_dir=$("$cargo" metadata --no-deps --format-version 1 | jq -r .target_directory)
logs=$target_dir/test-logs
mkdir -p "$logs"
durations=$logs/durations

# Packages: manifest path -> name and version.
declare -A pkg_name pkg_version
while IFS=$'\t' read -r name version manifest; do
    pkg_name[$manifest]=$name
    pkg_version[$manifest]=$version
done < <("$cargo" metadata --no-deps --format-version 1 |
    jq -r '.packages[] | [.name, .version, .manifest_path] | @tsv')

# Build. Test executables are the artifacts compiled in test mode (unit tests of libs and
# bins, integration tests, benches); plain bins built for CARGO_BIN_EXE_* are not run.
artifacts=$logs/artifacts.tsv
build_start=$SECONDS
if ! "$cargo" test --workspace --all-targets --no-run --message-format=json-render-diagnostics |
    jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
           | [.manifest_path, (.target.kind | join(",")), .target.name, .executable] | @tsv' \
        >"$artifacts"; then
    echo "scripts/test.sh: the build failed" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
echo "built $(wc -l <"$artifacts") test binaries in $((SECONDS - build_start)) s; running $jobs at a time" >&2

# One entry per binary: label, manifest path, executable.
declare -a labels manifests exes
while IFS=$'\t' read -r manifest kind name exe; do
    [[ $kind == *lib* ]] && kind=lib
    labels+=("${pkg_name[$manifest]}/$kind/$name")
    manifests+=("$manifest")
    exes+=("$exe")
done <"$artifacts"

# Longest first, by the last run's durations; binaries never timed go first.
declare -A last
if [[ -f $durations ]]; then
    while read -r secs label; do last[$label]=$secs; done <"$durations"
fi
mapfile -t order < <(
    for i in "${!labels[@]}"; do printf '%s %s\n' "${last[${labels[$i]}]:-999999}" "$i"; done |
        sort -k1,1nr -k2,2n | cut -d' ' -f2
)

declare -A pid_of_job start_of result secs_of
running=0

start() {
    local i=$1 manifest=${manifests[$1]} dir log label=${labels[$1]}
    dir=$(dirname "$manifest")
    log=$logs/${label//\//-}.log
    local version=${pkg_version[$manifest]} major minor patch
    IFS=. read -r major minor patch <<<"${version%%[-+]*}"
    local deps libpath
    deps=$(dirname "${exes[$i]}")
    libpath=$deps:$(dirname "$deps")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    (
        cd "$dir"
        CARGO=$(command -v "$cargo" || echo "$cargo")
        export CARGO
        export CARGO_MANIFEST_DIR=$dir CARGO_MANIFEST_PATH=$manifest
        export CARGO_PKG_NAME=${pkg_name[$manifest]} CARGO_PKG_VERSION=$version
        export CARGO_PKG_VERSION_MAJOR=$major CARGO_PKG_VERSION_MINOR=$minor
        export CARGO_PKG_VERSION_PATCH=$patch LD_LIBRARY_PATH=$libpath
        exec "${exes[$i]}" "${args[@]}" </dev/null >"$log" 2>&1
    ) &
    pid_of_job[$!]=$i
    start_of[$i]=$SECONDS
    running=$((running + 1))
}

finish() {
    local pid=$1 status=$2 i
    i=${pid_of_job[$pid]}
    unset "pid_of_job[$pid]"
    running=$((running - 1))
    local secs=$((SECONDS - ${start_of[$i]})) label=${labels[$i]}
    secs_of[$i]=$secs
    if ((status == 0)); then result[$i]=ok; else result[$i]="FAILED($status)"; fi
    local log=$logs/${label//\//-}.log
    printf '\n===== %s: %s in %d s (%s) =====\n' "$label" "${result[$i]}" "$secs" "${exes[$i]}"
    cat "$log"
}

on_signal() {
    trap - INT TERM
    echo "scripts/test.sh: interrupted; stopping the running test binaries" >&2
    for pid in "${!pid_of_job[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait || true
    exit 130
}
trap on_signal INT TERM

args=("$@")
suite_start=$SECONDS
for i in "${order[@]}"; do
    while ((running >= jobs)); do
        status=0
        wait -n -p done_pid || status=$?
        finish "$done_pid" "$status"
    done
    start "$i"
done
while ((running > 0)); do
    status=0
    wait -n -p done_pid || status=$?
    finish "$done_pid" "$status"
done
wall=$((SECONDS - suite_start))

# Summary, durations for the next run's order, and the counts.
passed=0 failed=0 bad=0
{
    for i in "${!labels[@]}"; do printf '%s %s\n' "${secs_of[$i]}" "${labels[$i]}"; done
} | sort -k1,1nr >"$durations.new"
# A filtered run is no guide to the next full run's order.
if (($# == 0)); then mv "$durations.new" "$durations"; else rm -f "$durations.new"; fi

echo
echo "===== summary: ${#labels[@]} test binaries, $jobs at a time, $wall s wall ====="
for i in "${order[@]}"; do
    label=${labels[$i]}
    log=$logs/${label//\//-}.log
    read -r p f < <(sed -nE 's/^test result: [A-Za-z]+\. ([0-9]+) passed; ([0-9]+) failed;.*/\1 \2/p' "$log" |
        awk '{p += $1; f += $2} END {print p + 0, f + 0}')
    passed=$((passed + p))
    failed=$((failed + f))
    if [[ ${result[$i]} != ok ]]; then
        bad=$((bad + 1))
        ((f > 0)) || failed=$((failed + 1))
    fi
    printf '%-52s %-10s %5d s  %4d passed, %d failed\n' "$label" "${result[$i]}" "${secs_of[$i]}" "$p" "$f"
done
# A failing binary's own words, last: its log above is long (every test's tracing output and
# the clusters' log tails), and CI shows the end of the output. Each failing test's header,
# its error or panic and the lines right after it, each cut to 300 characters.
for i in "${order[@]}"; do
    [[ ${result[$i]} == ok ]] && continue
    label=${labels[$i]}
    echo
    echo "----- $label: what failed (the whole log is above) -----"
    # Log lines go first (tracing, JSON, klog, backtraces), so the lines after a match are its
    # message. An `Error: ` printed after output that did not end its line is cut out of it.
    sed -E 's/\x1b\[[0-9;]*m//g' "$logs/${label//\//-}.log" |
        grep -vE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[^ ]+Z +(TRACE|DEBUG|INFO|WARN|ERROR) |^\{"timestamp"|^[IWEF][0-9]{4} [0-9:.]+ +[0-9]+ |^ +[0-9]+: |^ +at |^Stack backtrace:$' |
        grep -E -A3 "^---- .* ----$|Error: |^thread '.*' panicked at |^test result: " |
        sed -E 's/Error: /\x01/; s/^[^\x01]*\x01/Error: /' |
        cut -c1-300 | head -n 60 || true
done
echo
echo "$passed passed, $failed failed"
((bad == 0))
