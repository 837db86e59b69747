#!/usr/bin/env bash
# Issue 25's check that a refactor moved nothing: bench/calls.py --cpu and
# bench/exec_overhead.py for two trees, alternated round by round in one run of this script.
#   bench/before_after.sh BASE [ROUNDS]   (BASE: a git revision; the other tree is HEAD)
# Each tree's runner/ is exported (git archive), with HEAD's bench/, and run by this checkout's
# .venv with PYTHONPATH on it; the images are the same for both. Prints each round, tree by
# tree.
set -euo pipefail
base=${1:?usage: bench/before_after.sh BASE [ROUNDS]}
rounds=${2:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for tree in base head; do
  rev=$base; [ "$tree" = head ] && rev=HEAD
  mkdir "$work/$tree"
  git -C "$root" archive "$rev" runner sandbox-profiles tests | tar -x -C "$work/$tree"
  git -C "$root" archive HEAD bench | tar -x -C "$work/$tree"  # one bench for both trees
  ln -s "$root/.venv" "$work/$tree/.venv"
  PYTHONPATH="$work/$tree" "$root/.venv/bin/python" -m compileall -q "$work/$tree/runner" >/dev/null
done
for round in $(seq 1 "$rounds"); do
  for tree in base head; do
    echo "== round $round, $tree"
    (cd "$work/$tree" && PYTHONPATH="$work/$tree" "$root/.venv/bin/python" bench/calls.py \
      --cpu --no-rss --repeat 1 | sed -n '/host CPU/,$p' || true)
    (cd "$work/$tree" && PYTHONPATH="$work/$tree" FLOW_RUNNER_WARM=0 "$root/.venv/bin/python" \
      bench/exec_overhead.py --runs 3 --cases "a',b,c" --phases 0 --pool-memory '' \
      | grep -E "^\| \((a'|b|c)\)" | cut -d'|' -f2,3,7 || true)
  done
done
