#!/usr/bin/env bash
# Run the test suite inside the set-up environment; extra arguments go to pytest,
# e.g.  scripts/run_tests.sh -m "not slow"   or   scripts/run_tests.sh tests/contract -k cancel
#
# Two passes when pytest-xdist is installed: every test not marked `serial` on
# RPENT_TEST_JOBS workers (default: the cores, at most 4; one test file per worker at a
# time, so a module's nodes start once), then the `serial` ones (rates, latencies, counts
# per period) alone on the machine. RPENT_TEST_JOBS=1 runs one pass in this process, as
# before (use it with --pdb or -s). Do not pass -n yourself.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/env.sh
source "$ROOT/scripts/env.sh"
cd "$ROOT"
# Every message field is type- and range-checked on assignment, in the tests and in the
# nodes they start (Jazzy's debug checks; Humble always checks some, e.g. uint8[] bytes).
export ROS_PYTHON_CHECK_FIELDS=1
cores=$(nproc 2>/dev/null || echo 1)
jobs=${RPENT_TEST_JOBS:-$(( cores < 4 ? cores : 4 ))}
if [ "$jobs" -le 1 ] || ! python -c "import xdist" 2>/dev/null; then
  exec python -m pytest "$@"
fi
# Each pass ends with its slowest tests, so a log says where the suite's time goes.
durations=(--durations=15 --durations-min=5)
parallel=0
RPENT_TEST_PASS=parallel python -m pytest -n "$jobs" --dist loadfile "${durations[@]}" "$@" \
  || parallel=$?
# 2 interrupted (Ctrl-C), 3 internal error, 4 usage error: the serial pass would fare no better.
case $parallel in 2|3|4) exit "$parallel" ;; esac
serial=0
RPENT_TEST_PASS=serial python -m pytest -p no:xdist "${durations[@]}" "$@" || serial=$?
# 5: this pass had no tests (e.g. -k picked only the other pass's); both without: 5.
if [ "$parallel" -eq 5 ] && [ "$serial" -eq 5 ]; then exit 5; fi
[ "$parallel" -eq 5 ] && parallel=0
[ "$serial" -eq 5 ] && serial=0
[ "$parallel" -ne 0 ] && exit "$parallel"
exit "$serial"
