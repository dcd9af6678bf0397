"""The Franka FR3: the robot contract served through franky (libfranka 0.21). ``settings``
holds its limits and typed settings, ``driver`` talks to the arm (plain Python, no rclpy),
``node`` declares the parameters and serves the contract.

Control spaces (every row is one control period, 1 / control_rate s):

* ``ee_delta`` (default, relative): dx, dy, dz in m and a rotation vector drx, dry, drz in
  rad, all in the base frame (rotations about the end effector), then a gripper command
  (-1 open, +1 close, 0 keep). Each row moves the commanded pose target.
* ``joint_position`` (absolute): the seven FR3 joint targets in rad, then the same
  gripper command.

``execute_chunk`` streams one target per control period as an asynchronous franky
motion: each new target preempts the previous one, so the arm follows the stream without
stopping in between. Cancel, ``stop``, a preempting goal and the safety watchdog halt the
arm with franky's stop motion for the active control signal, within one control period.
Every motion passes the safety layer (:mod:`rpent_hw.safety`) before anything moves.

A controller PC that misses the arm's 1 kHz deadlines (a loaded machine without a real-time
kernel) makes the arm abort a valid stream: a ``communication_constraints_violation`` or
discontinuity reflex, or franky's planner failing ("Motion planner failed with error code
-111"). A chunk recovers from such an error and sends its row again, ``reflex_retries``
times, with a warning in ``robot_state.errors``. Any other reflex / control exception (a
collision, a limit) fails the running goal with franky's message, shows in
``robot_state.errors`` and triggers ``recover_from_errors`` once; if that fails the node
refuses motions until ``reset`` succeeds in recovering. A lost connection (robot powered
off, network cut, franky-sim stopped) is reported the same way and retried every second.
"""
