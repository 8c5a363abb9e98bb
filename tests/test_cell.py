"""The resolved cell (repro/cell.py): one object from the names a user typed, read back from a run folder.

Checked against the catalog's own tables, not against the resolver: every value a cell holds is the one the
catalog file gives for that backbone, method and preset, with the file's source; a config.yaml of either
engine, including the form run folders had before the cell existed, gives back the cell it was written for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from repro import catalog
from repro.cell import DEFAULT, ResolvedCell, resolve_cell
from repro.cell_config import build_cpu_config, verl_run
from repro.errors import ReproError
from repro.sweep import load_sweep

ROOT = Path(__file__).resolve().parents[1]
GPU = ("qwen2.5-math-1.5b", "qwen2.5-math-7b", "llama-3.2-3b-instruct", "qwen3-4b-instruct")


def test_every_paper_cell_holds_the_catalogs_records_and_values() -> None:
    paper = load_sweep(ROOT / "sweeps" / "paper.yaml")
    cells = paper.cells()
    assert len(cells) == 28 and len({c.name for c in cells}) == 28
    for cell in cells:
        key = cell.backbone.key
        assert cell.backbone == catalog.get_backbone(key) and cell.method == catalog.get_method(cell.method.key)
        assert cell.name == f"{key}__{cell.method.key}__{cell.prompt_set.key}__s{cell.seed}"
        assert cell.engine == "verl" and cell.template.key == cell.backbone.prompt_template
        assert cell.sampler == cell.method.sampler_spec(seed=cell.seed)  # the paper preset: the catalog's sampler
        assert dict(cell.resources) == catalog.gpu_resources(key) and not cell.device_overrides
        for name, setting in catalog.hyperparameters().items():
            assert cell.hp(name) == setting.value and cell.hyperparameters[name].source == setting.source
        assert cell.provenance["model"] == "sweep paper"


@pytest.mark.parametrize("backbone", GPU)
def test_the_released_preset_takes_each_released_value_and_sampler(backbone: str) -> None:
    for method in ("grpo-n4", "seq-balance", "est", "dapo"):
        cell = resolve_cell(backbone, method, preset="released")
        for name, setting in catalog.hyperparameters().items():
            expected = setting.value if setting.released is None else setting.released
            assert cell.hp(name) == expected, (backbone, method, name)
        script = catalog.released_script(cell.method.kind)
        assert cell.released_settings() == ({} if script is None else script.applied(cell.backbone))
    seq = resolve_cell(backbone, "seq-balance", preset="released").sampler
    assert seq.downsample == (catalog.get_method("seq-balance").sampler["downsample"].released or "first")
    est = resolve_cell(backbone, "est", seed=3, preset="released").sampler
    assert est == catalog.get_method("est-released").sampler_spec(seed=3)  # the released ray_trainer_ema.py
    assert resolve_cell(backbone, "dapo", preset="released").released is None  # no released DAPO script


def test_a_cpu_backbone_keeps_its_scaling_and_the_local_engine_ignores_the_preset() -> None:
    scaling = catalog.cpu_scaling("tiny-arith")
    for engine in ("local", "verl"):
        cell = resolve_cell("tiny-arith", "seq-balance", engine=engine, preset="released")
        assert {n: cell.hp(n) for n in scaling} == {n: s.value for n, s in scaling.items()}
        assert cell.released_settings() == {}  # a CPU rehearsal keeps the CPU scaling
    local = resolve_cell("tiny-arith", "est", preset="released")
    assert local.engine == "local" and local.sampler == catalog.get_method("est").sampler_spec(seed=0)
    verl = resolve_cell("tiny-arith", "seq-balance", engine="verl")
    resources, overrides = catalog.cpu_resources("tiny-arith")
    assert dict(verl.resources) == resources and dict(verl.device_overrides) == overrides


def test_async_and_provenance_say_where_each_value_came_from() -> None:
    cell = resolve_cell("tiny-arith", "seq-balance", asynchronous=True)
    assert cell.method.key == "seq-balance-async" and cell.method.asynchronous
    assert cell.schedule == {}  # the CPU trainer's async: verl's schedule is for verl cells
    verl = resolve_cell("qwen2.5-math-7b", "seq-balance-async", "hard", 2)
    assert (
        dict(verl.schedule) == catalog.async_schedule() and verl.name == "qwen2.5-math-7b__seq-balance-async__hard__s2"
    )
    lines = dict(line.split("  <- ") for line in cell.describe())
    assert lines["method=seq-balance-async"] == "command line (--async)"
    assert lines["prompt_set=standard"].startswith(DEFAULT)  # tiny-arith's own prompt set, nobody typed one
    assert lines["engine=local"] == f"{DEFAULT} (local for a cpu backbone)"
    assert lines["seed=0"] == "command line"


@pytest.mark.parametrize(
    ("kwargs", "line"),
    [
        ({"preset": "fast"}, "unknown preset 'fast'; valid presets: paper, released"),
        ({"engine": "tpu"}, "unknown engine 'tpu'; valid engines: local, verl"),
        ({"model": "qwen2.5-math-7b", "engine": "local"}, "qwen2.5-math-7b trains with verl on GPUs; drop --engine"),
        ({"model_path": "/m"}, "--model-path trains through verl's trainer; add --engine verl"),
        ({"prompt_set": "easy"}, "unknown prompt set 'easy'"),
    ],
)
def test_a_bad_name_is_one_line_naming_the_fix(kwargs: dict, line: str) -> None:
    args = {"model": "tiny-arith", "method": "seq-balance", **kwargs}
    with pytest.raises(ReproError) as err:
        resolve_cell(args.pop("model"), args.pop("method"), **args)
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


def test_a_cpu_runs_config_gives_back_its_cell(tiny_home) -> None:
    cell = resolve_cell("tiny-arith", "dapo-async", "hard", 2)
    config = build_cpu_config(cell, 5, 8).to_dict()
    assert ResolvedCell.from_config(config) == cell
    # the CPU trainer's config.yaml as run folders wrote it before the resolved cell existed: the same keys
    old = {"backbone": "tiny-arith", "method": "seq-balance", "prompt_set": "standard", "seed": 1, "path": "cpu"}
    back = ResolvedCell.from_config(old)
    assert back.name == "tiny-arith__seq-balance__standard__s1" and back.engine == "local"
    assert back.provenance["method"] == "the run folder's config.yaml"


def test_a_verl_runs_config_gives_back_its_cell(tmp_path, tiny_home) -> None:
    train = tmp_path / "t.parquet"
    import pandas as pd

    pd.DataFrame({"prompt": [[{"role": "user", "content": "1+1"}]] * 600}).to_parquet(train)
    for cell in (
        resolve_cell("qwen2.5-math-7b", "est", "hard", 1, preset="released"),
        resolve_cell("tiny-arith", "seq-balance-async", engine="verl"),
    ):
        spec = verl_run(cell, tmp_path / cell.name, train_file=train, val_file=train)
        assert ResolvedCell.from_config(spec.config) == cell
    # the user's weights, recorded as the local copy verl loads: the cell keeps the name it ran under
    weights = tmp_path / "snapshots" / "0123abcd"
    weights.mkdir(parents=True)
    (weights / "config.json").write_text("{}")
    config = {
        "cell": "qwen2.5-math-7b+my-sft__grpo-n4__standard__s0",
        "preset": "paper",
        "overrides": [],
        "backbone": "qwen2.5-math-7b",
        "model_path": str(weights),
    }
    back = ResolvedCell.from_config(config)
    assert back.name == config["cell"] and back.backbone.key == "qwen2.5-math-7b" and back.model_path == str(weights)
    with pytest.raises(ReproError, match="is not BACKBONE__METHOD__PROMPT_SET__sSEED"):
        ResolvedCell.from_config({"cell": "qwen2.5-math-7b__grpo-n4", "preset": "paper"})


@pytest.fixture
def tiny_home(tmp_path, monkeypatch) -> Path:
    """An empty $REPRO_HOME: resolving and configuring a cell writes nothing that a test shares."""
    home = tmp_path / "home"
    monkeypatch.setenv("REPRO_HOME", str(home))
    return home
