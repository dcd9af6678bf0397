"""The shipped Lichtblick/Foxglove layout in each language the dashboard offers. No ROS.

``config/foxglove_layout.json`` is written in English. Each other language's layout,
``config/foxglove_layout.<language>.json``, is that layout with every text a viewer shows
(tab titles, plot and timeline titles and labels, button texts and tooltips) translated
from :data:`TRANSLATIONS`: topics, services and request payloads stay as they are. After a
change to the English layout, write the others again with

    python -m rpent_foxglove.layout config

which refuses while a shown text has no translation (the tests hold the shipped files to
the same).
"""
from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

# Keys whose string values a viewer shows (a panel's own title: Lichtblick's key, Foxglove's).
SHOWN_KEYS = ("title", "label", "buttonText", "buttonTooltip", "lichtblickPanelTitle",
              "foxglovePanelTitle")

TRANSLATIONS = {
    "zh-cn": {
        "Cameras": "相机",
        "Policy's input": "策略输入",
        "Policy's prediction": "策略预测",
        "Agent": "智能体",
        "Run": "运行",
        "Task": "任务",
        "Tasks to choose from": "可选任务",
        "Nodes": "节点",
        "Timeline": "时间线",
        "Waiting for the operator": "等待操作员",
        "Grid": "网格",
        "Joint positions (rad)": "关节位置 (rad)",
        "gripper width (m)": "夹爪宽度 (m)",
        "Action timeline": "动作时间线",
        "agent's tool calls": "智能体的工具调用",
        "robot goal": "机器人目标",
        "robot mode": "机器人模式",
        "task success": "任务成功",
        "Predicted chunks": "预测动作块",
        "chunk #": "动作块序号",
        "inference (ms)": "推理耗时 (ms)",
        "step 0, column 0": "第 0 步，第 0 列",
        "value (a world-action model's)": "价值估计（世界动作模型）",
        "Start a run": "开始运行",
        "A run of a serving agent (serve:=true); empty instruction: the robot's task":
            "由常驻智能体执行一次运行（serve:=true）；指令为空时执行机器人当前的任务",
        "Cancel the run": "取消运行",
        "Reset the episode": "重置回合",
        "The robot's reset: a new episode of its task (a simulator puts the scene back); "
        "refused with the reason while it cannot":
            "机器人的重置：开始其任务的新回合（仿真器会复原场景）；无法重置时会说明原因并拒绝",
        "End the run in progress; the robot stops, the run's files are written":
            "结束正在进行的运行；机器人停止，运行的文件照常写出",
        "Yes: achieved / put back": "是：已完成 / 已复原",
        "Answer the request waiting for the operator (request_id empty: the only one waiting)":
            "回答等待操作员的请求（request_id 为空：唯一在等待的请求）",
        "No: not achieved / not put back": "否：未完成 / 未复原",
        "Answer the request waiting for the operator; a comment reaches the agent":
            "回答等待操作员的请求；备注会转达给智能体",
    },
}
LANGUAGES = ("en", *TRANSLATIONS)
ENGLISH = "foxglove_layout.json"


def layout_file(language: str) -> str:
    """The file name of the layout in ``language``."""
    if language not in LANGUAGES:
        raise ValueError(f"no layout in '{language}'; choose one of {', '.join(LANGUAGES)}")
    return ENGLISH if language == "en" else f"foxglove_layout.{language}.json"


def shown_texts(layout) -> set:
    """Every text of ``layout`` a viewer shows."""
    found = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in SHOWN_KEYS and isinstance(value, str):
                    found.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(layout)
    return found


def translate(layout: dict, language: str) -> dict:
    """``layout`` (English) with what a viewer shows in ``language``."""
    layout_file(language)
    if language == "en":
        return copy.deepcopy(layout)
    table = TRANSLATIONS[language]
    missing = sorted(shown_texts(layout) - set(table))
    if missing:
        raise ValueError(f"the layout shows text with no {language} translation: {missing}; "
                         "add it to rpent_foxglove.layout.TRANSLATIONS")

    def walk(node):
        if isinstance(node, dict):
            return {key: (table[value] if key in SHOWN_KEYS and isinstance(value, str)
                          else walk(value)) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(value) for value in node]
        return node
    return walk(layout)


def write_translations(config: Path) -> list:
    """Write each language's layout next to the English one in ``config``."""
    english = json.loads((config / ENGLISH).read_text())
    written = []
    for language in TRANSLATIONS:
        path = config / layout_file(language)
        path.write_text(json.dumps(translate(english, language), ensure_ascii=False,
                                   indent=1) + "\n")
        written.append(path)
    return written


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Write the layout's translations from "
                                                 f"{ENGLISH} in CONFIG.")
    parser.add_argument("config", type=Path, help="the folder holding the English layout")
    for path in write_translations(parser.parse_args(argv).config):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
