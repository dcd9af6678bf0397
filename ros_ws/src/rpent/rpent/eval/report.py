"""Reports of an evaluation (Markdown, JSON, a PNG of success per task) and the comparison
of two evaluations."""
from __future__ import annotations

import json
from pathlib import Path

from .stats import intervals_overlap, tables


def _pct(rate) -> str:
    return "—" if rate is None else f"{100 * rate:.1f}%"


def _ci(ci) -> str:
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _row(label: str, s: dict) -> str:
    tokens = s["mean_input_tokens"] + s["mean_output_tokens"]
    return (f"| {label} | {s['successes']}/{s['episodes']} | {_pct(s['success_rate'])} | "
            f"{_ci(s['ci95'])} | {s['errors']} | {s['mean_turns']:.1f} | {tokens:.0f} | "
            f"{s['mean_wall_time_s']:.1f} |")


HEADER = ("| {what} | successes | rate | 95% CI (Wilson) | errors | mean turns | "
          "mean tokens | mean wall s |\n|---|---|---|---|---|---|---|---|")


def markdown(report: dict, title: str) -> str:
    lines = [f"# {title}", ""]
    if report.get("description"):
        lines += [report["description"], ""]
    lines += ["## Suites", "", HEADER.format(what="suite")]
    lines += [_row(s["suite"], s) for s in report["suites"]]
    lines += [_row("**all**", report["overall"]), "", "## Tasks", "",
              HEADER.format(what="task")]
    lines += [_row(f"{t['suite']} {t['task_id']}: {t['task']}", t) for t in report["tasks"]]
    lines += ["", "Errors are episodes the harness could not run to a verdict (a crashed or "
              "hung node, twice); they are not counted in the rates.", ""]
    return "\n".join(lines)


def plot(report: dict, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = report["tasks"]
    labels = [f"{t['suite']}/{t['task_id']}" for t in tasks]
    rates = [100 * (t["success_rate"] or 0.0) for t in tasks]
    low = [max(0.0, r - 100 * t["ci95"][0]) for r, t in zip(rates, tasks)]
    high = [max(0.0, 100 * t["ci95"][1] - r) for r, t in zip(rates, tasks)]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(tasks) + 2), 4.5))
    ax.bar(range(len(tasks)), rates, yerr=[low, high], capsize=3, color="#4878a8")
    ax.set_xticks(range(len(tasks)), labels, rotation=75, ha="right", fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("success rate, % (95% Wilson interval)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(records: list[dict], folder: Path, title: str,
                 description: str = "") -> dict:
    """report.md, report.json and success_per_task.png in ``folder``; returns the report."""
    folder = Path(folder)
    report = {"title": title, "description": description, **tables(records)}
    (folder / "report.json").write_text(json.dumps(report, indent=1))
    (folder / "report.md").write_text(markdown(report, title))
    if report["tasks"]:
        plot(report, folder / "success_per_task.png", title)
    return report


def _cmp_row(label: str, a: dict, b: dict) -> dict:
    diff = (None if a["success_rate"] is None or b["success_rate"] is None
            else b["success_rate"] - a["success_rate"])
    return {"label": label, "a": a, "b": b, "difference": diff,
            "intervals_overlap": intervals_overlap(a["ci95"], b["ci95"])}


def compare(records_a: list[dict], records_b: list[dict]) -> dict:
    """Per task and per suite: both rates with intervals, B − A, and whether the 95%
    intervals overlap (non-overlapping intervals: the difference is significant).

    Suites and the overall row count only the tasks both sides ran, so a wider selection
    on one side does not pass for a better or worse policy.
    """
    def key(r):
        return r["suite"], r["task_id"]

    keys_a, keys_b = {key(r) for r in records_a}, {key(r) for r in records_b}
    common = keys_a & keys_b
    ta = tables([r for r in records_a if key(r) in common])
    tb = tables([r for r in records_b if key(r) in common])
    rows = {"tasks": [], "suites": []}
    for a, b in zip(ta["tasks"], tb["tasks"]):  # both sorted by (suite, task_id)
        rows["tasks"].append(_cmp_row(f"{a['suite']} {a['task_id']}: {a['task']}", a, b))
    for a, b in zip(ta["suites"], tb["suites"]):
        rows["suites"].append(_cmp_row(a["suite"], a, b))
    rows["overall"] = _cmp_row("all (common tasks)", ta["overall"], tb["overall"])
    rows["only_in_a"] = sorted(f"{s} {t}" for s, t in keys_a - keys_b)
    rows["only_in_b"] = sorted(f"{s} {t}" for s, t in keys_b - keys_a)
    return rows


def compare_markdown(rows: dict, label_a: str, label_b: str) -> str:
    head = (f"| {{what}} | A: {label_a} | 95% CI | B: {label_b} | 95% CI | B − A | "
            "intervals overlap |\n|---|---|---|---|---|---|---|")

    def line(r):
        diff = "—" if r["difference"] is None else f"{100 * r['difference']:+.1f} pp"
        return (f"| {r['label']} | {_pct(r['a']['success_rate'])} ({r['a']['successes']}/"
                f"{r['a']['episodes']}) | {_ci(r['a']['ci95'])} | "
                f"{_pct(r['b']['success_rate'])} ({r['b']['successes']}/{r['b']['episodes']}) "
                f"| {_ci(r['b']['ci95'])} | {diff} | "
                f"{'yes' if r['intervals_overlap'] else '**no**'} |")

    lines = [f"# {label_a} (A) vs {label_b} (B)", "", "## Suites", "",
             head.format(what="suite")]
    lines += [line(r) for r in rows["suites"]] + [line(rows["overall"]), "", "## Tasks", "",
                                                  head.format(what="task")]
    lines += [line(r) for r in rows["tasks"]]
    for side, key in (("A", "only_in_a"), ("B", "only_in_b")):
        if rows[key]:
            lines += ["", f"Only in {side} (not compared): {', '.join(rows[key])}"]
    lines += ["", "Intervals that do not overlap mark a difference that is significant at "
              "about the 5% level or better; overlapping ones do not rule one out.", ""]
    return "\n".join(lines)
