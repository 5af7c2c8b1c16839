#!/usr/bin/env bash
# The crash-point harness at full length: every writing verb SIGKILLed at each rename of
# its write path and at 50 random delays, counting the states the kills left (old, new,
# never a mix; the monitor's history: whole lines, resumed), and two writers of each
# verb started together (PAIRS times: never a corrupt output). The test suite runs the renames, 50 random kills of `whatif`, 3 of each
# other verb and 2 pairs a verb; this runs 50 kills and 20 pairs of each.
#
#     benchmarks/crash_points.sh [KILLS [PAIRS]]      # from the repository root
set -euo pipefail
kills="${1:-50}"
STRAGGLERLAB_CRASH_KILLS="$kills" STRAGGLERLAB_CRASH_KILLS_OTHERS="$kills" \
  STRAGGLERLAB_CONCURRENT_PAIRS="${2:-20}" \
  "${PYTHON:-.venv/bin/python}" -m pytest -q -s -m slow tests/unit/test_crash_points.py \
  2>&1 | grep -E "kill points|kills of|pairs of|passed|failed"
