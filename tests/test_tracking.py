"""One `--logger` option for both engines: the CPU trainer's TensorBoard events carry the very values of its
durable metrics file, an unknown logger is one error line, and a sweep's `logger:` reaches every cell (the
CPU cell's `repro run` argv, the verl cell's trainer.logger and TENSORBOARD_DIR)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repro.cell_plan import plan_cell
from repro.cli import main
from repro.errors import ReproError
from repro.loggers import parse_loggers
from repro.rundir import cell_name
from repro.sweep import Sweep, load_sweep

TB_LOGGERS = "console,file,tensorboard"


def _metrics(run: Path) -> dict[int, dict]:
    lines = (run / "metrics" / "attempt-001.jsonl").read_text().splitlines()
    return {rec["step"]: rec["data"] for rec in map(json.loads, lines)}


def test_cpu_run_writes_tensorboard_scalars_equal_to_its_metrics_file(tiny_env, tmp_path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = ["run", "--model", "tiny-arith", "--method", "grpo-n4", "--steps", "3", "--batch", "8"]
    assert main([*args, "--runs-root", str(tmp_path), "--logger", TB_LOGGERS]) == 0
    run = tmp_path / cell_name("tiny-arith", "grpo-n4", "standard", 0)
    events = list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file under the run folder"
    accumulator = EventAccumulator(str(run / "tensorboard"))
    accumulator.Reload()
    metrics = _metrics(run)
    assert sorted(metrics) == [1, 2, 3]
    for key in ("critic/rewards/mean", "actor/entropy"):
        logged = {event.step: event.value for event in accumulator.Scalars(key)}
        assert sorted(logged) == [1, 2, 3], key
        for step, value in logged.items():
            assert value == pytest.approx(metrics[step][key], rel=1e-6, abs=1e-7), (key, step)
    attempt = json.loads((run / "status.json").read_text())["attempts"][-1]
    assert attempt["loggers"] == ["console", "file", "tensorboard"]
    assert "logger" not in (run / "config.yaml").read_text()  # a resume may change the loggers


def test_unknown_logger_is_one_error_line(tiny_env, tmp_path, capsys) -> None:
    args = ["run", "--model", "tiny-arith", "--method", "grpo-n4", "--runs-root", str(tmp_path)]
    assert main([*args, "--logger", "console,tensorbored", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "tensorbored" in err[0] and "tensorboard" in err[0]
    assert not any(tmp_path.iterdir())


def test_parse_keeps_console_and_file_and_wandb_flag_adds_wandb() -> None:
    assert parse_loggers("console,file") == ("console", "file")
    assert parse_loggers("tensorboard") == ("console", "file", "tensorboard")
    assert parse_loggers(["wandb", "tensorboard"]) == ("console", "file", "tensorboard", "wandb")
    assert parse_loggers("console,file", wandb=True) == ("console", "file", "wandb")
    with pytest.raises(ReproError, match="unknown logger 'mlflow'"):
        parse_loggers("mlflow")


def _sweep(tmp_path: Path, logger: str, engine: str = "local") -> Path:
    path = tmp_path / "tb.yaml"
    path.write_text(
        "name: tb\nbackbones: [tiny-arith, qwen2.5-math-1.5b]\nmethods: [grpo-n4]\nprompt_sets: [standard]\n"
        f"seeds: [0]\nengine: {engine}\nlogger: {logger}\n"
    )
    return path


def _cell(sweep: Sweep, backbone: str):
    """The sweep's own resolved cell of `backbone` with grpo-n4 on the standard set, seed 0."""
    name = cell_name(backbone, "grpo-n4", "standard", 0)
    return next(cell for cell in sweep.cells() if cell.name == name)


def _overrides(overrides: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in overrides)


def test_sweep_logger_reaches_every_cell(tiny_env, tmp_path) -> None:
    from repro.verl_plugin.config_builder import compose

    sweep = load_sweep(_sweep(tmp_path, "[console, file, tensorboard]"))
    assert sweep.loggers == ("console", "file", "tensorboard")
    cpu = plan_cell(_cell(sweep, "tiny-arith"), sweep, tmp_path / "runs")
    at = cpu.argv.index("--logger")
    assert cpu.argv[at + 1] == TB_LOGGERS
    assert "logger" not in json.dumps(cpu.config)
    gpu = plan_cell(_cell(sweep, "qwen2.5-math-1.5b"), sweep, tmp_path / "runs")
    values = _overrides(gpu.gpu.overrides)
    assert values["trainer.logger"] == "[console,file,tensorboard]"
    tb_dir = values["+ray_kwargs.ray_init.runtime_env.env_vars.TENSORBOARD_DIR"]
    assert tb_dir == str(gpu.run_dir / "tensorboard")
    cfg = compose(gpu.gpu.overrides)  # verl's own config takes both
    assert list(cfg.trainer.logger) == ["console", "file", "tensorboard"]
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars["TENSORBOARD_DIR"] == tb_dir


def test_sweep_logger_as_comma_string_on_the_verl_engine(tiny_env, tmp_path) -> None:
    sweep = load_sweep(_sweep(tmp_path, "console,file,tensorboard", engine="verl"))
    plan = plan_cell(_cell(sweep, "tiny-arith"), sweep, tmp_path / "runs")
    assert plan.argv[plan.argv.index("--logger") + 1] == TB_LOGGERS
    # the config the submission records is the one the job's `repro run --engine verl --logger ...` records
    assert _overrides(plan.config["overrides"])["trainer.logger"] == "[console,file,tensorboard]"


def test_sweep_without_logger_keeps_todays_argv_and_unknown_is_an_error(tiny_env, tmp_path) -> None:
    sweep = load_sweep(_sweep(tmp_path, "[console, file]"))
    plan = plan_cell(_cell(sweep, "tiny-arith"), sweep, tmp_path / "runs")
    assert "--logger" not in plan.argv
    gpu = plan_cell(_cell(sweep, "qwen2.5-math-1.5b"), sweep, tmp_path / "runs")
    assert not any("TENSORBOARD_DIR" in item for item in gpu.gpu.overrides)
    with pytest.raises(ReproError, match="unknown logger 'tb'"):
        load_sweep(_sweep(tmp_path, "[console, tb]"))
