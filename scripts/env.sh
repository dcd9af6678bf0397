# Source me:  source scripts/env.sh
# Activates .venv and the built workspace so `ros2`-less tools, node executables,
# pytest and the bench scripts find rclpy, rpent_interfaces and the rpent packages.
# Works in bash and zsh; run scripts/setup.sh first.

_rpent_root=$(cd "$(dirname "${BASH_SOURCE[0]:-${(%):-%x}}")/.." && pwd)
_rpent_venv="$_rpent_root/.venv"
if [ ! -x "$_rpent_venv/bin/python" ]; then
  echo "rpent: $_rpent_venv not found; run $_rpent_root/scripts/setup.sh first" >&2
  return 1 2>/dev/null || exit 1
fi
# shellcheck disable=SC1091
source "$_rpent_venv/bin/activate"

if [ -z "${ROS_DISTRO:-}" ] || [ "${RPENT_PYPI_ROS:-0}" = 1 ]; then
  # ROS 2 from PyPI wheels: the venv is the underlay. Setting the library path here
  # (instead of letting ros_wheels_bootstrapper re-exec every Python process) keeps
  # start-up fast and lets non-Python children find the libraries too.
  export RPENT_PYPI_ROS=1
  _rpent_site=$("$_rpent_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
  _rpent_libs="$_rpent_venv/lib"
  for _d in "$_rpent_site"/ros_*.libs; do [ -d "$_d" ] && _rpent_libs="$_rpent_libs:$_d"; done
  export LD_LIBRARY_PATH="$_rpent_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export _ROS_WHEELS_BOOTSTRAP_COMPLETE=1
  export AMENT_PREFIX_PATH="$_rpent_venv${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
  export CMAKE_PREFIX_PATH="$_rpent_venv${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
  unset _d _rpent_site _rpent_libs
fi

if [ "${RPENT_ENV_NO_WORKSPACE:-0}" != 1 ]; then
  # colcon's setup scripts read unset variables; callers may run with `set -u`.
  case $- in *u*) _rpent_nounset=1; set +u ;; *) _rpent_nounset=0 ;; esac
  if [ -f "$_rpent_root/ros_ws/install/local_setup.bash" ]; then
    # local_setup adds only this workspace, leaving the venv underlay in place.
    if [ -n "${ZSH_VERSION:-}" ]; then
      source "$_rpent_root/ros_ws/install/local_setup.zsh"
    else
      source "$_rpent_root/ros_ws/install/local_setup.bash"
    fi
  else
    echo "rpent: ros_ws is not built yet; run $_rpent_root/scripts/setup.sh" >&2
  fi
  [ "$_rpent_nounset" = 1 ] && set -u
  unset _rpent_nounset
fi

# MuJoCo (LIBERO, franky-sim) renders headless through EGL.
export MUJOCO_GL="${MUJOCO_GL:-egl}"
export PYOPENGL_PLATFORM="${PYOPENGL_PLATFORM:-egl}"
export RPENT_ROOT="$_rpent_root"
unset _rpent_root _rpent_venv
