"""Success rates with 95 % Wilson score intervals, per task, per suite and overall.

Wilson rather than the normal approximation: evaluations have few episodes per task and
rates near 0 or 1, where the normal interval collapses to zero width or leaves [0, 1]
(Brown, Cai & DasGupta, "Interval Estimation for a Binomial Proportion", 2001).
"""
from __future__ import annotations

import math
from statistics import fmean

Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` out of ``n``; (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # Exact at the ends: rounding must not put 0/n's lower bound above 0 (or n/n's upper
    # bound below 1), i.e. outside the interval's own estimate.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def _mean(records, key) -> float:
    values = [r[key] for r in records if r.get(key) is not None]
    return fmean(values) if values else 0.0


def summarise(records: list[dict]) -> dict:
    """One table row: episodes with a verdict, successes, rate, interval and means.

    Episodes that ended in an error (the harness could not run them) are counted apart and
    left out of the rate: they say nothing about the policy.
    """
    judged = [r for r in records if r["outcome"] in ("success", "failure")]
    k = sum(r["outcome"] == "success" for r in judged)
    low, high = wilson(k, len(judged))
    return {
        "episodes": len(judged), "successes": k,
        "errors": sum(r["outcome"] == "error" for r in records),
        "success_rate": k / len(judged) if judged else None,
        "ci95": [low, high],
        "mean_turns": _mean(judged, "turns"),
        "mean_tool_calls": _mean(judged, "tool_calls"),
        "mean_input_tokens": _mean(judged, "input_tokens"),
        "mean_output_tokens": _mean(judged, "output_tokens"),
        "mean_wall_time_s": _mean(judged, "wall_time_s"),
        "mean_steps": _mean(judged, "steps"),
    }


def tables(records: list[dict]) -> dict:
    """Rows per task, per suite, and overall, from the final record of each episode."""
    by_task: dict = {}
    by_suite: dict = {}
    for r in records:
        by_task.setdefault((r["suite"], r["task_id"]), []).append(r)
        by_suite.setdefault(r["suite"], []).append(r)
    tasks = []
    for (suite, task_id), rows in sorted(by_task.items()):
        tasks.append({"suite": suite, "task_id": task_id, "task": rows[0].get("task_name", ""),
                      **summarise(rows)})
    suites = [{"suite": s, "tasks": len({r["task_id"] for r in rows}), **summarise(rows)}
              for s, rows in sorted(by_suite.items())]
    return {"tasks": tasks, "suites": suites, "overall": summarise(records)}


def intervals_overlap(a: list, b: list) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]
