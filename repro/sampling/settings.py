"""Each method family's own settings, typed, read out of the flat `SamplerSpec` a run stores.

The spec stays one flat record because that is what run configs and verl override lists have always held
(a run made before this module existed resumes from it); a family's settings are the fields it reads, so
its checks and its pool width live beside each other and no family sees another's knobs. The families added
from the literature keep their authors' names here and a prefix in the spec (`min_n` is the spec's
`knapsack_min_n`), so that no two families share a spec field by accident.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

EARLY_EXITS = ("off", "order", "first-returned")  # Seq's early exit (repro.sampling.early_exit)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What every family reads: the update group size, the reward threshold of a positive, the std guard."""

    kind: ClassVar[str]
    prefix: ClassVar[str] = ""  # of this family's own fields in the flat spec
    n: int
    positive_threshold: float = 0.7
    epsilon: float = 1e-6  # the advantage's denominator guard, where a family divides by a std

    @classmethod
    def of(cls, spec: Any) -> Settings:
        """This family's fields of a `SamplerSpec` (any object with them)."""
        return cls(**{name: getattr(spec, field) for name, field in cls.spec_fields().items()})

    @classmethod
    def spec_fields(cls) -> dict[str, str]:
        """{this family's setting: the spec field it is read from}."""
        shared = {f.name for f in fields(Settings)}
        return {f.name: f.name if f.name in shared else cls.prefix + f.name for f in fields(cls)}

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        return []

    def pool_cap(self, prompts: int) -> int:
        """The most responses one prompt can get in a step of `prompts` prompts: the pool arrays' width."""
        return self.n

    def group(self) -> str:
        """Responses per prompt in the update, as `repro methods` shows it."""
        return str(self.n)

    def knobs(self) -> str:
        """The few knobs that tell the family's methods apart, in words a reader of the papers recognises."""
        return ""


@dataclass(frozen=True, kw_only=True)
class UniformSettings(Settings):
    """GRPO: n responses per prompt, advantages (r - group mean) / (group std + epsilon)."""

    kind: ClassVar[str] = "uniform"
    norm_adv_by_std: bool

    def knobs(self) -> str:
        return "std-normalised group advantage" if self.norm_adv_by_std else "mean-centred group advantage"


@dataclass(frozen=True, kw_only=True)
class DapoSettings(UniformSettings):
    """DAPO: GRPO's groups, refilled with generation batches until enough of them are mixed."""

    kind: ClassVar[str] = "dapo"
    gen_batch_size: int | None
    max_num_gen_batches: int
    on_cap: str

    def knobs(self) -> str:
        return f"drop all-equal groups, <= {self.max_num_gen_batches} gen batches, at cap: {self.on_cap}"


@dataclass(frozen=True, kw_only=True)
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
    early_exit: str = "off"

    def problems(self) -> list[str]:
        out: list[str] = []
        if self.early_exit not in EARLY_EXITS:
            out.append(f"early_exit must be one of {', '.join(EARLY_EXITS)}, got {self.early_exit!r}")
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

    def knobs(self) -> str:
        schedule = "streaming" if self.streaming else "rounds"
        cut = {"off": "", "order": ", cut in request order", "first-returned": ", cut as returned"}
        return f"exit {self.exit_rule}, M={self.round_size} x N={self.max_rounds}, {schedule}{cut[self.early_exit]}"


@dataclass(frozen=True, kw_only=True)
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

    def group(self) -> str:
        return f"~{self.n_avg}"

    def knobs(self) -> str:
        if self.allocation == "inverse":
            return f"1 + rest ∝ 1/p, no cap, Beta({self.prior_alpha:g}, {self.prior_beta:g}) prior, no weight"
        return f"N in [{self.n_min}, {self.n_max}] ∝ 1/sqrt(p), w_max={self.w_max}"


@dataclass(frozen=True, kw_only=True)
class PodsSettings(Settings):
    """PODS (Xu et al. 2025, github YixuanEvenXu/pods): `generate` responses per prompt, the update on the
    n of them with the largest reward variance (`repro.sampling.pods`)."""

    kind: ClassVar[str] = "pods"
    prefix: ClassVar[str] = "pods_"
    n: int = 4  # m, the responses each prompt updates on
    generate: int = 16  # n in the paper: responses generated per prompt (pods-16-4, the cell)

    def problems(self) -> list[str]:
        if not 2 <= self.n <= self.generate:  # m = 1: the authors' unbiased std is NaN (undefined there)
            return [f"need 2 <= m <= n (kept n={self.n}, generated {self.generate})"]
        return []

    def pool_cap(self, prompts: int) -> int:
        return self.generate

    def knobs(self) -> str:
        return f"{self.generate} drawn, the {self.n} of largest reward variance kept"


@dataclass(frozen=True, kw_only=True)
class KnapsackSettings(Settings):
    """Knapsack RL (Li et al. 2025, github liziniu/KnapsackRL at ca5d5f5): every knob, defaults as in
    examples/knapsack_trainer/run_knapsack_grpo_7b.sh (SH) or the code (EU = exploration_utils.py,
    DS = rl_dataset.py); the rules are `repro.sampling.knapsack`'s."""

    kind: ClassVar[str] = "knapsack"
    prefix: ClassVar[str] = "knapsack_"
    n: int = 8  # rollout.n: the budget per prompt on average, and an unseen prompt's count (SH:38)
    min_n: int = 2  # an effective prompt's floor (SH:77)
    max_n: int = 128  # the knapsack's ceiling per prompt (SH:80); the fallback paths exceed it
    negative_n: int = 2  # p = 0 (SH:78)
    positive_n: int = 2  # p = 1 (SH:79)
    alpha: float = 0.9  # the cost check's confidence (EU:25; the script leaves the default)
    cost: str = "probability"  # or "expectation" (EU:33)
    allow_fallback: bool = True  # EU:29
    min_buffer_length: int = 8  # rollouts seen before a prompt's estimate is used (DS:124, SH:76)
    reward_buffer_length: int = 16  # the estimate's window (DS:125, SH:75)

    def problems(self) -> list[str]:
        out = []
        if not 1 <= self.min_n <= self.n:
            out.append(f"need 1 <= min_n <= n, got min_n={self.min_n}, n={self.n}")
        if self.max_n < self.min_n:
            out.append(f"max_n={self.max_n} must be >= min_n={self.min_n}")
        if not (0 <= self.negative_n <= self.n and 0 <= self.positive_n <= self.n):
            out.append("negative_n and positive_n must be within [0, n]: the budget would go negative")
        if not 0 < self.alpha < 1:
            out.append(f"alpha must be in (0, 1), got {self.alpha}")
        if self.cost not in ("probability", "expectation"):
            out.append(f"cost must be probability or expectation, got {self.cost!r}")
        if self.min_buffer_length < 0 or self.reward_buffer_length < 1:
            out.append("min_buffer_length must be >= 0 and reward_buffer_length >= 1")
        return out

    def pool_cap(self, prompts: int) -> int:
        """The fallback paths are not capped at max_n: one prompt can get all of the step's budget but the
        other prompts' floors; the whole budget bounds it."""
        return self.n * max(1, prompts)

    def group(self) -> str:
        return f"~{self.n}"

    def knobs(self) -> str:
        return (
            f"budget {self.n}/prompt by knapsack on p, N in [{self.min_n}, {self.max_n}], "
            f"p from the last {self.reward_buffer_length} outcomes"
        )


@dataclass(frozen=True, kw_only=True)
class GresoSettings(Settings):
    """GRESO ("Act only when it pays", github Infini-AI-Lab/GRESO at b277843): every knob, defaults as in
    train-scripts/math_qwen_7b_dm_greso.sh (L) or the code (RT = verl/trainer/ppo/ray_trainer.py); the rules
    are `repro.sampling.greso`'s."""

    kind: ClassVar[str] = "greso"
    prefix: ClassVar[str] = "greso_"
    n: int = 8  # rollout.n (L43)
    p_easy: float = 0.5  # data.p_easy: the initial keep factor of all-solved streaks (L19)
    p_hard: float = 0.5  # data.p_hard (L20)
    target_zero_variance: float = 0.25  # data.target_zero_variance (L21)
    min_p: float = 0.05  # data.min_p (RT:1203)
    max_p: float = 0.95  # data.max_p (RT:1204)
    # rounds in prompts as multiples of the step's update prompts, so a miniature keeps the authors' shape:
    sampling_batch_ratio: float = 1.5  # a round: 384 prompts (L22) for an update of 256 (L23, real_train_batch_size)
    min_sampling_batch_ratio: float = 0.25  # the smallest refill: 64 prompts (RT:1162, a constant there) of 256
    max_rounds: int = 10  # rounds a step may take (ours: the authors' loop ends with the epoch)

    def problems(self) -> list[str]:
        out = []
        if not 0 < self.min_p <= self.max_p < 1:
            out.append(f"need 0 < min_p <= max_p < 1, got {self.min_p}, {self.max_p}")
        for name in ("p_easy", "p_hard"):
            if not 0 < getattr(self, name) <= 1:
                out.append(f"{name} must be in (0, 1]")
        if not 0 <= self.target_zero_variance < 1:
            out.append("target_zero_variance must be in [0, 1)")
        if not 0 < self.min_sampling_batch_ratio <= self.sampling_batch_ratio or self.n < 2:
            out.append("need 0 < min_sampling_batch_ratio <= sampling_batch_ratio and n >= 2")
        if self.max_rounds < 1:
            out.append("max_rounds must be >= 1")
        return out

    def knobs(self) -> str:
        return (
            f"skip by history, keep factors -> {self.target_zero_variance:g} zero-variance, "
            f"rounds of {self.sampling_batch_ratio:g}x batch, drop all-equal groups"
        )

    def round_sizes(self, target: int) -> tuple[int, int]:
        """(the largest round, the smallest refill) in prompts for a step of `target` update prompts."""
        return max(1, round(self.sampling_batch_ratio * target)), max(1, round(self.min_sampling_batch_ratio * target))

    @property
    def targets(self) -> tuple[float, float]:
        """The zero-variance shares the factors steer to: (all-solved, all-format-only) (RT:298-299)."""
        return self.target_zero_variance / 3, self.target_zero_variance * 2 / 3


SETTINGS: dict[str, type[Settings]] = {
    cls.kind: cls
    for cls in (UniformSettings, DapoSettings, SeqSettings, EstSettings, PodsSettings, KnapsackSettings, GresoSettings)
}
