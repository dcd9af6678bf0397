"""Bring-up: a Franka FR3 through franky, action model, agent.

Launch arguments (name, default, what):
  robot_ip                 172.16.0.2       address of the robot's control unit
  realtime_mode            ''               enforce (a real FR3: PREEMPT_RT kernel) | ignore (franky-sim, development); empty: the node's own (enforce; ignore on a twin)
  relative_dynamics_factor ''               scale of franky's velocity, acceleration and jerk, (0, 1]; empty: the node's own
  require_approval         ''               true: every motion waits for safety/approve; empty: the node's own (false)
  driver_only              false            true: only the robot (and dashboard / recorder), no agent or model; runs until stopped
  max_episode_steps        1000             control steps before the episode ends
  twin                     false            true: rehearse on the arm's physics twin (objects, cameras, a SAM3 server and an operator) instead of the hardware
  twin_scene               ''               the twin's scene YAML; empty: the shipped franka tabletop
  twin_task                ''               task of the twin's scene; empty: its first
  twin_seed                0                draws where the twin's objects start
  twin_port                8767             TCP port of the twin port on loopback; its SAM3 server takes the next one
  twin_camera_rate         2.0              frames per second of the twin's cameras
  operator                 ''               who answers the robot's operator requests: human (rpent operator, the Foxglove layout) | auto (the twin, from its physics); empty: auto on the twin, else human
  twin_host                127.0.0.2        loopback address the Franka twin serves on (twin:=true; robot_ip is then not used)
  planner                  ''               scripted | api | mcp | claude_code | codex; empty: api if model set, else scripted
  model                    ''               provider:model for api, e.g. anthropic:claude-sonnet-5
  base_url                 ''               the provider's endpoint for api: a proxy, or an OpenAI-compatible server (Ollama, vLLM)
  instruction              ''               what to do; empty: the task's own instruction
  serve                    false            true: a session: everything stays up and runs come and go through agent/start_run and agent/cancel_run (the dashboard's buttons, rpent task start|cancel), each in a folder of its own; Ctrl-C ends it
  max_turns                30               model turns before the run ends as max_turns
  output_dir               runs             where run folders are created
  run_dir                  ''               use this run folder instead of a new one under output_dir
  memory_dir               auto             the agent's memory: auto (lasting, per robot and task suite, under ~/.local/share/rpent/memory) | a folder | empty: the run folder's own
  skills_file              ''               YAML of model skills: tools that run the action model on an instruction template
  mcp_port                 8766             TCP port of the MCP server (planner:=mcp, claude_code, codex)
  policy_mode              tools            tools | code: the model writes Python that calls the tools as robo.<tool>(...) (run_code)
  plan_file                ''               scripted planner: YAML/JSON list of tool calls to run instead of its pick-and-place heuristic
  policy_chunks            80               scripted planner: chunks the action model may execute before its heuristic takes over
  action_model             ''               model node to use (/gpu/action_model); empty: start one
  am_backend               none             scripted | lerobot | openpi | rpent_http | rpent_vla | rpent_wam | none
  am_checkpoint            ''               LeRobot checkpoint folder (am_backend:=lerobot)
  am_endpoint              ''               policy server: host:port (openpi), http:// or socket://HOST:PORT (rpent_*)
  am_model_io              ''               what the model is fed (lerobot, openpi, rpent_*): pi05_libero, lerobot_libero, rpent_pi05_libero, wam_libero or a YAML file; empty: the backend's default
  am_python                ''               Python interpreter that runs the model node (a venv's bin/python with the model's own packages); empty: this one
  am_device                ''               torch device of the model (am_backend:=lerobot), e.g. cuda:1; empty: cuda if available, else cpu
  perception               auto             segment/locate tools for the agent: auto (sam3_http on the twin, served by it; else none) | sam3_http | none
  sam3_endpoint            ''               SAM3 server, http:// or socket://HOST:PORT (perception:=sam3_http)
  dashboard                false            start the Foxglove bridge (ws://127.0.0.1:dashboard_port)
  dashboard_port           8765             TCP port of the Foxglove bridge (dashboard:=true)
  dashboard_legacy_port    8764             TCP port of the bridge's foxglove.websocket.v1 protocol, for Foxglove Studio 1.x; -1: none
  dashboard_language       en               en | zh-cn: the layout the run summary names (config/foxglove_layout[.zh-cn].json) and the language of the agent's reasoning and summaries
  record                   false            record a rosbag2 (MCAP) into the run folder
  record_depth             false            true: the bag also holds the cameras' aligned depth (camera/<name>/depth/*), about as many bytes again as the images
  record_image_rate        0                images per second the bag keeps of each camera, at the same instants on all (the recorder node; ros2 bag record cannot thin); 0: every image
  namespace                ''               namespace of this robot's topics, actions and services
  robots_file              ''               YAML, one block per robot (/robot1/libero_sim: ...)

Examples:
  ros2 launch rpent franka.launch.py twin:=true twin_task:=cube_in_bowl dashboard:=true
      (rehearse on the twin: the FR3 in franky-sim on a table with objects and cameras)
  ros2 launch rpent franka.launch.py robot_ip:=172.16.0.2 instruction:='put the cube in the bowl'
  ros2 launch rpent franka.launch.py action_model:=/gpu/action_model dashboard:=true record:=true
  ros2 launch rpent franka.launch.py robot_ip:=127.0.0.1 realtime_mode:=ignore driver_only:=true dashboard:=true
      (franky-sim: python -m rpent_twins.franky_sim --hostname 127.0.0.1)

Nodes and parameters come from rpent.bringup, shared with `python -m rpent.start`.
"""
from rpent.launch_files import launch_description


def generate_launch_description():
    return launch_description("franka")
