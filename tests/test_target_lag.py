"""A stream of ee_delta chunks faster than the arm can follow does not pile up on its target.

Each streamed chunk continues from the target the chunk before left the arm heading for,
so the motion flows on across boundaries. While the hand keeps up that is what the policy
meant; when it cannot (held up by contact, a loaded servo, a twin whose physics runs slower
than the clock), every chunk would add its deltas to a target the hand has not reached,
and the arm would run on, after the stream ends, to where the summed deltas point. The
robot node pulls its target back at each boundary to lead the measured hand by at most
``max_target_lead``, or what the stream moves it in ``max_target_lag`` where that is farther. Here the SO-101 node runs on an emulated
Feetech bus whose servos are slowed so that the hand covers about a third of what the
stream asks.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rpent_common.processes import wait_until
from rpent_contract.client import next_message
from rpent_contract.qos import STATE_QOS
from rpent_interfaces.action import ExecuteChunk
from rpent_interfaces.msg import RobotState

pytestmark = [pytest.mark.slow, pytest.mark.serial]

CONFIG = Path(__file__).resolve().parents[1] / "config" / "so101.yaml"
START = {"shoulder_lift": -30.0, "elbow_flex": 30.0, "wrist_flex": 60.0}
ROW_Y = 0.002  # m per step: 6 cm/s at the SO-101's 30 Hz
SLOWDOWN = 40  # the servos' speed under the STS3215's: the hand follows at about 2.5 cm/s
RATE = 30.0  # Hz, the SO-101's control rate
LAG = 0.2  # s, the node's max_target_lag
LEAD = max(0.01, LAG * RATE * ROW_Y)  # m the target leads the hand by at most: 1.2 cm
LAST_STEPS = 10


def _y(client) -> float:
    return next_message(client.node, RobotState, "robot_state", STATE_QOS, 10).ee_pose.position.y


def test_a_stream_the_arm_cannot_follow_leaves_its_target_near_the_hand(
        rclpy_context, node_factory, tmp_path):
    from rpent_contract.client import RobotClient
    from rpent_hw.stream_check import constant_delta, stream_chunks
    from rpent_twins.feetech_emulator import (STS3215_MAX_SPEED, FeetechBusProcess,
                                           so101_calibration, write_calibration_file)

    calibration = so101_calibration()
    write_calibration_file(tmp_path, "arm", calibration)
    bus = FeetechBusProcess(calibration, START, max_speed=STS3215_MAX_SPEED / SLOWDOWN)
    client = None
    try:
        node_factory("rpent_hw", "so101_node",
                     {"port": bus.port, "calibration_dir": str(tmp_path), "robot_id": "arm",
                      "max_target_lead": 0.01, "max_target_lag": LAG,
                      "control_rate": RATE},
                     name="so101", params_file=CONFIG)
        client = RobotClient()
        client.wait_ready(60)
        y0 = _y(client)
        row = np.zeros(7)
        row[1] = ROW_Y
        record = stream_chunks(client, constant_delta(row, steps=30), chunks=4,
                               last_steps=LAST_STEPS)
        results = [result for _status, result in record.results]
        assert [r.outcome for r in results] == [ExecuteChunk.Result.OUTCOME_CANCELED] * 3 + \
            [ExecuteChunk.Result.OUTCOME_COMPLETED], [r.message for r in results]
        asked = sum(r.steps_executed for r in results) * ROW_Y

        # Where the hand was as the last chunk took over (its first step's feedback comes
        # one period after it starts).
        stamps = np.array([t for t, _p in record.poses])
        took_over = record.steps[-1][0] - record.period
        y_then = float(np.interp(took_over, stamps, [p[1] for _t, p in record.poses]))
        assert y_then - y0 < asked - 2 * LEAD - LAST_STEPS * ROW_Y, \
            f"the hand kept up with the stream ({y_then - y0:.3f} of {asked:.3f} m): slow " \
            f"the servos further for this test to mean anything"

        # At rest: where the last chunk's rows, added to a target near the hand, lead.
        last = [_y(client)]

        def at_rest() -> bool:
            last.append(_y(client))
            return abs(last[-1] - last[-2]) < 2e-4

        wait_until(at_rest, 20, interval=0.3, what="the arm at rest after the stream")
        assert last[-1] - y0 <= y_then - y0 + LEAD + LAST_STEPS * ROW_Y + 0.004, (
            f"the arm ran on to {last[-1] - y0:.3f} m of the {asked:.3f} m the stream summed "
            f"to; its hand was at {y_then - y0:.3f} m when the last chunk took over")
    finally:
        if client is not None:
            client.close()
        bus.stop()
