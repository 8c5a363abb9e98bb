"""`repro simulate sampling`: every method's sampling statistics against Bernoulli rewards.

Prompts have fixed true pass rates (no learning), so what differs between methods is only how they
spend samples and how often an update group carries signal. Each method runs through the very
`StepSampler` the trainers use, beside the closed forms of `exact.py` evaluated on the same prompts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from repro.sampling import StepSampler, estimator_for, run_step_sync
from repro.sampling.spec import SamplerSpec
from repro.simulate.exact import dapo_expected_batches, seq_exact, sequential_mean_draws, uniform_mixed


@dataclass
class MethodStats:
    method: str
    kind: str
    steps: int
    draws_mean: float
    draws_p95: float
    signal_share: float  # update groups holding both classes
    zero_grad_share: float  # drawn prompts whose rewards are all equal
    unresolved_share: float | None  # seq: exit rule never met
    exact: dict[str, float | None] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _quantile_from_pmf(values: np.ndarray, pmf: np.ndarray, q: float) -> float:
    cdf = np.cumsum(pmf) / pmf.sum()
    return float(values[np.searchsorted(cdf, q - 1e-12)])


class _EpochSampler:
    """Prompt ids in shuffled epochs, as a data loader without replacement would give them."""

    def __init__(self, size: int, rng: np.random.Generator) -> None:
        self._size, self._rng = size, rng
        self._order = rng.permutation(size)
        self._pos = 0

    def draw(self, k: int) -> np.ndarray:
        out = []
        while k > 0:
            if self._pos == self._size:
                self._order, self._pos = self._rng.permutation(self._size), 0
            take = min(k, self._size - self._pos)
            out.append(self._order[self._pos : self._pos + take])
            self._pos += take
            k -= take
        return np.concatenate(out)


def simulate_method(
    name: str,
    spec: SamplerSpec,
    pass_rates: np.ndarray,
    *,
    steps: int,
    batch: int,
    seed: int,
    on_step: Callable[[], None] | None = None,
) -> MethodStats:
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    prompts = _EpochSampler(pass_rates.size, np.random.default_rng(seed + 1))
    estimator = estimator_for(spec)
    seq = seq_exact(pass_rates, spec) if spec.kind == "seq" else None
    cap = spec.pool_cap_for(batch)
    size_hist = np.zeros(cap + 1)
    per_step_draws, signal, zero, unresolved = [], [], [], []
    ex_signal, ex_zero, ex_unres = [], [], []
    extra: dict[str, list[float]] = {}

    for step in range(steps):
        sampler = StepSampler(spec, prompts.draw(batch), step=step, estimator=estimator)

        def sample(slots: np.ndarray, counts: np.ndarray, _s: StepSampler = sampler) -> np.ndarray:
            p = pass_rates[np.asarray(_s.prompt_ids)[slots]]
            return (rng.random((slots.size, int(counts.max()))) < p[:, None]).astype(float)

        result = run_step_sync(sampler, sample, prompts.draw)
        ids_now = np.asarray(result.prompt_ids)
        p = pass_rates[ids_now]
        met = result.metrics
        size = result.pool_size
        size_hist += np.bincount(size[:batch], minlength=cap + 1)
        per_step_draws.append(met["sampler/responses_total"] / batch)
        pool_mixed = (result.pool_positives > 0) & (result.pool_positives < size)
        drawn = size > 0  # GRESO skips prompts before any rollout: they hold no group at all
        signal.append(met["sampler/signal_frac"])
        zero.append(1.0 - pool_mixed[drawn].mean())
        if spec.kind == "seq":
            unresolved.append(met["sampler/unresolved"] / batch)
            mixed_p = seq.mixed[ids_now]
            unres_p = seq.unresolved[ids_now]
            kept = batch - (unres_p.sum() if spec.unresolved == "drop" else 0.0)
            ex_signal.append(float(mixed_p.sum() / kept))
            ex_zero.append(float(1.0 - mixed_p.mean()))
            ex_unres.append(float(unres_p.mean()))
        elif spec.kind in ("dapo", "greso"):  # the update keeps mixed groups only
            ex_signal.append(1.0)
            ex_zero.append(float(1.0 - uniform_mixed(p[drawn], spec.n).mean()))
        else:  # uniform, est, knapsack (sizes fixed before the step's draws), pods (a mixed pool keeps both)
            mixed_p = uniform_mixed(p, size)
            ex_signal.append(float(mixed_p.mean()))
            ex_zero.append(float(1.0 - mixed_p.mean()))
        for key in ("dapo/num_gen_batches", "dapo/cap_hit", "est/calibration_mae", "est/weight_max"):
            if key in met:
                extra.setdefault(key, []).append(met[key])
        if on_step:
            on_step()

    sizes = np.arange(cap + 1)
    draws = np.asarray(per_step_draws)
    exact: dict[str, float | None] = {
        "signal_share": float(np.mean(ex_signal)),
        "zero_grad_share": float(np.mean(ex_zero)),
        "unresolved_share": float(np.mean(ex_unres)) if ex_unres else None,
    }
    if spec.kind == "uniform":
        exact["draws_mean"], exact["draws_p95"] = float(spec.n), float(spec.n)
        draws_p95 = _quantile_from_pmf(sizes, size_hist, 0.95)
    elif spec.kind == "seq" and spec.early_exit == "order":  # the pools are the one-at-a-time sampler's
        # (first-returned keeps whatever is back: here a whole round at once, the rounds' law below)
        exact["draws_mean"] = float(sequential_mean_draws(pass_rates, spec).mean())
        exact["draws_p95"] = exact["signal_share"] = exact["zero_grad_share"] = None  # rounds' closed forms
        draws_p95 = _quantile_from_pmf(sizes, size_hist, 0.95)
    elif spec.kind == "seq":
        exact["draws_mean"] = float(seq.mean_draws.mean())
        exact["draws_p95"] = _quantile_from_pmf(seq.sizes, seq.pool_size_pmf.mean(axis=0), 0.95)
        draws_p95 = _quantile_from_pmf(sizes, size_hist, 0.95)
    elif spec.kind == "est":
        exact["draws_mean"], exact["draws_p95"] = float(spec.n_avg), None
        draws_p95 = _quantile_from_pmf(sizes, size_hist, 0.95)
    elif spec.kind in ("pods", "knapsack"):  # n x batch by construction (Knapsack), `generate` each (PODS)
        exact["draws_mean"] = float(spec.pods_generate if spec.kind == "pods" else spec.n)
        exact["draws_p95"] = float(spec.pods_generate) if spec.kind == "pods" else None
        draws_p95 = _quantile_from_pmf(sizes, size_hist, 0.95)
    elif spec.kind == "greso":  # skips and refills depend on histories: no closed form
        exact["draws_mean"], exact["draws_p95"] = None, None
        draws_p95 = float(np.quantile(draws, 0.95))
    else:  # dapo: cost per update prompt, from generation batches
        q = float(uniform_mixed(pass_rates, spec.n).mean())
        gen = spec.gen_batch_size or batch
        batches = dapo_expected_batches(q, batch, gen, spec.max_num_gen_batches)
        exact["draws_mean"], exact["draws_p95"] = batches * gen * spec.n / batch, None
        draws_p95 = float(np.quantile(draws, 0.95))
    return MethodStats(
        method=name,
        kind=spec.kind,
        steps=steps,
        draws_mean=float(draws.mean()),
        draws_p95=draws_p95,
        signal_share=float(np.mean(signal)),
        zero_grad_share=float(np.mean(zero)),
        unresolved_share=float(np.mean(unresolved)) if unresolved else None,
        exact=exact,
        extra={k: float(np.mean(v)) for k, v in extra.items()},
        seconds=time.perf_counter() - started,
    )
