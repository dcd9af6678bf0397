"""Prompt bundles: what a robot or task package adds to the agent's system prompt.

A package contributes one through the ``rpent.prompts`` entry point group
(:mod:`rpent_contract.contributions`); every planner that talks to a model (the API
planner, Claude Code, Codex) puts the bundles for the run's robot after its own prompt.
"""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.contributions import PROMPTS, contributions


@dataclass(frozen=True)
class PromptBundle:
    sections: tuple  # paragraphs added to the system prompt
    embodiments: tuple = ()  # the robots it is for (RobotInfo.embodiment); empty: every robot
    examples: tuple = ()  # worked examples: which tools, in which order, and why

    def applies_to(self, embodiment: str) -> bool:
        return not self.embodiments or embodiment in self.embodiments


def contributed_prompt(embodiment: str) -> str:
    """The installed bundles' text for this robot, each paragraph after a blank line."""
    parts = []
    for each in contributions(PROMPTS, PromptBundle):
        bundle = each.value
        if bundle.applies_to(embodiment):
            parts += [str(s) for s in bundle.sections]
            parts += [f"Example:\n{e}" for e in bundle.examples]
    return "".join(f"\n\n{p}" for p in parts)
