"""Where simulated prompts get their pass rates: a Beta (given, or fitted to pass@1 and pass@k) or a file.

A Beta is the natural family here because every quantity the paper reads off a group of n Bernoulli
rewards is a Beta moment in closed form: E[p^n] is the all-correct share, 1 - E[(1-p)^n] is pass@n.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repro.errors import ReproError


def beta_moment(a: float, b: float, n: np.ndarray | int) -> np.ndarray:
    """E[p^n] for p ~ Beta(a, b) = B(a+n, b) / B(a, b), in log space so n = 256 is exact and stable."""
    n = np.asarray(n, dtype=float)
    lg = np.vectorize(math.lgamma)
    return np.exp(lg(a + n) - math.lgamma(a) + math.lgamma(a + b) - lg(a + b + n))


def pass_at_k_beta(a: float, b: float, k: np.ndarray | int) -> np.ndarray:
    """1 - E[(1-p)^k]: the chance that at least one of k samples is correct, averaged over prompts."""
    return 1.0 - beta_moment(b, a, k)


def fit_beta(pass_at_1: float, pass_at_k: float, k: int) -> tuple[float, float]:
    """The Beta with mean pass@1 whose pass@k matches: solve for the concentration s = a + b.

    For a fixed mean, pass@k rises monotonically from pass@1 (s -> 0, all mass at 0 and 1) to
    1 - (1 - pass@1)^k (s -> inf, every prompt at the mean), so a bisection on log s is exact.
    """
    if not 0 < pass_at_1 < 1:
        raise ReproError(f"--pass-at-1 must be strictly between 0 and 1, got {pass_at_1}")
    if k < 2:
        raise ReproError(f"--k must be >= 2 to fit a Beta, got {k}")
    upper = 1.0 - (1.0 - pass_at_1) ** k
    if not pass_at_1 < pass_at_k < upper:
        raise ReproError(
            f"--pass-at-k must lie strictly between pass@1={pass_at_1} and {upper:.6g} "
            f"(= 1-(1-pass@1)^k, prompts all equally hard), got {pass_at_k}"
        )
    lo, hi = math.log(1e-8), math.log(1e8)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        s = math.exp(mid)
        if float(pass_at_k_beta(pass_at_1 * s, (1 - pass_at_1) * s, k)) < pass_at_k:
            lo = mid
        else:
            hi = mid
    s = math.exp(0.5 * (lo + hi))
    return pass_at_1 * s, (1 - pass_at_1) * s


@dataclass(frozen=True)
class PassRates:
    """A source of per-prompt pass rates, described so a report can say where its numbers came from."""

    description: str
    alpha: float | None = None
    beta: float | None = None
    values: tuple[float, ...] | None = None

    def dataset(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """Pass rates of a simulated training set: `size` Beta draws, or the file's prompts as given."""
        if self.values is not None:
            return np.asarray(self.values, dtype=float)
        return rng.beta(self.alpha, self.beta, size=size)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"description": self.description}
        if self.alpha is not None:
            out.update(alpha=self.alpha, beta=self.beta)
        if self.values is not None:
            out["prompts"] = len(self.values)
        return out


def from_beta(alpha: float, beta: float) -> PassRates:
    if not (alpha > 0 and beta > 0 and math.isfinite(alpha) and math.isfinite(beta)):
        raise ReproError(f"--alpha and --beta must be positive and finite, got {alpha}, {beta}")
    return PassRates(f"Beta({alpha:.4g}, {beta:.4g})", alpha=alpha, beta=beta)


def from_pass_at_k(pass_at_1: float, pass_at_k: float, k: int) -> PassRates:
    a, b = fit_beta(pass_at_1, pass_at_k, k)
    return PassRates(f"Beta({a:.4g}, {b:.4g}) fitted to pass@1={pass_at_1}, pass@{k}={pass_at_k}", alpha=a, beta=b)


def from_file(path: Path) -> PassRates:
    """Per-prompt pass rates from .txt/.csv (one per line, or a `pass_rate` column), .json or .parquet."""
    if not path.is_file():
        raise ReproError(f"pass-rate file {path} does not exist; give a .txt/.csv/.json/.parquet of rates")
    try:
        suffix = path.suffix.lower()
        if suffix == ".json":
            data = json.loads(path.read_text())
            values = data["pass_rate"] if isinstance(data, dict) else data
        elif suffix == ".parquet":
            import pandas as pd

            values = pd.read_parquet(path)["pass_rate"].tolist()
        else:
            lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
            if lines and "pass_rate" in lines[0]:
                import pandas as pd

                values = pd.read_csv(path)["pass_rate"].tolist()
            else:
                values = [float(ln.split(",")[0]) for ln in lines]
        arr = np.asarray(values, dtype=float)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError, OSError) as exc:
        raise ReproError(
            f"cannot read pass rates from {path} ({exc}); expected one number per line or a pass_rate column"
        ) from exc
    if arr.ndim != 1 or arr.size == 0:
        raise ReproError(f"{path} holds no pass rates")
    if not np.all((arr >= 0) & (arr <= 1)):
        raise ReproError(f"{path}: pass rates must lie in [0, 1]; found {arr.min():.4g}..{arr.max():.4g}")
    return PassRates(f"{arr.size} per-prompt pass rates from {path.name}", values=tuple(arr.tolist()))
