"""Model skills: tools that run an action model on an instruction made from a template, declared
in a YAML file (the agent's ``skills_file``) rather than written as code::

    pick_and_place:
      description: Pick an object up and put it in or on another.
      instruction: pick up the {object} and place it in the {target}
      max_chunks: 40          # the skill's chunk budget (1..200), default 20
      model: /action_model    # its action-model node; default the agent's action_model

Each ``{name}`` of the instruction becomes a required text argument of the tool; the model
sees the tool's description, the template and the budget.
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

from rpent_contract.spelling import did_you_mean

MAX_CHUNKS = 200
_FIELDS = ("description", "instruction", "max_chunks", "model")


class SkillError(ValueError):
    """A skills file the agent cannot use; the message says which skill and what to fix."""


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    instruction: str  # a str.format template of named fields
    max_chunks: int = 20
    model: str = ""  # action-model node; '' = the agent's action_model

    @property
    def arguments(self) -> tuple[str, ...]:
        """The template's fields, in order of first use."""
        names = [field for _, field, _, _ in string.Formatter().parse(self.instruction)
                 if field is not None]
        return tuple(dict.fromkeys(names))

    def instruction_for(self, values: dict) -> str:
        missing = [a for a in self.arguments if not str(values.get(a, "")).strip()]
        if missing:
            raise ValueError(f"{self.name} needs {', '.join(missing)} (text)")
        extra = sorted(set(values) - set(self.arguments))
        if extra:
            raise ValueError(f"{self.name} takes {', '.join(self.arguments) or 'no arguments'}, "
                             f"not {', '.join(extra)}")
        return self.instruction.format(**{a: str(values[a]).strip() for a in self.arguments})


def load_skills(path) -> list[Skill]:
    """The skills of a YAML file."""
    import yaml

    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise SkillError(f"cannot read skills_file {path}: {err}") from None
    if not isinstance(document, dict) or not document:
        raise SkillError(f"skills_file {path} must map each skill's name to its fields "
                         f"({', '.join(_FIELDS)})")
    return [_skill(str(name), fields) for name, fields in document.items()]


def _skill(name: str, fields) -> Skill:
    where = f"skill '{name}'"
    if not name.isidentifier():
        raise SkillError(f"{where}: a tool name is letters, digits and underscores, not "
                         "starting with a digit")
    if not isinstance(fields, dict):
        raise SkillError(f"{where} must be a mapping of {', '.join(_FIELDS)}")
    for key in fields:
        if key not in _FIELDS:
            raise SkillError(f"{where}: unknown field '{key}'"
                             + (did_you_mean(str(key), _FIELDS, quote=True)
                                or f" (fields: {', '.join(_FIELDS)})"))
    for key in ("description", "instruction"):
        if not isinstance(fields.get(key), str) or not fields[key].strip():
            raise SkillError(f"{where} needs a non-empty {key}")
    chunks = fields.get("max_chunks", 20)
    if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= MAX_CHUNKS:
        raise SkillError(f"{where}: max_chunks must be a whole number in 1..{MAX_CHUNKS}, not "
                         f"{chunks!r}")
    skill = Skill(name, fields["description"].strip(), fields["instruction"].strip(), chunks,
                  str(fields.get("model") or ""))
    try:
        bad = [a for a in skill.arguments if not a.isidentifier()]
    except ValueError as err:
        raise SkillError(f"{where}: instruction is not a valid template ({err})") from None
    if bad:
        raise SkillError(f"{where}: instruction fields must be plain names like {{object}}, "
                         f"not {', '.join('{' + b + '}' for b in bad)}")
    return skill
