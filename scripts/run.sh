#!/usr/bin/env bash
# Start a bring-up without ros2 launch, in the set-up environment:
#   scripts/run.sh libero_sim task_id:=3 dashboard:=true      (see: scripts/run.sh --list)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/env.sh
source "$ROOT/scripts/env.sh"
cd "$ROOT"
exec python -m rpent.start "$@"
