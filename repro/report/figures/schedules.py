"""Step time per method under the cost model's three schedules (`repro simulate cost --out FILE`): the
paper's synchronous rounds, streamed rounds (the -stream variants), and the overlapped async schedule; each
bar labelled with its ratio to GRPO-n4's synchronous step, the paper's Table 2 ratio marked beside."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from repro.report.figures.common import Result, empty_figure
from repro.report.style import PAPER_COLOR, method_color, new_figure, plot_style, sort_methods

__all__ = ["schedules"]

SYNC_LABEL = "own schedule (rounds; -stream: streamed rounds)"
ASYNC_LABEL = "async: overlapped with the next step"
FLOOR_LABEL = "floor: tokens at peak throughput + update"


def schedules(doc: Mapping[str, Any]) -> Result:
    """One bar pair per method: its own schedule (solid) and the overlapped one (hatched), a tick at the
    floor no schedule beats, and the paper's ratio as a grey diamond where Table 2 has one."""
    title = "Seconds per step on the cost model's servers, by schedule"
    rows = {r["method"]: r for r in doc.get("methods", [])}
    ref = rows.get("grpo-n4")
    if not rows:
        return empty_figure(title, "no methods in the cost file"), ["no methods in the cost file"]
    missing = [] if ref else ["no grpo-n4 row: bars are labelled in seconds, not as ratios"]
    missing += [
        f"{m}: no async schedule (simulated with --no-overlap)"
        for m, r in rows.items()
        if r.get("async_step_s") is None
    ]
    paper = doc.get("paper_ratios_1_5b", {})
    methods = sort_methods(rows)
    with plot_style():
        fig, axes = new_figure(panel_size=(max(6.0, 0.75 * len(methods) + 1.5), 3.8))
        ax = axes[0, 0]
        base = ref["step_s"] if ref else None
        width = 0.38

        def label(seconds: float) -> str:
            return f"{seconds / base:.2f}x" if base else f"{seconds:.0f}s"

        for i, m in enumerate(methods):
            row = rows[m]
            color = method_color(m)
            bar = ax.bar(i - width / 2, row["step_s"], width, color=color, label=SYNC_LABEL if i == 0 else None)
            ax.bar_label(bar, labels=[label(row["step_s"])], fontsize=7, padding=2)
            if row.get("async_step_s") is not None:
                bar = ax.bar(
                    i + width / 2, row["async_step_s"], width, color=color, alpha=0.45, hatch="///",
                    edgecolor=PAPER_COLOR, linewidth=0.6, label=ASYNC_LABEL if i == 0 else None,
                )  # fmt: skip
                ax.bar_label(bar, labels=[label(row["async_step_s"])], fontsize=7, padding=2)
            floor = row.get("floor_s")
            if floor is not None:
                ax.hlines(
                    floor, i - width, i + width, colors="black", linewidth=1.2, label=FLOOR_LABEL if i == 0 else None
                )
            if base and m in paper:
                first = m == next(k for k in methods if k in paper)
                ax.plot(
                    i - width / 2, paper[m] * base, marker="D", color=PAPER_COLOR, markersize=4, linestyle="none",
                    label="paper Table 2 ratio x this GRPO-n4" if first else None,
                )  # fmt: skip
        ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
        ax.set_ylabel("seconds per step (model)")
        settings = doc.get("settings", {})
        server = doc.get("server", {})
        ax.set_title(
            f"{title}\n{server.get('replicas', '?')} x {server.get('capacity', '?')}-slot servers, "
            f"{settings.get('batch', '?')} prompts a step, {settings.get('steps', '?')} steps",
            fontsize=9,
        )
        tallest = max(max(r["step_s"], r.get("async_step_s") or 0.0) for r in rows.values())
        ax.set_ylim(0, tallest * 1.35)  # room for the legend above the bars
        ax.legend(fontsize=7, loc="upper left", ncols=2)
    return fig, missing
