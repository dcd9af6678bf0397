#!/usr/bin/env bash
# Start a bring-up without ros2 launch, in the set-up environment:
#   scripts/run.sh libero_sim task_id:=3 dashboard:=true      (see: scripts/run.sh --list)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/env.sh
source "$ROOT/scripts/env.sh"
# From the caller's folder, as ros2 launch: runs/ and relative paths are the caller's.
exec python -m rpent.start "$@"
