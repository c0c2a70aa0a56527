#!/usr/bin/env bash
# make test-stress: does the suite pass on a fresh clone of a loaded machine?
#
# Clones this repository's committed HEAD into a temporary directory, starts
# two CPU burners at normal priority, runs `make test` there N times in a row
# (default 10), prints each run's result and duration and the pass count,
# and stops the burners (also on Ctrl-C). Exits 0 only when every run passed.
#
# usage: scripts/test-stress.sh [N]        (or N=… in the environment)
# environment:
#   TOOLS   test servers to use (default: this checkout's .tools); passed on
#           to the clone's `make test`, so that it does not build them again
#   BURNERS number of CPU burners (default 2)
#   KEEP    directory for the logs (default: a new directory under /tmp)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-${N:-10}}
BURNERS=${BURNERS:-2}
export TOOLS=${TOOLS:-$ROOT/.tools}
case $N in '' | *[!0-9]*) echo "test-stress: N must be a number, got '$N'" >&2; exit 2 ;; esac

work=$(mktemp -d /tmp/ferry-stress.XXXXXX)
logs=${KEEP:-$work/logs}
mkdir -p "$logs"
burners=()
cleanup() {
  for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${burners[@]}"; do wait "$pid" 2>/dev/null; done
  burners=()
  rm -rf "$work/ferry"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rev=$(git -C "$ROOT" rev-parse HEAD) || exit 2
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ]; then
  echo "test-stress: note: uncommitted changes in $ROOT are not tested (the clone is of $rev)"
fi
git clone --quiet --no-hardlinks "$ROOT" "$work/ferry" && git -C "$work/ferry" checkout --quiet --detach "$rev" || {
  echo "test-stress: cannot clone $ROOT" >&2
  exit 2
}
echo "test-stress: $N x make test on a fresh clone of $rev ($work/ferry), $BURNERS CPU burners, TOOLS=$TOOLS, logs in $logs"

for _ in $(seq "$BURNERS"); do
  bash -c 'while :; do :; done' &
  burners+=($!)
done

pass=0
durations=()
for i in $(seq "$N"); do
  t0=$(date +%s)
  make -C "$work/ferry" test TOOLS="$TOOLS" >"$logs/run-$i.log" 2>&1
  rc=$?
  d=$(($(date +%s) - t0))
  durations+=("$d")
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1))
    echo "test-stress: run $i/$N: pass ($d s; load $(cut -d' ' -f1-3 /proc/loadavg))"
  else
    echo "test-stress: run $i/$N: FAIL, exit $rc ($d s; load $(cut -d' ' -f1-3 /proc/loadavg)); log $logs/run-$i.log"
    grep -E '^(\s*--- FAIL|FAIL|panic:)|_test\.go:[0-9]+:' "$logs/run-$i.log" | head -40 | sed 's/^/    /'
  fi
done
cleanup
echo "test-stress: $pass/$N passed; durations [s]: ${durations[*]}"
[ "$pass" -eq "$N" ]
