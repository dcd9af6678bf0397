"""The ``rpent`` command.

    rpent eval ...      success rates over LIBERO suites (rpent eval --help)
    rpent export-dataset BAGS... --out DIR   recorded runs to a LeRobot dataset
    rpent latency BAG   the control loop's latency per action chunk of a recorded run
    rpent memory list|show|prune|export   the recipes runs left in their memory folders
    rpent operator ...  answer the agent's requests to the operator (rpent operator --help)
    rpent task start|cancel   start or cancel a run of a serving agent (serve:=true)
    rpent check-bag BAGS... every message there and decodable, none dropped, no step missing
    rpent recover-bag BAG   a bag whose recorder was killed, as a closed bag
    rpent start ...     a bring-up without ros2 launch (rpent start --list)
"""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "eval": ("rpent.eval.cli", "success rates of a planner and action model over LIBERO "
                               "suites, in parallel, resumable"),
    "export-dataset": ("rpent.export_dataset", "recorded runs (bags) to a LeRobot dataset for "
                                               "training"),
    "latency": ("rpent_bag.latency", "the control loop's latency per action chunk of a "
                                     "recorded run (observation -> chunk -> first step)"),
    "check-bag": ("rpent_bag.check", "check recorded bags: every message there and decodable, "
                                     "none dropped, no executed step missing"),
    "recover-bag": ("rpent_bag.recover", "a bag whose recorder was killed as a closed bag, up "
                                         "to its last complete chunk"),
    "memory": ("rpent_agent.recipes", "the recipes runs left in their memory folders: list, "
                                      "show, prune, export"),
    "operator": ("rpent.operator", "answer the agent's requests to the person at the robot "
                                   "(verdicts, scene resets)"),
    "task": ("rpent.task", "start or cancel a run of a serving agent (a bring-up with "
                           "serve:=true)"),
    "start": ("rpent.start", "start a bring-up without ros2 launch"),
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        print("usage: rpent COMMAND [...]\n\n" + "\n".join(
            f"  {name:<15} {help}" for name, (_, help) in COMMANDS.items()),
            file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
