"""Model skills from a YAML file: what a valid file gives the agent, and every mistake
refused with the skill's name and what to fix."""
import re

import pytest

from rpent_agent.skills import Skill, SkillError, load_skills


def write(tmp_path, text):
    path = tmp_path / "skills.yaml"
    path.write_text(text)
    return path


def test_a_skill_file_gives_named_tools_with_the_template_fields_as_arguments(tmp_path):
    skills = load_skills(write(tmp_path, """
pick_and_place:
  description: Pick an object up and put it in or on another.
  instruction: pick up the {object} and place it in the {target}
  max_chunks: 40
  model: /wam
open_drawer:
  description: Open the drawer.
  instruction: open the top drawer
"""))
    assert [s.name for s in skills] == ["pick_and_place", "open_drawer"]
    pick, drawer = skills
    assert (pick.arguments, pick.max_chunks, pick.model) == (("object", "target"), 40, "/wam")
    assert (drawer.arguments, drawer.max_chunks, drawer.model) == ((), 20, "")
    assert pick.instruction_for({"object": " soup ", "target": "basket"}) == \
        "pick up the soup and place it in the basket"


@pytest.mark.parametrize("values, why", [
    ({"object": "soup"}, "needs target"),
    ({"object": "soup", "target": " "}, "needs target"),
    ({"object": "soup", "target": "basket", "colour": "red"}, "not colour"),
])
def test_a_skill_call_without_its_arguments_is_refused(values, why):
    skill = Skill("pick", "d", "pick up the {object} and place it in the {target}")
    with pytest.raises(ValueError, match=why):
        skill.instruction_for(values)


@pytest.mark.parametrize("text, why", [
    ("pick:\n  description: d\n  instruction: i\n  max_chunk: 3\n",
     "skill 'pick': unknown field 'max_chunk' (did you mean 'max_chunks'?)"),
    ("pick up:\n  description: d\n  instruction: i\n", "skill 'pick up': a tool name"),
    ("pick:\n  description: d\n", "skill 'pick' needs a non-empty instruction"),
    ("pick:\n  description: d\n  instruction: i\n  max_chunks: 0\n", "max_chunks must be"),
    ("pick:\n  description: d\n  instruction: i\n  max_chunks: true\n", "max_chunks must be"),
    ("pick:\n  description: d\n  instruction: go to {0}\n", "plain names like"),
    ("pick:\n  description: d\n  instruction: go to {place\n", "not a valid template"),
    ("- pick\n", "must map each skill's name"),
    ("pick: [1]\n", "skill 'pick' must be a mapping"),
])
def test_a_skills_file_with_a_mistake_is_refused_with_what_to_fix(tmp_path, text, why):
    with pytest.raises(SkillError, match=re.escape(why)):
        load_skills(write(tmp_path, text))


def test_a_missing_skills_file_says_which(tmp_path):
    with pytest.raises(SkillError, match="cannot read skills_file .*nowhere.yaml"):
        load_skills(tmp_path / "nowhere.yaml")
