"""Reinforce-Ada-Est's pass-rate estimator: a decayed Beta-Bernoulli posterior per prompt.

Its state outlives a step and must outlive a restart: a resumed run that forgot it would treat every
prompt as new and spend the budget uniformly. Hence `state_dict`/`save` and their inverses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from repro.atomic import write_text

STATE_VERSION = 1


def make_estimator(settings: Any) -> BetaBernoulliEstimator:
    """The estimator an Est run keeps across steps, from its settings (a `SamplerSpec` or `EstSettings`)."""
    s = settings
    return BetaBernoulliEstimator(s.kappa, s.decay, s.p_min, s.prior_mean_init, s.prior, s.prior_alpha, s.prior_beta)


class BetaBernoulliEstimator:
    """Per prompt (a, b); after k positives of m: a <- decay*a + k, b <- decay*b + (m - k).

    A prompt seen for the first time starts from the running batch pass rate with strength `kappa`;
    that running rate is itself a decayed ratio of batch totals, so it tracks the policy as it learns.

    `prior="fixed"` is the released sampler's estimator (RLHFlow/Reinforce-Ada ray_trainer_ema.py): (a, b)
    are decayed counts starting at 0, and a fixed Beta(alpha, beta) is added only when p_hat is read,
    p_hat = (alpha + a) / (alpha + beta + a + b), so the prior itself never decays and an unseen prompt has
    p_hat = alpha / (alpha + beta) (1/17 with the released Beta(1, 16)).
    """

    def __init__(
        self,
        kappa: float,
        decay: float,
        p_min: float,
        prior_mean_init: float = 0.5,
        prior: str = "running",
        alpha: float = 1.0,
        beta: float = 16.0,
    ) -> None:
        if prior not in ("running", "fixed"):
            raise ValueError(f"prior must be running or fixed, got {prior!r}")
        self.kappa = float(kappa)
        self.decay = float(decay)
        self.p_min = float(p_min)
        self.prior_mean_init = float(prior_mean_init)
        self.prior = prior
        self.alpha = float(alpha)
        self.beta = float(beta)
        self._row: dict[str, int] = {}
        self._a = np.zeros(0)
        self._b = np.zeros(0)
        self._sum_k = 0.0
        self._sum_m = 0.0

    def __len__(self) -> int:
        return len(self._row)

    def prior_mean(self) -> float:
        if self.prior == "fixed":
            return self.alpha / (self.alpha + self.beta)
        return self._sum_k / self._sum_m if self._sum_m > 0 else self.prior_mean_init

    def _rows(self, ids: Sequence[Hashable], create: bool) -> np.ndarray:
        keys = [str(i) for i in ids]
        missing = [k for k in dict.fromkeys(keys) if k not in self._row]
        if missing and create:
            start = len(self._row)
            for offset, key in enumerate(missing):
                self._row[key] = start + offset
            m0, strength = self.prior_mean(), 0.0 if self.prior == "fixed" else self.kappa
            self._a = np.concatenate([self._a, np.full(len(missing), strength * m0)])
            self._b = np.concatenate([self._b, np.full(len(missing), strength * (1.0 - m0))])
        return np.array([self._row.get(k, -1) for k in keys], dtype=np.int64)

    def posterior_mean(self, ids: Sequence[Hashable]) -> np.ndarray:
        """Unclamped a/(a+b); unseen prompts get the current prior mean."""
        rows = self._rows(ids, create=False)
        out = np.full(rows.size, self.prior_mean())
        seen = rows >= 0
        a, b = self._a[rows[seen]], self._b[rows[seen]]
        if self.prior == "fixed":
            out[seen] = (self.alpha + a) / (self.alpha + self.beta + a + b)
            return out
        total = a + b
        out[seen] = np.where(total > 0, a / np.where(total > 0, total, 1.0), self.prior_mean())
        return out

    def p_hat(self, ids: Sequence[Hashable]) -> np.ndarray:
        """The estimate used for allocation and weights, clamped to [p_min, 1]."""
        return np.clip(self.posterior_mean(ids), self.p_min, 1.0)

    def update(self, ids: Sequence[Hashable], positives: np.ndarray, drawn: np.ndarray) -> None:
        positives = np.asarray(positives, dtype=float)
        drawn = np.asarray(drawn, dtype=float)
        if np.any(positives < 0) or np.any(positives > drawn):
            raise ValueError("need 0 <= positives <= drawn for every prompt")
        rows = self._rows(ids, create=True)
        # A prompt twice in one batch is decayed once per occurrence, in order.
        for row, k, m in zip(rows, positives, drawn, strict=True):
            self._a[row] = self.decay * self._a[row] + k
            self._b[row] = self.decay * self._b[row] + (m - k)
        self._sum_k = self.decay * self._sum_k + float(positives.sum())
        self._sum_m = self.decay * self._sum_m + float(drawn.sum())

    def state_dict(self) -> dict[str, Any]:
        keys = sorted(self._row, key=self._row.__getitem__)
        return {
            "version": STATE_VERSION,
            "params": {
                "kappa": self.kappa,
                "decay": self.decay,
                "p_min": self.p_min,
                "prior_mean_init": self.prior_mean_init,
                "prior": self.prior,
                "alpha": self.alpha,
                "beta": self.beta,
            },
            "running": {"sum_k": self._sum_k, "sum_m": self._sum_m},
            "prompts": {"ids": keys, "a": self._a.tolist(), "b": self._b.tolist()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"estimator state version {state.get('version')!r}, expected {STATE_VERSION}")
        params = state["params"]
        self.kappa, self.decay = float(params["kappa"]), float(params["decay"])
        self.p_min, self.prior_mean_init = float(params["p_min"]), float(params["prior_mean_init"])
        # states saved before the released prior existed are running-prior states
        self.prior = str(params.get("prior", "running"))
        self.alpha, self.beta = float(params.get("alpha", 1.0)), float(params.get("beta", 16.0))
        self._sum_k = float(state["running"]["sum_k"])
        self._sum_m = float(state["running"]["sum_m"])
        prompts = state["prompts"]
        self._row = {key: i for i, key in enumerate(prompts["ids"])}
        self._a = np.asarray(prompts["a"], dtype=float)
        self._b = np.asarray(prompts["b"], dtype=float)
        if not (len(self._row) == self._a.size == self._b.size):
            raise ValueError("estimator state is inconsistent: ids, a and b differ in length")

    def save(self, path: str | os.PathLike[str]) -> None:
        """Atomic JSON write: a crash mid-save leaves the previous state, never half a file."""
        write_text(path, json.dumps(self.state_dict()))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BetaBernoulliEstimator:
        with open(path) as handle:
            state = json.load(handle)
        est = cls(**state["params"])
        est.load_state_dict(state)
        return est
