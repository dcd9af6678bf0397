"""Goal checks (rpent_contract.validation), control spaces, chunk packing and params."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rpent_contract.control_space import (  # noqa: E402
    ControlSpaceSpec,
    array_to_chunk,
    chunk_to_array,
    find_space,
)
from rpent_contract.geometry import (  # noqa: E402
    normalize_quaternion,
    pose_from_msg,
    pose_to_msg,
)
from rpent_contract.validation import (  # noqa: E402
    GoalRejected,
    Workspace,
    check_chunk,
    check_pose_target,
    check_positive,
)

DELTA = ControlSpaceSpec(
    name="ee_delta",
    labels=("dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"),
    units=("1",) * 7,
    lower=(-1.0,) * 7,
    upper=(1.0,) * 7,
    relative=True,
    frame_id="base_link",
    step_scale=(0.05, 0.05, 0.05, 0.5, 0.5, 0.5),
)
JOINTS = ControlSpaceSpec(
    name="joint_position",
    labels=("j1", "j2", "j3"),
    units=("rad", "rad", "rad"),
    lower=(-3.0, -2.0, -1.0),
    upper=(3.0, 2.0, 1.0),
    relative=False,
    max_step_change=(0.1, 0.1, 0.2),
)
SPACES = (DELTA, JOINTS)
WS = Workspace([0.2, -0.4, 0.1], [0.8, 0.4, 0.5])


def chunk(rows):
    return np.asarray(rows, dtype=np.float64)


# ---------------------------------------------------------------- check_chunk basics


def test_valid_chunk_returns_its_space():
    actions = chunk([[0.1, 0, 0, 0, 0, 0, -1], [0, 0.2, 0, 0, 0, 0, 1]])
    assert check_chunk(actions, "ee_delta", SPACES, max_horizon=10) is DELTA
    assert check_chunk(chunk([[0, 0, 0]]), "joint_position", SPACES, max_horizon=10) is JOINTS


def test_bounds_are_inclusive():
    actions = chunk([[1, -1, 1, -1, 1, -1, 1]])
    assert check_chunk(actions, "ee_delta", SPACES, max_horizon=1) is DELTA


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_value_rejected_with_index(bad):
    actions = np.zeros((3, 7))
    actions[2, 4] = bad
    with pytest.raises(GoalRejected, match=r"non-finite .*index \(2, 4\)"):
        check_chunk(actions, "ee_delta", SPACES, max_horizon=10)


def test_wrong_column_count_rejected():
    with pytest.raises(GoalRejected) as info:
        check_chunk(np.zeros((2, 6)), "ee_delta", SPACES, max_horizon=10)
    msg = str(info.value)
    assert "7 values per step" in msg and "the chunk has 6" in msg and "gripper" in msg


def test_unknown_control_space_lists_accepted_names():
    with pytest.raises(GoalRejected, match="unknown control space 'joint_velocity'") as info:
        check_chunk(np.zeros((1, 3)), "joint_velocity", SPACES, max_horizon=10)
    assert "ee_delta" in str(info.value) and "joint_position" in str(info.value)


def test_out_of_bounds_value_names_label_and_bounds():
    actions = np.zeros((4, 3))
    actions[3, 1] = 2.5  # j2 bounds are [-2, 2]
    with pytest.raises(GoalRejected) as info:
        check_chunk(actions, "joint_position", (JOINTS,), max_horizon=10)
    msg = str(info.value)
    assert "step 3" in msg and "'j2'" in msg and "2.5" in msg and "[-2, 2]" in msg
    assert "joint_position" in msg


def test_below_lower_bound_rejected():
    actions = np.zeros((1, 7))
    actions[0, 6] = -1.01
    with pytest.raises(GoalRejected, match=r"'gripper' = -1\.01 .*\[-1, 1\]"):
        check_chunk(actions, "ee_delta", SPACES, max_horizon=10)


def test_too_many_steps_rejected():
    check_chunk(np.zeros((5, 7)), "ee_delta", SPACES, max_horizon=5)
    with pytest.raises(GoalRejected, match="6 steps, more than this robot's limit of 5"):
        check_chunk(np.zeros((6, 7)), "ee_delta", SPACES, max_horizon=5)


@pytest.mark.parametrize("shape", [(0, 7), (7,), (0,)])
def test_empty_or_not_2d_chunk_rejected(shape):
    with pytest.raises(GoalRejected, match="at least one step"):
        check_chunk(np.zeros(shape), "ee_delta", SPACES, max_horizon=10)


def test_goal_rejected_is_a_value_error():
    assert issubclass(GoalRejected, ValueError)


# ---------------------------------------------------------------- open-loop workspace check


def test_relative_chunk_leaving_workspace_names_step_and_axis():
    # z: 0.32 -> 0.37, 0.42, 0.47, 0.52 (> 0.5 at step 3)
    actions = np.zeros((5, 7))
    actions[:, 2] = 1.0
    with pytest.raises(GoalRejected) as info:
        check_chunk(actions, "ee_delta", SPACES, max_horizon=10,
                    ee_position=[0.5, 0.0, 0.32], workspace=WS)
    msg = str(info.value)
    assert "step 3" in msg and "z=0.520" in msg and "maximum 0.500" in msg


def test_relative_chunk_leaving_below_minimum_on_x():
    actions = np.zeros((3, 7))
    actions[:, 0] = -1.0  # x: 0.28 -> 0.23, 0.18 (< 0.2 at step 1)
    with pytest.raises(GoalRejected, match=r"step 1: x=0\.180 m is below the workspace minimum"):
        check_chunk(actions, "ee_delta", SPACES, max_horizon=10,
                    ee_position=[0.28, 0.0, 0.3], workspace=WS)


def test_relative_chunk_that_leaves_and_returns_is_still_rejected():
    actions = np.zeros((4, 7))
    actions[:, 1] = [1.0, 1.0, -1.0, -1.0]  # y: 0.37 -> 0.42 (out) -> 0.37 -> 0.32
    with pytest.raises(GoalRejected, match=r"step 1: y=0\.420"):
        check_chunk(actions, "ee_delta", SPACES, max_horizon=10,
                    ee_position=[0.5, 0.32, 0.3], workspace=WS)


def test_a_hand_beyond_the_floor_may_come_back_but_not_go_farther():
    # An arm that overshot the floor: refusing every chunk from there would leave a policy
    # no way back.
    below = [0.5, 0.0, WS.lower[2] - 0.02]
    up = np.zeros((3, 7))
    up[:, 2] = 0.2  # z: 0.01 below the floor, then back inside
    assert check_chunk(up, "ee_delta", SPACES, max_horizon=10, ee_position=below,
                       workspace=WS) is DELTA
    sideways = np.zeros((3, 7))
    sideways[:, 0] = 1.0  # no deeper, and moving along the floor
    assert check_chunk(sideways, "ee_delta", SPACES, max_horizon=10, ee_position=below,
                       workspace=WS) is DELTA
    down = np.zeros((2, 7))
    down[:, 2] = [0.2, -0.6]  # back up 1 cm, then 2 cm deeper than it started
    with pytest.raises(GoalRejected, match=r"step 1: z=\S+ m is below the workspace minimum "
                                           r"\S+ m and farther out than the path's start"):
        check_chunk(down, "ee_delta", SPACES, max_horizon=10, ee_position=below,
                    workspace=WS)


def test_relative_chunk_inside_workspace_accepted():
    actions = np.zeros((5, 7))
    actions[:, 2] = 1.0
    actions[:, 3:6] = 1.0  # rotation columns do not move the position
    assert check_chunk(actions, "ee_delta", SPACES, max_horizon=10,
                       ee_position=[0.5, 0.0, 0.2], workspace=WS) is DELTA


def test_workspace_check_skipped_without_ee_position():
    actions = np.ones((20, 7))
    assert check_chunk(actions, "ee_delta", SPACES, max_horizon=20, workspace=WS) is DELTA


# ---------------------------------------------------------------- max_step_change


def test_absolute_jump_between_rows_rejected():
    actions = chunk([[0.0, 0.0, 0.0], [0.05, 0.0, 0.0], [0.3, 0.0, 0.0]])
    with pytest.raises(GoalRejected) as info:
        check_chunk(actions, "joint_position", SPACES, max_horizon=10)
    msg = str(info.value)
    assert "step 2" in msg and "'j1'" in msg and "0.25" in msg and "limit of 0.1" in msg


def test_absolute_jump_from_current_to_first_row_rejected():
    actions = chunk([[0.5, 0.0, 0.0], [0.55, 0.0, 0.0]])
    with pytest.raises(GoalRejected, match=r"step 0 changes 'j1' by 0\.5"):
        check_chunk(actions, "joint_position", SPACES, max_horizon=10, current=[0.0, 0.0, 0.0])
    # The same chunk anchored at a nearby state is fine.
    check_chunk(actions, "joint_position", SPACES, max_horizon=10, current=[0.45, 0.0, 0.0])


def test_absolute_jump_later_row_with_current_names_right_step():
    actions = chunk([[0.05, 0.0, 0.0], [0.1, 0.0, 0.0], [0.1, 0.5, 0.0]])
    with pytest.raises(GoalRejected, match=r"step 2 changes 'j2'"):
        check_chunk(actions, "joint_position", SPACES, max_horizon=10, current=[0.0, 0.0, 0.0])


def test_max_step_change_is_per_column():
    actions = chunk([[0.0, 0.0, 0.0], [0.0, 0.0, 0.15]])  # j3 may change 0.2 per step
    assert check_chunk(actions, "joint_position", SPACES, max_horizon=10) is JOINTS
    actions = chunk([[0.0, 0.0, 0.0], [0.0, 0.15, 0.0]])  # j2 only 0.1
    with pytest.raises(GoalRejected, match="'j2'"):
        check_chunk(actions, "joint_position", SPACES, max_horizon=10)


def test_smooth_absolute_chunk_accepted():
    actions = np.zeros((10, 3))
    # 0.09 per step, just under the 0.1 limit (exactly 0.1 computed in floating point
    # can come out as 0.1000000000000001 and is then refused: there is no tolerance).
    actions[:, 0] = np.linspace(0.0, 0.81, 10)
    assert check_chunk(actions, "joint_position", SPACES, max_horizon=10,
                       current=[-0.05, 0.0, 0.0]) is JOINTS


# ---------------------------------------------------------------- check_pose_target


def test_pose_target_inside_returns_unit_quaternion():
    quat = check_pose_target([0.5, 0.0, 0.3], [0, 0, 0, 2.0], workspace=WS, position_only=False)
    np.testing.assert_allclose(quat, [0, 0, 0, 1])


def test_pose_target_normalises_quaternion():
    q = np.array([1.0, 2.0, -2.0, 4.0])
    quat = check_pose_target([0.5, 0.0, 0.3], q, workspace=WS, position_only=False)
    np.testing.assert_allclose(quat, q / 5.0)
    assert math.isclose(np.linalg.norm(quat), 1.0)


def test_pose_target_outside_workspace_rejected():
    with pytest.raises(GoalRejected, match=r"outside the workspace: y=-0\.500 m is below"):
        check_pose_target([0.5, -0.5, 0.3], [0, 0, 0, 1], workspace=WS, position_only=False)
    with pytest.raises(GoalRejected, match="outside the workspace"):
        check_pose_target([0.5, 0.0, 0.9], [0, 0, 0, 1], workspace=WS, position_only=True)


def test_pose_target_nan_position_rejected():
    with pytest.raises(GoalRejected, match="target position contains a non-finite value"):
        check_pose_target([0.5, np.nan, 0.3], [0, 0, 0, 1], workspace=WS, position_only=False)
    with pytest.raises(GoalRejected, match="non-finite"):
        check_pose_target([np.inf, 0.0, 0.3], [0, 0, 0, 1], workspace=WS, position_only=True)


def test_pose_target_nan_orientation_rejected():
    with pytest.raises(GoalRejected, match="target orientation contains a non-finite value"):
        check_pose_target([0.5, 0.0, 0.3], [0, np.nan, 0, 1], workspace=WS, position_only=False)


def test_pose_target_zero_quaternion_rejected():
    with pytest.raises(GoalRejected, match="unit quaternion"):
        check_pose_target([0.5, 0.0, 0.3], [0, 0, 0, 0], workspace=WS, position_only=False)


def test_position_only_ignores_orientation():
    for orientation in ([0, 0, 0, 0], [np.nan] * 4, [1.0, 2.0, 3.0, 4.0]):
        quat = check_pose_target([0.5, 0.0, 0.3], orientation, workspace=WS, position_only=True)
        np.testing.assert_array_equal(quat, [0, 0, 0, 1])


# ---------------------------------------------------------------- Workspace


@pytest.mark.parametrize(
    "lower, upper, match",
    [
        ([0, 0, 0], [1, 1, 0], "below max"),  # min == max on z
        ([0, 2, 0], [1, 1, 1], "below max"),  # min > max on y
        ([0, 0, np.nan], [1, 1, 1], "finite"),
        ([0, 0, 0], [1, np.inf, 1], "finite"),
        ([0, 0], [1, 1], "3 values"),
        ([0, 0, 0], [1, 1, 1, 1], "3 values"),
    ],
)
def test_workspace_rejects_bad_bounds(lower, upper, match):
    with pytest.raises(ValueError, match=match):
        Workspace(lower, upper)


def test_workspace_contains_and_violation():
    assert WS.contains([0.2, -0.4, 0.1]) and WS.contains([0.8, 0.4, 0.5])  # inclusive
    assert WS.violation([0.5, 0.0, 0.3]) is None
    assert not WS.contains([0.81, 0.0, 0.3])
    assert WS.violation([0.81, 0.0, 0.3]) == (
        "x=0.810 m is above the workspace maximum 0.800 m"
    )
    assert WS.violation([0.5, 0.0, 0.05]).startswith("z=0.050 m is below")


# ---------------------------------------------------------------- check_positive


def test_check_positive():
    check_positive(0.0, "timeout")
    check_positive(2.5, "timeout")
    for bad in (-0.1, np.nan, np.inf):
        with pytest.raises(GoalRejected, match="timeout must be a finite number >= 0"):
            check_positive(bad, "timeout")


# ---------------------------------------------------------------- ActionChunk packing


def test_array_chunk_round_trip_row_major():
    from rpent_interfaces.msg import ActionChunk

    actions = np.arange(21, dtype=np.float64).reshape(3, 7) / 7.0
    msg = array_to_chunk(actions, "ee_delta")
    assert isinstance(msg, ActionChunk)
    assert (msg.control_space, msg.horizon, msg.action_dim) == ("ee_delta", 3, 7)
    assert list(msg.data[:8]) == list(actions[0]) + [actions[1, 0]]
    out = chunk_to_array(msg)
    assert out.dtype == np.float64 and out.shape == (3, 7)
    np.testing.assert_array_equal(out, actions)


def test_array_to_chunk_fills_a_given_message_and_rejects_1d():
    from rpent_interfaces.msg import ActionChunk

    msg = ActionChunk()
    assert array_to_chunk([[1, 2]], "x", msg=msg) is msg
    assert list(msg.data) == [1.0, 2.0]
    with pytest.raises(ValueError, match="2-D"):
        array_to_chunk(np.zeros(7), "ee_delta")


def test_chunk_to_array_rejects_size_mismatch():
    from rpent_interfaces.msg import ActionChunk

    msg = ActionChunk(control_space="ee_delta", horizon=2, action_dim=7, data=[0.0] * 13)
    with pytest.raises(ValueError, match=r"2x7 = 14 values but carries 13"):
        chunk_to_array(msg)


# ---------------------------------------------------------------- ControlSpaceSpec


@pytest.mark.parametrize("space", SPACES)
def test_control_space_msg_round_trip(space):
    from rpent_interfaces.msg import ControlSpace

    msg = space.to_msg()
    assert isinstance(msg, ControlSpace)
    assert msg.dim == space.dim
    assert list(msg.labels) == list(space.labels)
    back = ControlSpaceSpec.from_msg(msg)
    assert back == space
    assert back.step_scale == space.step_scale
    assert back.max_step_change == space.max_step_change


def test_control_space_round_trip_with_int_bounds_and_text():
    space = ControlSpaceSpec("g", ("w",), ("m",), (0,), (1,), False,
                             description="gripper width", frame_id="tool0")
    back = ControlSpaceSpec.from_msg(space.to_msg())
    assert back == space and back.description == "gripper width" and back.frame_id == "tool0"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(units=("m",)), "units must have 2 entries"),
        (dict(lower=(0.0,)), "lower must have 2 entries"),
        (dict(upper=(1.0, 1.0, 1.0)), "upper must have 2 entries"),
        (dict(lower=(0.0, 2.0)), "lower bound exceeds its upper bound"),
        (dict(max_step_change=(0.1,)), "max_step_change must have 2 entries"),
        (dict(step_scale=(0.1, 0.1, 0.1)), "step_scale needs 6 entries"),
    ],
)
def test_control_space_post_init_errors(kwargs, match):
    base = dict(name="s", labels=("a", "b"), units=("m", "m"), lower=(0.0, 0.0),
                upper=(1.0, 1.0), relative=False)
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ControlSpaceSpec(**base)


def test_control_space_equal_bounds_allowed():
    assert ControlSpaceSpec("s", ("a",), ("1",), (0.5,), (0.5,), False).dim == 1


def test_find_space():
    assert find_space(SPACES, "joint_position") is JOINTS
    with pytest.raises(KeyError):
        find_space(SPACES, "nope")


# ---------------------------------------------------------------- geometry helpers


def test_normalize_quaternion_and_errors():
    np.testing.assert_allclose(normalize_quaternion([0, 0, 3, 4]), [0, 0, 0.6, 0.8])
    with pytest.raises(ValueError, match="no orientation"):
        normalize_quaternion([0, 0, 0, 1e-12])
    with pytest.raises(ValueError, match="no orientation"):
        normalize_quaternion([np.nan, 0, 0, 1])


def test_pose_msg_round_trip():
    p, q = pose_from_msg(pose_to_msg([0.1, -0.2, 0.3], [0.0, 1.0, 0.0, 0.0]))
    np.testing.assert_array_equal(p, [0.1, -0.2, 0.3])
    np.testing.assert_array_equal(q, [0.0, 1.0, 0.0, 0.0])


# ---------------------------------------------------------------- params checks


class _FakeNode:
    """Just enough of rclpy.Node for params.declare."""

    def __init__(self, overrides=None):
        self.overrides = overrides or {}
        self.values = {}

    def declare_parameter(self, name, default, descriptor):
        from rclpy.exceptions import InvalidParameterTypeException
        from rclpy.parameter import Parameter

        assert descriptor.read_only
        value = self.overrides.get(name, default)
        if type(value) is not type(default):
            raise InvalidParameterTypeException(
                Parameter(name, value=default), Parameter.Type.from_parameter_value(value))
        self.values[name] = value

    def get_parameter(self, name):
        class _P:
            value = self.values[name]
        return _P


def test_params_value_checks():
    from rpent_contract.settings import at_least, in_range, non_negative, one_of, positive, vector

    assert positive(1) is None and positive(0.5) is None
    assert positive(0) and positive(-1.0) and positive(math.inf) and positive("1")
    assert non_negative(0) is None and non_negative(-0.1)
    assert one_of("a", "b")("a") is None and "a, b" in one_of("a", "b")("c")
    assert at_least(-1)(-1) is None and at_least(16)(15) == "must be >= 16"
    assert in_range(16, 2048)(16) is None and in_range(16, 2048)(2049) == "must be in [16, 2048]"
    assert in_range(0, 1, lo_open=True)(1) is None
    assert in_range(0, 1, lo_open=True)(0) == "must be in (0, 1]"
    assert in_range(1, 179, lo_open=True, hi_open=True)(179) == "must be in (1, 179)"
    assert vector(3)([1.0, 2.0, 3.0]) is None
    assert vector(3)([1.0, 2.0]) and vector(3)([1.0, math.nan, 3.0])


def test_params_declare_validates_and_names_parameter():
    from rpent_contract.params import ParameterError, declare
    from rpent_contract.settings import positive, vector

    assert declare(_FakeNode(), "rate", 10.0, "Hz", positive) == 10.0
    assert declare(_FakeNode({"lo": [1.0, 2.0, 3.0]}), "lo", [0.0] * 3, "m", vector(3)) \
        == [1.0, 2.0, 3.0]
    with pytest.raises(ParameterError, match=r"parameter 'rate' = -1\.0: must be a finite"):
        declare(_FakeNode({"rate": -1.0}), "rate", 10.0, "Hz", positive)
    with pytest.raises(ParameterError, match="parameter 'rate' has the wrong type"):
        declare(_FakeNode({"rate": 10}), "rate", 10.0, "Hz", positive)
