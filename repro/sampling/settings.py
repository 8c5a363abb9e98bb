"""Each method family's own settings, typed, read out of the flat `SamplerSpec` a run stores.

The spec stays one flat record because that is what run configs and verl override lists have always held
(a run made before this module existed resumes from it); a family's settings are the fields it reads, so
its checks and its pool width live beside each other and no family sees another's knobs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class Settings:
    """What every family reads: the update group size and the reward threshold of a positive."""

    kind: ClassVar[str]
    n: int
    positive_threshold: float

    @classmethod
    def of(cls, spec: Any) -> Settings:
        """This family's fields of a `SamplerSpec` (any object with them)."""
        return cls(**{f.name: getattr(spec, f.name) for f in fields(cls)})

    def problems(self) -> list[str]:
        return []

    def pool_cap(self, prompts: int) -> int:
        """The most responses one prompt can get in a step of `prompts` prompts: the pool arrays' width."""
        return self.n


@dataclass(frozen=True)
class UniformSettings(Settings):
    """GRPO: n responses per prompt, advantages (r - group mean) / (group std + epsilon)."""

    kind: ClassVar[str] = "uniform"
    norm_adv_by_std: bool
    epsilon: float


@dataclass(frozen=True)
class DapoSettings(UniformSettings):
    """DAPO: GRPO's groups, refilled with generation batches until enough of them are mixed."""

    kind: ClassVar[str] = "dapo"
    gen_batch_size: int | None
    max_num_gen_batches: int
    on_cap: str


@dataclass(frozen=True)
class SeqSettings(Settings):
    """Reinforce-Ada-Seq: rounds of `round_size` until the exit rule holds, then a downsampled group of n."""

    kind: ClassVar[str] = "seq"
    exit_rule: str
    round_size: int
    max_rounds: int
    k_pos: int
    streaming: bool
    downsample: str
    unresolved: str
    global_std_norm: bool
    epsilon: float

    def problems(self) -> list[str]:
        out: list[str] = []
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
        return out

    def pool_cap(self, prompts: int) -> int:
        return self.round_size * self.max_rounds


@dataclass(frozen=True)
class EstSettings(Settings):
    """Reinforce-Ada-Est: a budget of n_avg per prompt allocated by an estimated pass rate, weighted advantages."""

    kind: ClassVar[str] = "est"
    n_avg: int
    n_min: int
    n_max: int
    kappa: float
    decay: float
    p_min: float
    w_max: float
    prior_mean_init: float
    allocation: str
    prior: str
    prior_alpha: float
    prior_beta: float
    est_advantage: str
    global_std_norm: bool
    epsilon: float

    def problems(self) -> list[str]:
        out: list[str] = []
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
        return out

    def pool_cap(self, prompts: int) -> int:
        """The released allocation (one each, the rest by 1/p_hat, no cap) can give one prompt all the rest."""
        if self.allocation == "inverse":
            return 1 + (self.n_avg - 1) * max(1, prompts)
        return self.n_max


SETTINGS: dict[str, type[Settings]] = {
    cls.kind: cls for cls in (UniformSettings, DapoSettings, SeqSettings, EstSettings)
}
