"""Compute nodes without the Hub (repro.weights_cache): a GPU cell's weights resolved into the Hugging Face cache at
submission, the local snapshot in verl's config and evaluation, the jobs offline, and one clear line when the
cache cannot be filled. The cache is real (tests/hf_cache.py: huggingface_hub's layout, real model files) and so
is every reader of it; nothing here reaches the network (HF_HUB_OFFLINE=1 throughout)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from cli_errors import one_error
from hf_cache import COMMIT, model_files, populate

from repro.cell import cell_name, resolve_cell
from repro.cell_plan import plan_cell
from repro.cli import main
from repro.errors import ReproError
from repro.sweep import Sweep, load_sweep

REPO = "Qwen/Qwen2.5-Math-7B"
BACKBONE = "qwen2.5-math-7b"
FAMILY = "qwen2.5-math-1.5b"  # tests/chat_tokenizers.py: the 7B shares its tokenizer and 4,096 positions
HUB_ID_WORD = re.compile(r"(?:^|=)[A-Za-z0-9][\w.-]*/[\w.-]+$")  # ORG/NAME as a whole word or a value


@pytest.fixture
def offline(tmp_path, monkeypatch) -> Path:
    """This machine as a compute node sees it: HF_HUB_OFFLINE=1, a private HF_HOME (empty), a private REPRO_HOME."""
    for name in ("HF_HUB_CACHE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("REPRO_HOME", str(tmp_path / "home"))
    return tmp_path / "hf"


@pytest.fixture
def cached(offline, tmp_path) -> Path:
    """The 7B backbone's snapshot in that cache (tiny real files); returns the snapshot folder."""
    return populate(offline / "hub", REPO, model_files(FAMILY, tmp_path / "files"))


def _sweep(tmp_path: Path, backbones: str = f"[{BACKBONE}]", methods: str = "[seq-balance]") -> Path:
    path = tmp_path / "offline.yaml"
    path.write_text(
        f"name: offline\nbackbones: {backbones}\nmethods: {methods}\nprompt_sets: [standard]\nseeds: [0]\n"
        "eval: {k: 4, checkpoints: final}\n"
    )
    return path


def _cell(sweep: Sweep, backbone: str = BACKBONE):
    """The sweep's own resolved cell of `backbone` with seq-balance on the standard set, seed 0."""
    name = cell_name(backbone, "seq-balance", "standard", 0)
    return next(cell for cell in sweep.cells() if cell.name == name)


def _exports(script: str) -> dict[str, str]:
    return {m[1]: shlex.split(m[2])[0] for m in re.finditer(r"^export (\w+)=(.*)$", script, re.M)}


def test_a_gpu_cell_trains_and_evaluates_from_the_local_snapshot_offline(cached, offline, tmp_path) -> None:
    from omegaconf import OmegaConf
    from ray.runtime_env.runtime_env import _merge_runtime_env

    from repro.launch.eval_stage import eval_argv, render_eval_script
    from repro.launch.ray_jobs import RayScheduler
    from repro.launch.slurm import SlurmOptions, render_script
    from repro.verl_plugin.config_builder import compose

    assert cached == offline / "hub" / "models--Qwen--Qwen2.5-Math-7B" / "snapshots" / COMMIT
    sweep = load_sweep(_sweep(tmp_path))
    plan = plan_cell(_cell(sweep), sweep, tmp_path / "runs")
    assert plan.name == "qwen2.5-math-7b__seq-balance__standard__s0"  # the backbone's name, not a --model-path label
    cfg = compose(plan.gpu.overrides)  # verl's own composition
    assert cfg.actor_rollout_ref.model.path == str(cached)
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars  # every Ray worker verl starts
    assert dict(env)["HF_HUB_OFFLINE"] == "1" and dict(env)["HF_HOME"] == str(offline)
    assert not any(REPO in item for item in plan.gpu.overrides)

    # Slurm: the training and the evaluation script export the offline cache; the trainer gets the snapshot
    train = render_script(plan, SlurmOptions(), sweep_name="offline", project_dir=tmp_path)
    evaluation = render_eval_script(
        plan.run_dir, plan.name, sweep.eval, SlurmOptions(), gpus=8, sweep_name="offline", project_dir=tmp_path
    )
    for script in (train, evaluation):
        assert {k: v for k, v in _exports(script).items() if k.startswith("HF_")} == {
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(offline),
        }
        assert REPO not in script
    assert f"actor_rollout_ref.model.path={cached}" in train
    words = eval_argv(plan.run_dir, sweep.eval)  # `repro eval RUN ...`: the run folder, options, numbers
    assert words[:4] == ["python", "-m", "repro.cli", "eval"] and Path(words[4]) == plan.run_dir.absolute()
    assert not [w for w in words if HUB_ID_WORD.search(w) and not Path(w).is_absolute()], words

    # Ray Jobs: the evaluation job's env is offline; the training job leaves those variables to verl's ray.init,
    # which Ray merges into the job's env (a variable in both is a conflict Ray refuses: _merge_runtime_env)
    ray = RayScheduler(project_dir=tmp_path)
    from repro.weights_cache import job_env

    assert ray.runtime_env("eval-1", hub_env=job_env())["env_vars"]["HF_HUB_OFFLINE"] == "1"
    job = ray.runtime_env("train-1")
    merged = _merge_runtime_env(job, OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env, resolve=True))
    assert merged is not None and merged["env_vars"]["HF_HOME"] == str(offline)
    assert merged["env_vars"]["REPRO_JOB_ID"] == "train-1"
    # ... and the evaluation it submits when it has trained gets the submitting machine's cache (its own env has none)
    import json

    from repro.launch.eval_stage import EVAL_REQUEST, write_request

    plan.run_dir.mkdir(parents=True)
    write_request(plan.run_dir, sweep.eval, ray, "offline", gpus=8)
    request = json.loads((plan.run_dir / EVAL_REQUEST).read_text())
    assert request["hub_env"] == {"HF_HUB_OFFLINE": "1", "HF_HOME": str(offline)}


def test_a_cpu_cell_is_unchanged(offline, tmp_path) -> None:
    from repro.launch.slurm import SlurmOptions, render_script

    sweep = load_sweep(_sweep(tmp_path, backbones="[tiny-arith]"))
    plan = plan_cell(_cell(sweep, "tiny-arith"), sweep, tmp_path / "runs")
    script = render_script(plan, SlurmOptions(), sweep_name="offline", project_dir=tmp_path)
    assert plan.gpu is None and not any(k.startswith("HF_") for k in _exports(script))


def test_an_incomplete_snapshot_is_not_taken_for_the_weights(offline, tmp_path) -> None:
    from repro.weights_cache import cached, fetch, local_weights

    files = model_files(FAMILY, tmp_path / "files")
    files["model.safetensors.index.json"] = b'{"weight_map": {"a": "model-00002-of-00002.safetensors"}}'
    populate(offline / "hub", REPO, files)
    assert cached(REPO) is None and local_weights(REPO) == REPO  # a shard the index names is missing
    with pytest.raises(ReproError, match=r"not in the Hugging Face cache .*HF_HUB_OFFLINE is set.*hf download"):
        fetch(REPO)


def test_offline_with_an_empty_cache_stops_the_submission_with_one_line(offline, tmp_path, capsys) -> None:
    runs = tmp_path / "runs"
    code = main(["sweep", "run", str(_sweep(tmp_path)), "--launcher", "local", "--runs-root", str(runs)])
    line = one_error(code, capsys.readouterr().err)
    assert f"the weights of {REPO} are not in the Hugging Face cache {offline / 'hub'}" in line
    assert "HF_HUB_OFFLINE is set" in line and f"hf download {REPO} --cache-dir {offline / 'hub'}" in line
    assert not runs.exists()  # nothing written


def test_the_batch_submission_fetches_first_and_writes_nothing_when_it_cannot(offline, tmp_path) -> None:
    from repro.sweep_submit import submit_sweep

    class Never:
        name = "slurm"

        def submit(self, plan, sweep_name):  # pragma: no cover - must not be reached
            raise AssertionError("submitted without the weights")

    runs = tmp_path / "runs"
    with pytest.raises(ReproError, match=f"the weights of {REPO} are not in the Hugging Face cache"):
        submit_sweep(load_sweep(_sweep(tmp_path)), Never(), runs, check_stack=False)
    assert not runs.exists()


def test_a_run_recorded_with_the_hub_id_keeps_it_and_other_changes_are_still_refused(offline, tmp_path) -> None:
    from repro.cell_config import verl_run
    from repro.rundir import RunDir
    from repro.weights_cache import keep_recorded_spec, model_path_of

    run, cell = tmp_path / "runs" / "cell", resolve_cell(BACKBONE, "seq-balance", "standard", 0)
    old = verl_run(cell, run)  # nothing cached yet: the Hub id
    assert model_path_of(old.overrides) == REPO
    old.config["overrides"] = [o for o in old.overrides if ".HF_" not in o]  # as recorded before the cache
    RunDir.prepare(run, old.config, ["repro"])
    snapshot = populate(offline / "hub", REPO, model_files(FAMILY, tmp_path / "files"))
    new = verl_run(cell, run)
    assert model_path_of(new.overrides) == str(snapshot)
    with pytest.raises(ReproError, match="different config"):
        RunDir.prepare(run, new.config, ["repro"])
    notes: list[str] = []
    kept = keep_recorded_spec(run, new, notes.append)
    assert model_path_of(kept.overrides) == REPO and kept.overrides == old.config["overrides"]
    assert notes == [f"note: cell keeps the weights it was started on: model.path={REPO} (a Hub id, which the "
                     "jobs resolve from the cache offline (HF_HUB_OFFLINE=1, HF_HOME))"]  # fmt: skip
    assert RunDir.prepare(run, kept.config, ["repro"]).path == run
    other = verl_run(cell, run, sets={"actor_rollout_ref.actor.optim.lr": 2e-6})
    assert keep_recorded_spec(run, other) is other  # a real change is not the weights' location: refused as ever
    with pytest.raises(ReproError, match="was made with a different config"):
        RunDir.prepare(run, other.config, ["repro"])


def test_a_submission_keeps_a_recorded_runs_weights_in_its_job_command(offline, tmp_path) -> None:
    from repro.rundir import RunDir
    from repro.weights_cache import keep_recorded_plan

    sweep = load_sweep(_sweep(tmp_path))
    cell = _cell(sweep)
    old = plan_cell(cell, sweep, tmp_path / "runs")  # submitted once with the Hub id (nothing cached then)
    RunDir.prepare(old.run_dir, old.config, ["repro"])
    snapshot = populate(offline / "hub", REPO, model_files(FAMILY, tmp_path / "files"))
    new = plan_cell(cell, sweep, tmp_path / "runs")
    assert f"actor_rollout_ref.model.path={snapshot}" in new.argv
    kept = keep_recorded_plan(new)
    assert kept.argv == old.argv and kept.gpu.overrides == old.gpu.overrides and kept.config == old.config
    assert f"actor_rollout_ref.model.path={REPO}" in kept.argv


def test_evaluation_of_the_base_model_reads_the_snapshot(cached, tmp_path) -> None:
    from repro.evaluation.runner import targets

    (target,) = targets(BACKBONE, False, runs_root=tmp_path / "runs")
    assert Path(target.model_path) == cached
    assert target.marker["weights"] == REPO  # the model is still named by its Hub id


def test_the_dry_run_lines_say_where_the_weights_are_or_what_the_download_is(cached, offline) -> None:
    from repro.weights_cache import describe, report_lines

    on_disk = sum(p.stat().st_size for p in cached.iterdir())  # each link's blob
    assert 1e3 < on_disk < 1e6
    assert describe(BACKBONE, str(cached), 7615616512).line() == (
        f"{BACKBONE}: {REPO} is cached at {cached} ({on_disk / 1e3:.1f} kB on disk); nothing to download"
    )
    lines = report_lines({"qwen2.5-math-1.5b": ("Qwen/Qwen2.5-Math-1.5B", 1543714304)})
    assert lines[1] == (
        f"  qwen2.5-math-1.5b: Qwen/Qwen2.5-Math-1.5B is not in the cache {offline / 'hub'}; the submission (or "
        "`repro run`) downloads it there first: about 3.1 GB to download (an estimate: 1,543,714,304 params x 2 "
        "bytes of bf16 safetensors; HF_HUB_OFFLINE is set). HF_HUB_OFFLINE is set here: the submission will stop "
        "until the cache holds it."
    )
    assert lines[-1].endswith(f"offline: HF_HUB_OFFLINE=1 HF_HOME={offline}")


def test_the_sweep_dry_run_shows_each_backbone_once(cached, offline, tmp_path, capsys) -> None:
    runs = tmp_path / "runs"
    sweep = _sweep(tmp_path, methods="[grpo-n4, seq-balance]")
    assert main(["sweep", "run", str(sweep), "--launcher", "slurm", "--dry-run", "--runs-root", str(runs)]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(rf"{BACKBONE}: {REPO} is cached at {cached} \([\d.]+ kB on disk\)", out)) == 1, out
    for path in (runs / ".launch" / "dry-run").glob("*.sbatch"):
        text = path.read_text()
        assert "export HF_HUB_OFFLINE=1" in text and REPO not in text
