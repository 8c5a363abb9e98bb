"""Every knob of a sampler in one frozen record.

The catalog turns a method entry into a `SamplerSpec`; the drivers (verl plugin, CPU trainer,
simulator) only ever see this record, so a resolved run config can store it verbatim and the same
method means the same thing on every path.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from repro.sampling.settings import SETTINGS, GresoSettings, KnapsackSettings, PodsSettings

Kind = Literal["uniform", "dapo", "seq", "est", "pods", "knapsack", "greso"]
ExitRule = Literal["pos", "balance"]
Downsample = Literal["random", "first"]
Unresolved = Literal["keep", "drop"]
OnCap = Literal["short", "error"]
Allocation = Literal["sqrt", "inverse"]
Prior = Literal["running", "fixed"]
EstAdvantage = Literal["weighted", "released"]
EarlyExit = Literal["off", "order", "first-returned"]


# Fields added after the first runs were made (issue 23: the released Est), with their defaults.
LATER_DEFAULTS: dict[str, Any] = {
    "allocation": "sqrt",
    "prior": "running",
    "prior_alpha": 1.0,
    "prior_beta": 16.0,
    "est_advantage": "weighted",
}
# The families from the literature (issue 36): left out of a stored spec while all of them keep their defaults.
BENCH_FIELDS = ("pods_", "knapsack_", "greso_")


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
    # off: the paper's rounds; order: the rule on the request-order prefix that has returned, the rest cancelled
    # (repro.sampling.early_exit); first-returned: the biased variant, on whatever returned first
    early_exit: EarlyExit = "off"
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
    # the families from the literature (issue 36), each under its prefix at its typed settings' default: those
    # (repro.sampling.settings) hold the authors' names, values and sources, and are the only copy of the values
    pods_generate: int = PodsSettings.generate
    knapsack_min_n: int = KnapsackSettings.min_n
    knapsack_max_n: int = KnapsackSettings.max_n
    knapsack_negative_n: int = KnapsackSettings.negative_n
    knapsack_positive_n: int = KnapsackSettings.positive_n
    knapsack_alpha: float = KnapsackSettings.alpha
    knapsack_cost: str = KnapsackSettings.cost
    knapsack_allow_fallback: bool = KnapsackSettings.allow_fallback
    knapsack_min_buffer_length: int = KnapsackSettings.min_buffer_length
    knapsack_reward_buffer_length: int = KnapsackSettings.reward_buffer_length
    greso_p_easy: float = GresoSettings.p_easy
    greso_p_hard: float = GresoSettings.p_hard
    greso_target_zero_variance: float = GresoSettings.target_zero_variance
    greso_min_p: float = GresoSettings.min_p
    greso_max_p: float = GresoSettings.max_p
    greso_sampling_batch_ratio: float = GresoSettings.sampling_batch_ratio
    greso_min_sampling_batch_ratio: float = GresoSettings.min_sampling_batch_ratio
    greso_max_rounds: int = GresoSettings.max_rounds

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        """Every inconsistency at once, so a bad config is fixed in one edit rather than five."""
        out: list[str] = []
        if self.kind not in SETTINGS:
            *rest, last = SETTINGS
            out.append(f"kind must be {', '.join(rest)} or {last}, got {self.kind!r}")
        if self.n < 1:
            out.append(f"n must be >= 1, got {self.n}")
        settings = SETTINGS.get(self.kind)
        if settings is not None:
            try:
                settings.of(self)
            except ValueError as error:
                out.extend(str(error).split("; "))
        if self.downsample not in ("random", "first"):
            out.append(f"downsample must be random or first, got {self.downsample!r}")
        if self.early_exit != "off" and self.kind != "seq":
            out.append(f"early_exit applies to seq only (its groups end by a rule), not to {self.kind}")
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
        return SETTINGS[self.kind].of(self).pool_cap(prompts)

    def to_dict(self) -> dict[str, Any]:
        """Every field, but the ones added after runs existed are left out while all of them keep their
        defaults: a run's stored config (and a verl cell's override list) then reads as it did before they
        existed, so a run made before them resumes."""
        out = asdict(self)
        if all(out[name] == default for name, default in LATER_DEFAULTS.items()):
            for name in LATER_DEFAULTS:
                del out[name]
        if out["early_exit"] == "off":  # issue 46's: a stored spec without it is off
            del out["early_exit"]
        bench = [f for f in fields(self) if f.name.startswith(BENCH_FIELDS)]
        if all(out[f.name] == f.default for f in bench):
            for f in bench:
                del out[f.name]
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
