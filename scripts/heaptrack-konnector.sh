#!/usr/bin/env bash
# A konnector that records a heaptrack heap profile of itself, for `make bench`:
#
#   KBIND_HEAP_PROFILE=/tmp/konnector.heap.zst KONNECTOR=$PWD/scripts/heaptrack-konnector.sh \
#     make bench BENCH_INSTANCES=10000
#   heaptrack_print -f /tmp/konnector.heap.zst --print-peaks 1     # what was live at the peak
#
# It execs the konnector in its own process (heaptrack's preload library, its output through a
# FIFO to heaptrack_interpret), so the pid the bench reads CPU and RSS from stays the
# konnector's. Every allocation is traced, so CPU and latency figures of such a run mean
# nothing; the heap figures do not depend on the load or on the build's optimisation level,
# so a debug konnector (KBIND_HEAP_KONNECTOR=target/debug/konnector) serves as well.
# heaptrack comes from the distribution (Debian's `heaptrack` package); nothing is downloaded.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
konnector=${KBIND_HEAP_KONNECTOR:-$root/target/release/konnector}
out=${KBIND_HEAP_PROFILE:?KBIND_HEAP_PROFILE names the file the profile is written to}
lib=""
for dir in /usr/lib/heaptrack /usr/lib/x86_64-linux-gnu/heaptrack /usr/lib/aarch64-linux-gnu/heaptrack; do
  [ -e "$dir/libheaptrack_preload.so" ] && { lib=$dir; break; }
done
[ -n "$lib" ] || { echo "heaptrack-konnector: heaptrack is not installed (apt-get install heaptrack)" >&2; exit 2; }
fifo=$(mktemp -u "${TMPDIR:-/tmp}/konnector-heaptrack.XXXXXX")
mkfifo "$fifo"
# The interpreter opens the FIFO, so removing its name afterwards loses nothing.
("$lib/libexec/heaptrack_interpret" <"$fifo" | zstd -q -c >"$out"; rm -f "$fifo") &
exec env LD_PRELOAD="$lib/libheaptrack_preload.so${LD_PRELOAD:+:$LD_PRELOAD}" \
  DUMP_HEAPTRACK_OUTPUT="$fifo" "$konnector" "$@"
