"""Slurm scripts for the verl cells, written by `--dry-run` for the whole paper grid and checked as bash:
syntax, resources, the multi-node Ray bootstrap, and the trainer command against the config builder's."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from repro.cell import resolve_cell
from repro.cli import main
from repro.errors import ReproError
from repro.launch.attempt import PLACEHOLDER
from repro.launch.slurm import SlurmOptions
from repro.sweep import load_sweep
from repro.verl_plugin.config_builder import VerlCell, build_overrides, shell_command
from repro.weights_cache import job_env, local_weights

ROOT = Path(__file__).resolve().parents[1]


def _sbatch(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH --"):
            key, _, value = line[len("#SBATCH --") :].partition("=")
            out[key] = value
    return out


def _cell_command(text: str) -> list[str]:
    """The words of the command after the '# the cell' comment, continuation lines joined, as bash reads them
    (the command runs in the background, ` &`, so the script's traps can run while it trains)."""
    lines = text.split("# the cell", 1)[1].split("\n")[1:]
    end = next(i for i, line in enumerate(lines) if not line.endswith("\\"))
    command = "\n".join(lines[: end + 1]).replace("\\\n", " ")
    return shlex.split(command.removesuffix(" &"))


def _write_grid(tmp_path: Path, sweep_file: Path, *extra: str) -> Path:
    runs = tmp_path / "runs"
    code = main(["sweep", "run", str(sweep_file), "--launcher", "slurm", "--dry-run", "--runs-root", str(runs), *extra])
    assert code == 0
    return runs


def test_dry_run_writes_every_paper_cell_and_each_trainer_command_is_the_builders(
    tmp_path, monkeypatch, capsys
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("REPRO_HOME", str(home))
    runs = _write_grid(tmp_path, ROOT / "sweeps" / "paper.yaml", "--account", "acct1", "--partition", "gpu")
    # the checkpoint disk of the whole grid, once: per cell 12 saves (600 steps, a save every 50), the newest 2
    # whole (16 bytes a param) and 10 as bf16 weights (2 bytes a param), 7 methods of each of the 4 backbones
    from repro import catalog

    params = sum(catalog.get_backbone(b).param_count for b in load_sweep(ROOT / "sweeps" / "paper.yaml").backbones)
    whole, slim = 7 * params * 2 * 16, 7 * params * 10 * 2
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if "checkpoints, whole sweep" in x]
    assert f"28 GPU cell(s), {(whole + slim) / 1e12:.1f} TB on disk at most" in line, line
    assert f"({whole / 1e12:.1f} TB in the cells' newest whole saves, {slim / 1e12:.1f} TB in their older" in line
    folder = runs / ".launch" / "dry-run"
    scripts = sorted(p for p in folder.glob("*.sbatch") if not p.name.endswith(".eval.sbatch"))
    sweep = load_sweep(ROOT / "sweeps" / "paper.yaml")
    assert len(scripts) == len(sweep.cells()) == 28
    evals = sorted(folder.glob("*.eval.sbatch"))  # the evaluation stage: one job per cell, one node of 8 GPUs
    assert len(evals) == 28
    for path in evals:
        text = path.read_text()
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, text[:500]
        opts = _sbatch(text)
        assert opts["gpus-per-node"] == "8" and opts["account"] == "acct1" and opts["time"] == "12:00:00"
        words = " ".join(text.split("\\\n    ")).split()
        assert "eval" in words and words[words.index("--k") + 1] == "32"
        assert words[words.index("--checkpoints") + 1] == "all"
    assert not any(p.is_dir() and not p.name.startswith(".") for p in runs.iterdir())  # nothing prepared
    for cell in sweep.cells():
        backbone, prompt_set = cell.backbone.key, cell.prompt_set.key
        name = f"{backbone}__{cell.method.key}__{prompt_set}__s{cell.seed}"
        path = folder / f"{name}.sbatch"
        text = path.read_text()
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, text[:500]
        opts = _sbatch(text)
        assert opts["nodes"] == "1" and opts["gpus-per-node"] == "8" and opts["cpus-per-task"] == "64"
        assert opts["account"] == "acct1" and opts["partition"] == "gpu" and opts["time"] == "3-00:00:00"
        assert opts["output"] == f"{runs / name}/slurm/slurm-%j.out"
        assert "ray start" not in text  # one node: verl starts its own local Ray
        assert f"export REPRO_HOME={home}" in text and "export REPRO_LAUNCHER=slurm" in text
        words = _cell_command(text)
        assert words[:4] == ["python", "-m", "repro.launch.attempt", str(runs / name)] and words[4] == "--"
        run_dir = runs / name
        builder = VerlCell(
            resolve_cell(backbone, cell.method.key, prompt_set, cell.seed, preset="paper"),
            train_file=str(home / "data" / f"{backbone}-{prompt_set}" / "train.parquet"),
            val_file=str(home / "data" / f"{backbone}-{prompt_set}" / "val.parquet"),
            run_dir=run_dir,
            metrics_file=str(run_dir / "metrics" / PLACEHOLDER),
            model_path=local_weights(catalog.get_backbone(backbone).hf_id),  # the cached snapshot, if any
            env=job_env(),  # offline nodes (repro.weights_cache)
        )
        assert words[5:] == shlex.split(shell_command(build_overrides(builder))), name


def test_multi_node_cells_bootstrap_ray_across_the_allocation(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("REPRO_HOME", str(tmp_path / "home"))
    sweep_file = tmp_path / "two-nodes.yaml"
    sweep_file.write_text(
        "name: two-nodes\nbackbones: [qwen2.5-math-7b]\nmethods: [seq-balance]\nprompt_sets: [standard]\n"
        "overrides: {trainer.nnodes: 2}\nslurm: {account: from-file, time: '1-00:00:00', mem: '0'}\n"
    )
    runs = _write_grid(tmp_path, sweep_file, "--time", "12:00:00")
    path = runs / ".launch" / "dry-run" / "qwen2.5-math-7b__seq-balance__standard__s0.sbatch"
    text = path.read_text()
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    opts = _sbatch(text)
    assert opts["nodes"] == "2" and opts["ntasks-per-node"] == "1" and opts["gpus-per-node"] == "8"
    assert opts["account"] == "from-file" and opts["time"] == "12:00:00" and opts["mem"] == "0"  # flag beats file
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if "ray start --head" in line)
    worker = next(i for i, line in enumerate(lines) if 'ray start --address="$ray_address"' in line)
    wait = next(i for i, line in enumerate(lines) if "repro.launch.wait_ray" in line)
    export = lines.index('export RAY_ADDRESS="$ray_address"')
    trainer = next(i for i, line in enumerate(lines) if line.startswith("python -m repro.launch.attempt"))
    assert head < worker < wait < export < trainer
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text
    assert re.search(r'srun --nodes=1 --ntasks=1 --overlap -w "\$head_node" ray start --head', text)
    assert 'for node in "${nodes[@]:1}"; do' in text  # one worker per other node
    assert "--count 16" in lines[wait] and "--resource GPU" in lines[wait]  # 2 nodes x 8 GPUs
    assert "trainer.nnodes=2" in _cell_command(text)


def test_bootstrap_lines_run_under_bash_with_a_fake_allocation(tmp_path) -> None:
    """The bootstrap's node bookkeeping, executed: scontrol/srun/ray replaced by recorders on PATH."""
    from repro.launch.slurm import ray_bootstrap

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for tool in ("srun", "ray", "python"):
        (bin_dir / tool).write_text(f'#!/usr/bin/env bash\necho "{tool} $*" >> {log}\necho 10.0.0.1\n')
        (bin_dir / tool).chmod(0o755)
    (bin_dir / "scontrol").write_text("#!/usr/bin/env bash\nprintf 'n1\\nn2\\nn3\\n'\n")
    (bin_dir / "scontrol").chmod(0o755)
    script = tmp_path / "boot.sh"
    script.write_text(
        "set -euo pipefail\nSLURM_JOB_NODELIST=n[1-3]\nSLURM_CPUS_PER_TASK=4\nsleep() { :; }\n"
        + "\n".join(ray_bootstrap(3, 4))
        + '\nwait\necho "RAY_ADDRESS=$RAY_ADDRESS"\n'
    )
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "RAY_ADDRESS=10.0.0.1:6379"
    calls = log.read_text().splitlines()
    starts = [c for c in calls if c.startswith("srun") and "ray start" in c]
    assert len(starts) == 3
    assert sum("-w n1 ray start --head" in c for c in starts) == 1
    assert sorted(c.split(" -w ")[1].split()[0] for c in starts if "--address=10.0.0.1:6379" in c) == ["n2", "n3"]
    assert any(c.startswith("python -m repro.launch.wait_ray") and "--count 12" in c for c in calls)


@pytest.mark.parametrize(
    ("slurm", "fragment"),
    [
        ({"acount": "x"}, "unknown slurm options ['acount']"),
        ({"time": "three days"}, "is not a Slurm time"),
        ({"gpus_per_node": 0}, "must be a positive integer"),
        ({"extra": "--qos=high"}, "must be a list"),
    ],
)
def test_bad_slurm_options_are_one_line(slurm, fragment) -> None:
    with pytest.raises(ReproError, match=re.escape(fragment)):
        SlurmOptions.from_mapping(slurm, "sweep.yaml")


def test_unknown_launcher_is_exit_2(capsys) -> None:
    assert main(["sweep", "run", str(ROOT / "sweeps" / "tiny.yaml"), "--launcher", "kubernetes"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown launcher 'kubernetes'") and err.count("\n") == 1


def test_missing_scheduler_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys) -> None:
    tiny = str(ROOT / "sweeps" / "tiny.yaml")
    runs = str(tmp_path / "runs")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    assert main(["sweep", "run", tiny, "--launcher", "slurm", "--runs-root", runs]) == 2
    err = capsys.readouterr().err
    assert err == "error: sbatch is not on PATH; run the Slurm launcher on a Slurm login node\n"
    monkeypatch.undo()
    assert (
        main(["sweep", "run", tiny, "--launcher", "ray", "--ray-address", "http://127.0.0.1:9", "--runs-root", runs])
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach the Ray Jobs API at http://127.0.0.1:9") and err.count("\n") == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing prepared
