"""QoS profiles of the robot contract, in one place so publishers and clients agree."""
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

# Streams (state, images): reliable so `ros2 topic echo`, bags and Foxglove all match;
# a short history so a slow subscriber gets the newest data, not a backlog.
STATE_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE,
)
IMAGE_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=2,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE,
)
# What a robot publishes its cameras with: a reliable writer replaces a frame a busy
# subscriber has not acknowledged once `depth` newer ones exist, so a recorder more than two
# frames behind lost one (and a dataset its step). Ten frames cost about 0.5 MB per camera at
# LIBERO's size; subscribers keep IMAGE_QOS's two and still get the newest.
IMAGE_PUB_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE,
)
# What consumers of camera streams subscribe with: best effort matches both the reliable
# topics robot nodes publish and camera drivers that publish best effort (the sensor-data
# QoS of usb_cam, realsense2_camera ...), which a reliable subscription never receives.
CAMERA_SUB_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=2,
    reliability=ReliabilityPolicy.BEST_EFFORT, durability=DurabilityPolicy.VOLATILE,
)
# Executed steps: every one matters to a recording (a dataset pairs each with its
# observation), so a deep history keeps a slow subscriber from losing any.
EXECUTED_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=1000,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE,
)
# Action feedback: one topic carries every goal's feedback, so twenty concurrent predict
# streams put sixty chunks on it at once; rclpy's default (keep last 10, on both ends) lost
# a stream's middle chunk to a busy client. Each message is a chunk or a step, and a lost one
# is a chunk never executed or a step missing from a recording.
FEEDBACK_QOS = EXECUTED_QOS


def camera_sub_qos(node, topic: str) -> QoSProfile:
    """What to subscribe a camera topic with: reliable where every publisher seen on it is
    reliable (a robot node's own cameras: nothing is lost to a busy machine, as best-effort
    fragments of large images are), else best effort, which every driver matches."""
    publishers = node.get_publishers_info_by_topic(node.resolve_topic_name(topic))
    if publishers and all(p.qos_profile.reliability == ReliabilityPolicy.RELIABLE
                          for p in publishers):
        return IMAGE_QOS
    return CAMERA_SUB_QOS


# camera/trigger: a request for the next measurement's frames; reliable, so none is lost
# to a busy machine, and one pending request is as good as many.
TRIGGER_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=1,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE,
)
# Latched: a late subscriber (the agent, a recorder) still learns the current task.
LATCHED_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=1,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
# task_status as the robot publishes it: latched, and with a history, because it changes
# every step. A reliable writer that keeps one sample replaces it before a busy subscriber
# has it, so a recorder behind by a reset lost the success that ended an episode. A
# subscriber with LATCHED_QOS still gets only the newest on joining.
TASK_STATUS_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=100,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
# /tf as tf2's broadcasters publish it, so tf2 listeners and viewers match.
TF_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=100,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE,
)
# /tf_static as tf2's static listeners subscribe: latched, so a late subscriber still gets
# the fixed frames published once at start-up.
TF_STATIC_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=100,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
# Service and action requests: DDS keeps only the newest `depth` requests a server has not
# taken yet and drops older ones without an answer, so a burst (fifty stop calls, a stream
# of goals, a cancel among many) must fit. Responses use it too.
REQUEST_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=1000,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE,
)
