"""The signal-loss family (figure 2): the shares of all-correct and all-wrong groups against group size,
unbiased from eval records (or simulated from the paper's base-model pass rates when there are none)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from repro import paper as paper_tables
from repro.evaluation.metrics import pass_at_k_array
from repro.evaluation.runner import read_records
from repro.report.figures.common import Result, backbone_order
from repro.report.figures.records import problem_counts, run_records
from repro.report.style import PAPER_COLOR, method_color, new_figure, plot_style, sort_methods
from repro.simulate import pass_rates as pr
from repro.simulate.signal_loss import signal_loss as simulate

__all__ = ["share_all_correct", "signal_loss"]


def share_all_correct(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Unbiased shares of all-correct and all-wrong groups of size n = 1..k from evaluation records.

    A problem with c correct of k samples has C(c, n)/C(k, n) of its n-subsets all correct and
    C(k-c, n)/C(k, n) all wrong; both are averaged over problems. k is the smallest samples-per-problem
    count, so every problem contributes at every n. Returns columns n, all_correct, all_wrong (fractions).
    """
    n, c = problem_counts(records)
    if n.size == 0:
        return pd.DataFrame(columns=["n", "all_correct", "all_wrong"])
    top = int(n.min())
    sizes = np.arange(1, top + 1)
    # C(k-c, n)/C(k, n) is 1 - pass@n; the product form of pass_at_k_array stays exact at large k
    wrong = [float(np.mean(1.0 - pass_at_k_array(n, c, s))) for s in sizes]
    correct = [float(np.mean(1.0 - pass_at_k_array(n, n - c, s))) for s in sizes]
    return pd.DataFrame({"n": sizes, "all_correct": correct, "all_wrong": wrong})


def _records_from_path(path: Path) -> dict[str, list[dict]]:
    """Label -> records from a runs root, one run folder, an eval folder or one .jsonl file.

    Runs are labelled by their method key (folder name backbone__method__prompt_set__s<seed>); seeds and
    prompt sets of one backbone x method are pooled; several backbones get "backbone: method" labels.
    """
    if path.is_file():
        return {path.stem: read_records(path)[0]}
    if not path.is_dir():
        return {}
    if list(path.glob("*.jsonl")):
        return {path.name: [r for f in sorted(path.glob("*.jsonl")) for r in read_records(f)[0]]}
    runs = [path] if (path / "eval").is_dir() else sorted(p for p in path.iterdir() if (p / "eval").is_dir())
    grouped: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        parts = run.name.split("__")
        backbone, method = (parts[0], parts[1]) if len(parts) >= 2 else ("", run.name)
        records = [r for rs in run_records(run).values() for r in rs]
        if records:
            grouped.setdefault((backbone, method), []).extend(records)
    backbones = backbone_order(b for b, _ in grouped)
    methods = sort_methods(m for _, m in grouped)
    order = sorted(grouped, key=lambda bm: (backbones.index(bm[0]), methods.index(bm[1])))
    several = len(backbones) > 1
    return {f"{b}: {m}" if several else m: grouped[(b, m)] for b, m in order}


def signal_loss(
    source: Path | str | Mapping[str, Iterable[Mapping[str, Any]]] | Iterable[Mapping[str, Any]] | None = None,
    *,
    max_n: int = 256,
    pass_at_1: float = 0.265,
    pass_at_k: float = 0.813,
    k: int = 256,
) -> Result:
    """Figure 2: shares of all-correct (left) and all-wrong (right) groups against group size n, in percent.

    `source` is a runs root, run folder, eval folder or .jsonl (the final evaluated checkpoint of each
    run, one line per method), a mapping label -> records, or a list of records. With no records
    (None, or a path holding none) the curve is `repro simulate signal-loss`'s: E[p^n] and E[(1-p)^n]
    under a Beta fitted to the paper's base-model pass@1 = 26.5% and pass@256 = 81.3%, n = 1..max_n.
    The paper's two reported all-correct shares of its RL checkpoint (35.3% at n = 4, 10.2% at n = 256)
    are marked "paper" on the left panel.
    """
    missing: list[str] = []
    if source is None:
        labelled: dict[str, list] = {}
    elif isinstance(source, (str, Path)):
        labelled = _records_from_path(Path(source))
        if not labelled:
            missing.append(f"no eval records under {source}")
    elif isinstance(source, Mapping):
        labelled = {str(label): list(records) for label, records in source.items()}
    else:
        labelled = {"eval records": list(source)}
    curves: dict[str, pd.DataFrame] = {}
    for label, records in labelled.items():
        table = share_all_correct(records)
        if table.empty:
            missing.append(f"{label}: no usable eval records")
        else:
            curves[label] = table
    simulated = not curves
    if simulated:
        rates = pr.from_pass_at_k(pass_at_1, pass_at_k, k)
        sim = simulate(rates, max_n, prompts=1, seed=0)
        label = f"simulated: Beta fit to base pass@1={pass_at_1:.1%}, pass@{k}={pass_at_k:.1%}"
        curves[label] = pd.DataFrame({"n": sim.n, "all_correct": sim.all_correct, "all_wrong": sim.all_wrong})
        missing.append("no eval records: the curves are simulated (`repro simulate signal-loss`), not measured")
    reported = paper_tables.signal_loss()
    reported = reported[reported["statistic"] == "all-correct groups"]
    with plot_style():
        fig, axes = new_figure(1, 2, panel_size=(5.0, 3.6))
        left, right = axes[0]
        top = max(int(t["n"].max()) for t in curves.values())
        for label, table in curves.items():
            method = label.split(": ")[-1]
            color = method_color(method) if not simulated else "#555555"
            for ax, column in ((left, "all_correct"), (right, "all_wrong")):
                ax.plot(table["n"].to_numpy(), table[column].to_numpy() * 100.0, color=color, label=label)
        left.scatter(
            reported["k"].to_numpy(),
            reported["value_percent"].to_numpy(),
            marker="*",
            s=90,
            color=PAPER_COLOR,
            zorder=5,
            label="paper",
        )
        for kk, v, model in zip(reported["k"], reported["value_percent"], reported["model"], strict=True):
            left.annotate(
                f"{v:g}% ({model.split(' ', 1)[-1]})",
                (kk, v),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
            )
        top = max(top, int(reported["k"].max()))
        ticks = [2**i for i in range(int(math.log2(top)) + 1)]
        for ax, what in ((left, "all-correct"), (right, "all-wrong")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.set_xlabel("group size n")
            ax.set_ylabel(f"{what} groups (% of prompts)")
            ax.set_title(f"Share of {what} groups (no learning signal)")
            ax.legend(loc="upper right")
        source_note = "simulated" if simulated else "from eval records, unbiased over n-subsets"
        fig.suptitle(f"Signal loss against group size ({source_note})")
    return fig, missing
