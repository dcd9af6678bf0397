"""Prompt bundles: what a robot or task package adds to the agent's system prompt; and the
language the agent writes in for the operator.

A package contributes one through the ``rpent.prompts`` entry point group
(:mod:`rpent_contract.contributions`); every planner that talks to a model (the API
planner, Claude Code, Codex) puts the bundles for the run's robot after its own prompt.
"""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.contributions import PROMPTS, contributions

# The agent's own system prompt, before what installed packages and the run's language add.
SYSTEM_PROMPT = """You control a robot arm through tools. Each tool result shows what \
happened and the current camera images. Work step by step: look, act, check the result. \
Positions are metres in the robot base frame. If the task status never reports success \
(a real arm has no success check), ask request_operator_verdict before you finish; if \
something is knocked over, request_scene_reset. When the task is done, call finish with \
status 'success'; if it cannot be done call finish with 'failure', and if you cannot make \
progress call finish with 'stuck'. Always end with finish."""


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


# What the operator reads, in each language the dashboard offers (``language`` of the agent
# node, ``dashboard_language`` of a bring-up). Tool names and arguments stay as the tools
# define them: the robot and its tools speak English whatever the operator reads.
LANGUAGES = {
    "en": "",
    "zh-cn": "\n\nWrite everything the operator reads in Simplified Chinese (简体中文): your "
             "reasoning and progress notes, questions to the operator, and the summary you "
             "give finish. Tool names, their arguments and object names stay as the tools "
             "give them.",
}


def language_prompt(language: str) -> str:
    """The system prompt's line that sets the language the agent writes in."""
    try:
        return LANGUAGES[language]
    except KeyError:
        raise ValueError(f"unknown language '{language}'; choose one of "
                         f"{', '.join(LANGUAGES)}") from None
