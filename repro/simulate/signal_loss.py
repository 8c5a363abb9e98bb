"""The paper's Figure 2 logic: how often a group of n is all-correct or all-wrong, against n.

Under a Beta over prompts both shares are Beta moments, E[p^n] and E[(1-p)^n]; the Monte-Carlo
column draws prompts and n rewards each through numpy, so the two agree only if the algebra does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.simulate.pass_rates import PassRates, beta_moment


@dataclass
class SignalLossTable:
    n: np.ndarray
    all_correct: np.ndarray
    all_wrong: np.ndarray
    pass_at_n: np.ndarray
    mc_all_correct: np.ndarray
    mc_all_wrong: np.ndarray
    mc_prompts: int

    def rows(self) -> list[dict[str, float]]:
        return [
            {
                "n": int(n),
                "all_correct": float(ac),
                "all_wrong": float(aw),
                "signal": max(0.0, float(1.0 - ac - aw)),
                "pass_at_n": float(pn),
                "mc_all_correct": float(mac),
                "mc_all_wrong": float(maw),
            }
            for n, ac, aw, pn, mac, maw in zip(
                self.n,
                self.all_correct,
                self.all_wrong,
                self.pass_at_n,
                self.mc_all_correct,
                self.mc_all_wrong,
                strict=True,
            )
        ]


def signal_loss(rates: PassRates, max_n: int, prompts: int, seed: int) -> SignalLossTable:
    n = np.arange(1, max_n + 1)
    rng = np.random.default_rng(seed)
    if rates.alpha is not None:
        all_correct = beta_moment(rates.alpha, rates.beta, n)
        all_wrong = beta_moment(rates.beta, rates.alpha, n)
        p = rng.beta(rates.alpha, rates.beta, size=prompts)
    else:
        values = np.asarray(rates.values)
        all_correct = np.array([np.mean(values**k) for k in n])
        all_wrong = np.array([np.mean((1 - values) ** k) for k in n])
        p = values[rng.integers(0, values.size, size=prompts)]
    draws = rng.random((prompts, max_n)) < p[:, None]
    # a prompt is all-correct at n while its first n rewards are all 1: a running logical AND
    mc_correct = np.logical_and.accumulate(draws, axis=1).mean(axis=0)
    mc_wrong = np.logical_and.accumulate(~draws, axis=1).mean(axis=0)
    return SignalLossTable(n, all_correct, all_wrong, 1.0 - all_wrong, mc_correct, mc_wrong, prompts)
