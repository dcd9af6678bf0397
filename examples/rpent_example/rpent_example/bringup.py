"""A task package's bring-up: LIBERO's alphabet-soup task, the rest as ``libero_sim``.

    rpent start libero_soup planner:=api model:=anthropic:claude-sonnet-4-5
"""
from rpent.bringup import BUILT_IN, Bringup

_LIBERO = BUILT_IN["libero_sim"]
_PINNED = {"suite": "libero_object", "task_id": "0"}

BRINGUP = Bringup(
    "libero_soup", "LIBERO's alphabet soup into the basket (the rpent_example package)",
    tuple(a for a in _LIBERO.arguments if a.name not in _PINNED),
    lambda args: _LIBERO.nodes({**args, **_PINNED}))
