"""Every knob of a sampler in one frozen record.

The catalog turns a method entry into a `SamplerSpec`; the drivers (verl plugin, CPU trainer,
simulator) only ever see this record, so a resolved run config can store it verbatim and the same
method means the same thing on every path.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

Kind = Literal["uniform", "dapo", "seq", "est"]
ExitRule = Literal["pos", "balance"]
Downsample = Literal["random", "first"]
Unresolved = Literal["keep", "drop"]
OnCap = Literal["short", "error"]
Allocation = Literal["sqrt", "inverse"]
Prior = Literal["running", "fixed"]
EstAdvantage = Literal["weighted", "released"]


# Fields added after the first runs were made (issue 23: the released Est), with their defaults.
LATER_DEFAULTS: dict[str, Any] = {
    "allocation": "sqrt",
    "prior": "running",
    "prior_alpha": 1.0,
    "prior_beta": 16.0,
    "est_advantage": "weighted",
}


@dataclass(frozen=True)
class SamplerSpec:
    kind: Kind
    n: int = 4  # update group size per prompt (uniform: responses per prompt)
    positive_threshold: float = 0.7  # a response is positive when reward > this
    seed: int = 0
    # uniform / dapo
    norm_adv_by_std: bool = True  # GRPO's (r - mean) / (std + eps)
    epsilon: float = 1e-6
    # dapo: generation batches of `gen_batch_size` prompts until enough mixed groups
    gen_batch_size: int | None = None  # None: the step's prompt batch size
    max_num_gen_batches: int = 10  # <= 0 means no cap
    on_cap: OnCap = "short"
    # seq (Reinforce-Ada-Seq)
    exit_rule: ExitRule = "balance"
    round_size: int = 8  # M
    max_rounds: int = 4  # N
    k_pos: int = 1
    streaming: bool = False
    downsample: Downsample = "random"
    unresolved: Unresolved = "keep"
    global_std_norm: bool = False
    # est (Reinforce-Ada-Est)
    n_avg: int = 8
    n_min: int = 2
    n_max: int = 32
    kappa: float = 2.0
    decay: float = 0.9
    p_min: float = 0.02
    w_max: float = 5.0
    prior_mean_init: float = 0.5
    # est as released (RLHFlow/Reinforce-Ada ray_trainer_ema.py): 1 + a share of the rest in proportion to
    # 1/p_hat with no cap, a fixed Beta(prior_alpha, prior_beta) prior, r minus the pool's positive share
    allocation: Allocation = "sqrt"
    prior: Prior = "running"
    prior_alpha: float = 1.0
    prior_beta: float = 16.0
    est_advantage: EstAdvantage = "weighted"

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        """Every inconsistency at once, so a bad config is fixed in one edit rather than five."""
        out: list[str] = []
        if self.kind not in ("uniform", "dapo", "seq", "est"):
            out.append(f"kind must be uniform, dapo, seq or est, got {self.kind!r}")
        if self.n < 1:
            out.append(f"n must be >= 1, got {self.n}")
        if self.kind == "seq":
            if self.exit_rule not in ("pos", "balance"):
                out.append(f"exit_rule must be pos or balance, got {self.exit_rule!r}")
            if self.round_size < 1 or self.max_rounds < 1:
                out.append("round_size and max_rounds must be >= 1")
            elif self.round_size * self.max_rounds < self.n:
                out.append(f"the pool cap round_size*max_rounds must be >= n={self.n}")
            if self.round_size < self.n:
                out.append(f"round_size={self.round_size} must be >= n={self.n} so every pool can fill a group")
            if self.k_pos < 1:
                out.append(f"k_pos must be >= 1, got {self.k_pos}")
            if self.n % 2:
                out.append(f"seq needs an even n (n/2 positives and n/2 negatives), got {self.n}")
        if self.kind == "est":
            if self.allocation == "inverse":  # one each and no cap: n_min and n_max are not read
                if self.n_avg < 1:
                    out.append(f"n_avg must be >= 1, got {self.n_avg}")
            elif not (1 <= self.n_min <= self.n_avg <= self.n_max):
                out.append(f"need 1 <= n_min <= n_avg <= n_max, got {self.n_min}, {self.n_avg}, {self.n_max}")
            if not (0 < self.decay <= 1):
                out.append(f"decay must be in (0, 1], got {self.decay}")
            if not (0 < self.p_min < 1):
                out.append(f"p_min must be in (0, 1), got {self.p_min}")
            if self.kappa <= 0 or self.w_max <= 0:
                out.append("kappa and w_max must be > 0")
            if self.allocation not in ("sqrt", "inverse"):
                out.append(f"allocation must be sqrt or inverse, got {self.allocation!r}")
            if self.prior not in ("running", "fixed"):
                out.append(f"prior must be running or fixed, got {self.prior!r}")
            if self.prior_alpha <= 0 or self.prior_beta <= 0:
                out.append("prior_alpha and prior_beta must be > 0")
            if self.est_advantage not in ("weighted", "released"):
                out.append(f"est_advantage must be weighted or released, got {self.est_advantage!r}")
        if self.downsample not in ("random", "first"):
            out.append(f"downsample must be random or first, got {self.downsample!r}")
        if self.unresolved not in ("keep", "drop"):
            out.append(f"unresolved must be keep or drop, got {self.unresolved!r}")
        return out

    @property
    def pool_cap(self) -> int:
        """The most responses one prompt can get in a step of one prompt: the width of the pool arrays.
        The released Est allocation has no cap but the budget: see `pool_cap_for`."""
        return self.pool_cap_for(1)

    def pool_cap_for(self, prompts: int) -> int:
        """The most responses one prompt can get in a step of `prompts` prompts."""
        if self.kind == "est" and self.allocation == "inverse":
            return 1 + (self.n_avg - 1) * max(1, prompts)
        return {
            "uniform": self.n,
            "dapo": self.n,
            "seq": self.round_size * self.max_rounds,
            "est": self.n_max,
        }[self.kind]

    def to_dict(self) -> dict[str, Any]:
        """Every field, but the ones added after runs existed are left out while all of them keep their
        defaults: a run's stored config (and a verl cell's override list) then reads as it did before they
        existed, so a run made before them resumes."""
        out = asdict(self)
        if all(out[name] == default for name, default in LATER_DEFAULTS.items()):
            for name in LATER_DEFAULTS:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplerSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown sampler settings {unknown}; known: {sorted(known)}")
        return cls(**data)

    def with_(self, **changes: Any) -> SamplerSpec:
        return replace(self, **changes)
