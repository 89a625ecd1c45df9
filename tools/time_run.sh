#!/bin/bash
# Time `harness run` (the digits experiment) for two commits side by side: BEFORE and AFTER are checkouts
# (git worktrees) of each; the runs alternate, ROUNDS rounds, each from empty folders under /tmp/hr-<which>-<round>,
# every output line stamped with the seconds since the start (/tmp/hr-<which>-<round>.log; the last line is the wall
# time). In a worktree the stages live at the top level: link them under harness/ first, as the editable install
# does for this checkout (ln -s ../upstream BEFORE/harness/upstream; ln -s ../downstream BEFORE/harness/downstream).
# Usage: bash tools/time_run.sh BEFORE AFTER [ROUNDS]   (about 2 minutes a run on a 2-core CPU)
set -euo pipefail
before=$(realpath "$1"); after=$(realpath "$2"); rounds=${3:-2}
stamp() { python -u -c "
import sys, time
t = time.time()
for line in sys.stdin: print(f'{time.time() - t:7.2f} {line}', end='')
"; }
for round in $(seq 1 "$rounds"); do
  for which in before after; do
    dir=$before; [ "$which" = after ] && dir=$after
    root=/tmp/hr-$which-$round
    rm -rf -- "$root"
    echo "== $which round $round/$rounds $(date -u +%H:%M:%S) UTC, 1-minute load $(cut -d' ' -f1 /proc/loadavg)"
    (cd "$dir" && /usr/bin/time -f "WALL %e s" python -m harness.cli run "runs_root=$root" 2>&1 | stamp > "$root.log")
    grep -E "WALL|verdicts agree" "$root.log" | cut -c1-120
  done
done
