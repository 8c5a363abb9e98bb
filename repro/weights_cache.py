"""A GPU cell's starting weights on compute nodes that cannot reach the Hugging Face Hub.

Many clusters' compute nodes have no outbound network, while verl passes `actor_rollout_ref.model.path`
through to every FSDP rank, vLLM server and reward worker, each of which would resolve a Hub id on its node.
So the weights are resolved where the cell is submitted (the login node usually has the network): a Hub id
becomes its snapshot in the Hugging Face cache (`$HF_HOME/hub/models--ORG--NAME/snapshots/<commit>`,
downloaded there on first use), a local folder the user gave (`--model-path`) stays as it is, and that local
folder is what verl and evaluation get. The jobs then run with `HF_HUB_OFFLINE=1` and the same `HF_HOME`,
so nothing on a node asks the Hub for anything; what the cache lacks fails at submission, in one line.

The cache is huggingface_hub's own (its `snapshot_download`, its layout and completeness check), so a copy
made by hand with `hf download ORG/NAME` is found the same way. A dry run downloads nothing: it says where
each backbone's snapshot is, or what the download will be.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.errors import ReproError
from repro.sizes import size_text

MODEL_PATH_KEY = "actor_rollout_ref.model.path"
ENV_VARS_PREFIX = "ray_kwargs.ray_init.runtime_env.env_vars."
# The one switch the installed libraries read: huggingface_hub 1.33 (constants.py) reads HF_HUB_OFFLINE, with
# TRANSFORMERS_OFFLINE only as its alias; transformers 5.10 asks huggingface_hub (is_offline_mode); datasets 5.2
# (config.py) uses HF_DATASETS_OFFLINE when set, else HF_HUB_OFFLINE; vLLM downloads through huggingface_hub
# (and gets a local folder anyway). HF_HOME says where that cache is, and is passed beside it.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1"}
HUB_ENV_NAMES = ("HF_HUB_OFFLINE", "HF_HOME", "HF_HUB_CACHE")
# What a cell loads from a model repository: its config, tokenizer and generation config (JSON, merges.txt,
# tokenizer.model, chat templates) and its safetensors weights; not the second copy of the weights some repos
# also ship (pytorch_model*.bin; Llama's original/consolidated.*.pth, 6 GB for the 3B model).
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja"]
IGNORE_PATTERNS = ["original/*"]
BF16_BYTES = 2  # the paper's checkpoints are bf16 safetensors: 2 bytes a parameter
HUB_TIMEOUT_S = 10.0  # a dry run asks the Hub for the file sizes once per backbone, and gives up after this
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_SNAPSHOT = re.compile(r".*/models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/[0-9a-f]{40}/?")
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's own reading of a boolean variable
QUOTES = "'\""  # around an override value that Hydra's grammar needed quoted


def hf_home() -> Path:
    """The Hugging Face home the jobs share: $HF_HOME, else huggingface_hub's default (~/.cache/huggingface,
    or under $XDG_CACHE_HOME), read when asked rather than when a library was imported, so a test or a wrapper
    script that sets it is followed."""
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(os.path.expandvars(home)).expanduser().absolute()


def hub_cache() -> Path:
    """Where model snapshots live: $HF_HUB_CACHE, else $HF_HOME/hub (huggingface_hub's rule)."""
    cache = os.environ.get("HF_HUB_CACHE")
    return Path(os.path.expandvars(cache)).expanduser().absolute() if cache else hf_home() / "hub"


def offline() -> bool:
    """True when this process must not reach the Hub (HF_HUB_OFFLINE, or its alias TRANSFORMERS_OFFLINE)."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in _TRUE


def job_env() -> dict[str, str]:
    """The environment of a GPU cell's jobs and of verl's Ray workers: offline, on this machine's cache (a
    path the nodes must share, as they share $REPRO_HOME)."""
    env = {**OFFLINE_ENV, "HF_HOME": str(hf_home())}
    if os.environ.get("HF_HUB_CACHE"):
        env["HF_HUB_CACHE"] = str(hub_cache())
    return env


def is_hub_id(source: str) -> bool:
    """ORG/NAME and no such local folder (a relative folder of that shape wins, as transformers decides)."""
    return bool(_HUB_ID.fullmatch(source)) and not Path(source).exists()


def source_of(path: str) -> str:
    """The Hub id a snapshot folder of the cache holds (models--ORG--NAME/snapshots/<commit>); any other
    value as it is. What names the weights in a comparison, wherever the cache is."""
    match = _SNAPSHOT.fullmatch(str(path))
    return f"{match['org']}/{match['name']}" if match else str(path)


def _complete(folder: Path) -> bool:
    """A folder transformers and vLLM can load: config.json and every weight file its index names."""
    from repro.model_files import missing_weights

    return (folder / "config.json").is_file() and missing_weights(folder) is None


def cached(repo_id: str) -> Path | None:
    """The complete local snapshot of `repo_id`'s main revision in the cache, or None. huggingface_hub's own
    lookup (refs/main, the snapshot folder, its record of the commit's files when it made the download),
    never the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(
            repo_id,
            cache_dir=hub_cache(),
            local_files_only=True,
            allow_patterns=ALLOW_PATTERNS,
            ignore_patterns=IGNORE_PATTERNS,
        )
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    return Path(folder) if _complete(Path(folder)) else None


def local_weights(source: str) -> str:
    """What `actor_rollout_ref.model.path` (and evaluation) gets for `source`: a local folder as it is,
    absolute; a Hub id's complete cached snapshot; else the Hub id itself (not fetched yet: a dry run, or a
    machine that downloads as it loads)."""
    if not is_hub_id(source):
        return str(Path(source).absolute()) if Path(source).exists() else source
    found = cached(source)
    return str(found) if found is not None else source


def _hand_copy(repo_id: str) -> str:
    patterns = " ".join(f"--include '{p}'" for p in ALLOW_PATTERNS)
    return f"`hf download {repo_id} --cache-dir {hub_cache()} {patterns} --exclude '{IGNORE_PATTERNS[0]}'`"


def fetch(source: str, say: Callable[[str], None] = lambda _line: None) -> tuple[str, bool]:
    """(the local folder of `source`, whether it was downloaded now). A Hub id not in the cache is
    downloaded into it, with huggingface_hub's progress bars on the console; offline, or without the Hub,
    that is one ReproError line naming the cache and how to fill it."""
    if not is_hub_id(source):
        return local_weights(source), False
    found = cached(source)
    if found is not None:
        return str(found), False
    target, by_hand = hub_cache(), _hand_copy(source)
    if offline():
        raise ReproError(
            f"the weights of {source} are not in the Hugging Face cache {target}, and HF_HUB_OFFLINE is set here, "
            f"so they cannot be downloaded; the compute nodes read them only from that cache: submit from a machine "
            f"that reaches the Hub (without HF_HUB_OFFLINE), or fill the cache there by hand with {by_hand}"
        )
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    say(f"downloading {source} into {target} (first use only; the jobs then read it offline)")
    try:
        folder = Path(
            snapshot_download(source, cache_dir=target, allow_patterns=ALLOW_PATTERNS, ignore_patterns=IGNORE_PATTERNS)
        )
    except GatedRepoError:
        raise ReproError(
            f"{source} is gated on the Hub: accept its licence at https://huggingface.co/{source}, log in "
            "(`hf auth login`), and submit again"
        ) from None
    except RepositoryNotFoundError:
        raise ReproError(f"{source} is not a model on the Hub (or is private); check the Hub id") from None
    except Exception as exc:
        why = " ".join(str(exc).split())[:200]
        raise ReproError(
            f"cannot download {source} into {target} ({type(exc).__name__}: {why}); the compute nodes read the "
            f"weights only from that cache: submit from a machine that reaches the Hub, or fill the cache by hand "
            f"with {by_hand}"
        ) from None
    if not _complete(folder):
        raise ReproError(f"{folder} holds no complete model after the download (config.json, weights); run it again")
    return str(folder), True


def model_path_of(overrides: Iterable[str]) -> str | None:
    """The `actor_rollout_ref.model.path` an override list gives verl (the last one wins, as in Hydra)."""
    found = None
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+") == MODEL_PATH_KEY:
            found = value.strip(QUOTES)
    return found


def fetch_all(sources: Iterable[str], say: Callable[[str], None] = lambda _line: None) -> bool:
    """Every distinct Hub id of `sources` into the cache (each once); True when any was downloaded now, so
    the caller plans its cells again on the local snapshots."""
    downloaded = False
    for source in dict.fromkeys(s for s in sources if s):
        downloaded |= fetch(source, say)[1]
    return downloaded


def fetch_benchmarks(spec: Any, say: Callable[[str], None] = lambda _line: None) -> None:
    """The Hub benchmarks a GPU cell's evaluation job will load (a sweep's `eval:`), loaded here once so they
    are in the cache: that job runs offline, where `datasets` reads the copy cached under $HF_HOME."""
    from repro.evaluation import benchmarks as bench

    try:
        names = [n for n in bench.resolve(spec.benchmarks, backbone_is_tiny=False) if n in bench.sources()]
        if names:
            say(f"loading the evaluation benchmarks {', '.join(names)} into {hf_home()} (the jobs read them offline)")
        for name in names:
            bench.load_benchmark(name)
    except ReproError as exc:
        raise ReproError(f"the evaluation jobs run offline and read their benchmarks from {hf_home()}: {exc}") from None


# ---- a run folder recorded with the weights elsewhere ------------------------------------------------------


def _located(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with where the weights sit taken out: model.path (and a `--model-path` run's model_path)
    named by the Hub id a snapshot holds, and the offline-Hub variables dropped. Two configs equal here train
    the same weights the same way."""
    out = dict(config)
    overrides = []
    for item in config.get("overrides") or []:
        key, sep, value = str(item).partition("=")
        plain = key.lstrip("+")
        if sep and plain.startswith(ENV_VARS_PREFIX) and plain[len(ENV_VARS_PREFIX) :] in HUB_ENV_NAMES:
            continue
        if sep and plain == MODEL_PATH_KEY:
            item = f"{key}={source_of(value.strip(QUOTES))}"
        overrides.append(item)
    out["overrides"] = overrides
    if isinstance(out.get("model_path"), str):
        out["model_path"] = source_of(out["model_path"])
    return out


def recorded_config(run_dir: Path, config: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The config `RunDir.prepare` should compare, and a note. A run folder whose recorded config differs from
    `config` only in where the same weights sit (recorded with the Hub id before the cache was used, or on an
    older snapshot of the same model) keeps its own record, weights included: it is neither refused nor
    silently moved onto other weights, and the note says so. Anything else is `config` unchanged."""
    import yaml

    from repro.rundir.config_diff import normalise

    try:
        recorded = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return dict(config), None
    new = normalise(dict(config))
    if not isinstance(recorded, dict) or recorded == new or _located(recorded) != _located(new):
        return dict(config), None
    kept = model_path_of(recorded.get("overrides") or []) or "?"
    if not is_hub_id(kept) and not Path(kept).is_dir():
        raise ReproError(
            f"run {run_dir} was started on the weights in {kept}, which are gone; put that snapshot back (the same "
            f"Hub revision of {source_of(kept)}) or start the run over with --overwrite"
        )
    how = (
        "a Hub id, which the jobs resolve from the cache offline (HF_HUB_OFFLINE=1, HF_HOME)"
        if is_hub_id(kept)
        else "that snapshot"
    )
    note = f"note: {Path(run_dir).name} keeps the weights it was started on: model.path={kept} ({how})"
    return recorded, note


def keep_recorded_spec(run_dir: Path, spec: Any, say: Callable[[str], None] = lambda _line: None) -> Any:
    """`recorded_config` for a `VerlRun`: the same spec, or one whose config and trainer overrides are the run
    folder's own record."""
    config, note = recorded_config(run_dir, spec.config)
    if note is None:
        return spec
    say(note)
    return dataclasses.replace(spec, config=config, overrides=list(config["overrides"]))


def keep_recorded_plan(plan: Any, say: Callable[[str], None] = lambda _line: None) -> Any:
    """`keep_recorded_spec` for a launcher's `CellPlan` (its config, its job's command and its spec)."""
    if plan.gpu is None:
        return plan
    spec = keep_recorded_spec(plan.run_dir, plan.gpu, say)
    if spec is plan.gpu:
        return plan
    head = plan.argv[: len(plan.argv) - len(plan.gpu.overrides)]  # the trainer's overrides end the command
    return dataclasses.replace(plan, config=spec.config, argv=[*head, *spec.overrides], gpu=spec)


# ---- what a dry run says -------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightsReport:
    """Where one backbone's starting weights are, or what fetching them will take (a dry run's line)."""

    label: str  # the backbone key (or --model-path) the line is about
    source: str  # the Hub id, or the local folder the user gave
    folder: Path | None  # the local folder verl gets: the cached snapshot or the user's; None while not cached
    size: int | None  # bytes: on disk when local, to download otherwise; None when unknown
    how: str  # where the size comes from

    def line(self) -> str:
        shown = "size unknown" if self.size is None else size_text(self.size)
        if self.how.startswith("an estimate"):
            shown = f"about {shown}"
        if self.folder is not None and self.source != str(self.folder):
            return f"{self.label}: {self.source} is cached at {self.folder} ({shown} on disk); nothing to download"
        if self.folder is not None:
            return (
                f"{self.label}: the local folder {self.folder} ({shown} on disk) is passed as it is; nothing to "
                "download (the nodes must see the same path)"
            )
        stop = " HF_HUB_OFFLINE is set here: the submission will stop until the cache holds it." if offline() else ""
        return (
            f"{self.label}: {self.source} is not in the cache {hub_cache()}; the submission (or `repro run`) downloads "
            f"it there first: {shown} to download ({self.how}).{stop}"
        )


def _on_disk(folder: Path) -> int:
    """Bytes of a model folder's files, each blob once (a cache snapshot's files are links to its blobs)."""
    seen: dict[str, int] = {}
    for path in folder.rglob("*"):
        if path.is_file():
            seen.setdefault(os.path.realpath(path), path.stat().st_size)
    return sum(seen.values())


def _hub_size(repo_id: str) -> int | None:
    """The bytes `fetch` would download, from the Hub's file list (one request, HUB_TIMEOUT_S), or None when
    the Hub does not answer (offline, no network, gated)."""
    if offline():
        return None
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.utils import filter_repo_objects

        info = HfApi().model_info(repo_id, files_metadata=True, timeout=HUB_TIMEOUT_S)
        files = {s.rfilename: s.size for s in info.siblings or []}
        wanted = filter_repo_objects(files, allow_patterns=ALLOW_PATTERNS, ignore_patterns=IGNORE_PATTERNS)
        sizes = [files[name] for name in wanted]
    except Exception:
        return None
    return None if any(s is None for s in sizes) else int(sum(sizes))


def describe(label: str, source: str, param_count: int | None) -> WeightsReport:
    """What a dry run says of one backbone's weights; `source` is the model.path the cell has now (a Hub id,
    its cached snapshot, or a local folder). Nothing is downloaded."""
    hub_id = source_of(source)
    if not is_hub_id(hub_id):  # the user's own folder (--model-path)
        folder = Path(source).absolute()
        if not folder.is_dir():
            return WeightsReport(label, source, None, None, "no such folder")
        return WeightsReport(label, str(folder), folder, _on_disk(folder), "on disk")
    found = cached(hub_id)
    if found is not None:
        return WeightsReport(label, hub_id, found, _on_disk(found), "on disk")
    size = _hub_size(hub_id)
    if size is not None:
        return WeightsReport(label, hub_id, None, size, "the Hub's file sizes")
    if param_count:
        why = "HF_HUB_OFFLINE is set" if offline() else "the Hub did not answer"
        how = f"an estimate: {param_count:,} params x {BF16_BYTES} bytes of bf16 safetensors; {why}"
        return WeightsReport(label, hub_id, None, param_count * BF16_BYTES, how)
    return WeightsReport(label, hub_id, None, None, "no parameter count in the catalog and no answer from the Hub")


def report_lines(items: Mapping[str, tuple[str, int | None]]) -> list[str]:
    """The dry run's weights block: one line per backbone ({label: (model.path now, param count)}), the
    total to download, and the environment the jobs get."""
    reports = [describe(label, source, params) for label, (source, params) in items.items()]
    lines = ["weights (actor_rollout_ref.model.path; a dry run downloads nothing):"]
    lines += [f"  {r.line()}" for r in reports]
    pending = [r for r in reports if r.folder is None]
    if len(pending) > 1:
        known = sum(r.size or 0 for r in pending)
        about = "about " if any(r.how.startswith("an estimate") for r in pending) else ""
        lines.append(f"  to download at submission: {about}{size_text(known)} in all")
    env = " ".join(f"{k}={v}" for k, v in job_env().items())
    lines.append(f"  the jobs (and verl's Ray workers) read weights and data sets offline: {env}")
    return lines


def plans_report_lines(plans: Iterable[Any]) -> list[str]:
    """`report_lines` for a sweep's plans: one line per GPU backbone, however many cells it has."""

    items: dict[str, tuple[str, int | None]] = {}
    for plan in plans:
        if plan.gpu is not None and plan.cell.backbone.key not in items:
            params = plan.cell.backbone.param_count
            items[plan.cell.backbone.key] = (model_path_of(plan.gpu.overrides) or "", params)
    return report_lines(items) if items else []
