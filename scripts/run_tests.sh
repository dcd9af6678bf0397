#!/usr/bin/env bash
# Run the test suite inside the set-up environment; extra arguments go to pytest,
# e.g.  scripts/run_tests.sh -m "not slow"   or   scripts/run_tests.sh tests/contract -k cancel
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/env.sh
source "$ROOT/scripts/env.sh"
cd "$ROOT"
# Every message field is type- and range-checked on assignment, in the tests and in the
# nodes they start (Jazzy's debug checks; Humble always checks some, e.g. uint8[] bytes).
export ROS_PYTHON_CHECK_FIELDS=1
exec python -m pytest "$@"
