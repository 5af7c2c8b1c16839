#!/usr/bin/env bash
# Paired, repeated whole-process timing of `stragglerlab whatif` on two commits.
#
#   benchmarks/compare.sh [BASE [HEAD]]     # defaults: main and the working tree
#
# Each side runs from its own checkout (a temporary git worktree for a commit, the
# working tree itself for HEAD=WORKTREE) on this interpreter, with PYTHONPATH
# selecting the tree. The input, trace-ST replicated to DP $DP (default 1024), is built
# once by benchmarks/bench_whatif.py's replicate() into $WORK (default a temporary
# folder). After one warm-up run of each side, $PAIRS pairs (default 9) run in turn,
# the side that goes first alternating, and each run is timed as a whole process
# (wall, CPU = user + sys, peak RSS from /usr/bin/time). It prints every pair and the
# median HEAD/BASE ratio with its min-max: on a shared machine only a paired,
# repeated ratio means anything, and a median ratio within the min-max spread of
# 1.0 is noise. Both sides' whatif.json must be byte-identical, or it says so.
set -euo pipefail

REPO=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
BASE=${1:-main}
HEAD=${2:-WORKTREE}
DP=${DP:-1024}
PAIRS=${PAIRS:-9}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=$(command -v python3)
WORK=$(realpath "${WORK:-$(mktemp -d)}")
TIMER=/usr/bin/time
[ -x "$TIMER" ] || { echo "compare.sh needs GNU time at $TIMER (apt-get install time)" >&2; exit 2; }

trees=()
cleanup() { for t in "${trees[@]}"; do git -C "$REPO" worktree remove --force "$t" >/dev/null 2>&1 || true; done; }
trap cleanup EXIT

tree=""
checkout() {  # a commit -> $tree, a path whose code is that commit's
  if [ "$1" = WORKTREE ]; then tree=$REPO; return; fi
  tree="$WORK/tree-$(git -C "$REPO" rev-parse --short "$1")-$RANDOM"
  git -C "$REPO" worktree add --quiet --detach "$tree" "$1"
  trees+=("$tree")
}
checkout "$BASE"; A=$tree
checkout "$HEAD"; B=$tree

input="$WORK/dp$DP"
if [ ! -f "$input/trace.parquet" ]; then
  echo "building trace-ST replicated to DP $DP in $input" >&2
  "$PYTHON" - "$REPO" "$input" "$DP" <<'PY'
import sys
from pathlib import Path
import pandas as pd
import yaml
repo, out, dp = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, str(repo / "benchmarks"))
from bench_whatif import REFERENCE, replicate
df, meta = replicate(pd.read_parquet(REFERENCE / "trace-ST.parquet"),
                     yaml.safe_load((REFERENCE / "meta-ST.yaml").read_text()), dp)
out.mkdir(parents=True, exist_ok=True)
df.to_parquet(out / "trace.parquet", index=False)
(out / "meta.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
PY
fi

run() {  # tree side -> "wall cpu peak_mib"
  local out="$WORK/out-$2"
  rm -rf "$out"
  # From $WORK, not the checkout: `python -m` puts the current folder ahead of PYTHONPATH,
  # so run inside a checkout both sides would import that checkout's code.
  (cd "$WORK" && PYTHONPATH="$1" "$TIMER" -f "%e %U %S %M" -o "$WORK/time-$2" "$PYTHON" -m \
    stragglerlab whatif --trace "$input/trace.parquet" --meta "$input/meta.yaml" --out "$out" \
    --quiet >/dev/null)
  awk '{printf "%.3f %.3f %.1f\n", $1, $2 + $3, $4 / 1024}' "$WORK/time-$2"
}

"$PYTHON" -m compileall -q "$A/stragglerlab" "$B/stragglerlab" >/dev/null 2>&1 || true
run "$A" base >/dev/null; run "$B" head >/dev/null  # warm-up: page cache, bytecode
if ! cmp -s "$WORK/out-base/whatif.json" "$WORK/out-head/whatif.json"; then
  echo "note: whatif.json differs between $BASE and $HEAD" >&2
fi
echo "pair  base_wall head_wall  base_cpu head_cpu  base_MiB head_MiB  wall_ratio"
results=()
for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then a=$(run "$A" base); b=$(run "$B" head)
  else b=$(run "$B" head); a=$(run "$A" base); fi
  read -r aw ac am <<<"$a"; read -r bw bc bm <<<"$b"
  results+=("$aw $bw $ac $bc $am $bm")
  printf "%4d  %9s %9s  %8s %8s  %8s %8s  %10.3f\n" "$i" "$aw" "$bw" "$ac" "$bc" "$am" "$bm" \
    "$(awk -v a="$aw" -v b="$bw" 'BEGIN {print b / a}')"
done
printf '%s\n' "${results[@]}" | "$PYTHON" -c '
import statistics, sys
rows = [list(map(float, line.split())) for line in sys.stdin if line.strip()]
for name, i in (("wall", 0), ("cpu", 2), ("peak MiB", 4)):
    r = [row[i + 1] / row[i] for row in rows]
    a = statistics.median(row[i] for row in rows)
    b = statistics.median(row[i + 1] for row in rows)
    print(f"{name:8s} median base {a:8.3f}  head {b:8.3f}  head/base {statistics.median(r):.3f}"
          f" (min-max {min(r):.3f}-{max(r):.3f}, {len(r)} pairs)")
'
