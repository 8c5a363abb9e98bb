"""`repro run`: one cell of the grid, from catalog to a finished run directory."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.progress import TextColumn

from repro import arithmetic
from repro.cell import MATCHED_SUFFIX, ResolvedCell, resolve_cell
from repro.cell_config import (
    build_cpu_config,
    check_model_path,
    fetch_hub_inputs,
    parse_sets,
    resolve_cpu_config,
    verl_run,
)
from repro.console import progress_bar, stderr_console, stdout_console
from repro.errors import ReproError
from repro.launch.plan import verl_size_sets
from repro.local.extend import check_reference, seed_from
from repro.loggers import DEFAULT as DEFAULT_LOGGERS
from repro.loggers import LOGGERS, parse_loggers
from repro.rundir import RunDir
from repro.rundir.pause import pause_at

DEFAULT_RUNS_ROOT = Path("runs")


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so the attempt is recorded as interrupted. A BaseException, like
    KeyboardInterrupt, so that no `except Exception` on the way (reward parsing, say) can swallow it."""


def _on_sigterm(signum, frame):
    # one is enough: a second TERM (scancel and a wrapper's forward, Slurm's time limit and a cancel) must not
    # cut short the record of the first, nor turn the exit that follows it into a death by signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Terminated()


def _where(moment: str) -> str:
    """A trainer's moment (`CpuTrainer.moment`: starting, step N, saving step N, after step N) in words."""
    if moment.startswith("step "):
        return f"during {moment}"
    if moment.startswith("after "):
        return moment
    return f"while {moment}"


def run(
    context: typer.Context,
    model: Annotated[str, typer.Option("--model", help="Backbone key (see `repro models`).")],
    method: Annotated[str, typer.Option("--method", help="Method key (see `repro methods`).")],
    prompt_set: Annotated[
        str | None, typer.Option("--prompt-set", help="standard or hard (default: the backbone's).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="RL seed: data order, sampling, sampler choices.")] = 0,
    steps: Annotated[int | None, typer.Option("--steps", min=1, help="Training steps (default: catalog).")] = None,
    batch: Annotated[int | None, typer.Option("--batch", min=1, help="Prompts per step (default: catalog).")] = None,
    until_tokens: Annotated[
        int | None,
        typer.Option(
            "--until-tokens",
            min=1,
            help="A generation budget: end at the first step whose cumulative generated tokens reach it (saved "
            "there); --steps is then only a cap. How a baseline is trained to another method's compute.",
        ),
    ] = None,
    extend: Annotated[
        Path | None,
        typer.Option(
            "--extend",
            help="Train on from this finished run's last checkpoint (same cell and settings), in a folder of its "
            "own (default: its name + __matched) that holds the whole longer run; with --until-tokens, a "
            "compute-matched baseline without retraining the steps it shares with that run.",
        ),
    ] = None,
    runs_root: Annotated[Path, typer.Option("--runs-root", help="Folder holding one folder per run.")] = (
        DEFAULT_RUNS_ROOT
    ),
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Exact run folder (default: RUNS_ROOT/CELL_NAME).")
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Start a finished run again (the old folder is kept aside).")
    ] = False,
    sets: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a training setting, e.g. --set lr=1e-3 (repeatable; see --dry-run)."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the resolved config and exit.")] = False,
    preset: Annotated[
        str, typer.Option("--preset", help="GPU runs: paper (default) or released (the released scripts' values).")
    ] = "paper",
    train_file: Annotated[
        Path | None, typer.Option("--train-file", help="GPU runs: verl Parquet of training prompts.")
    ] = None,
    val_file: Annotated[Path | None, typer.Option("--val-file", help="GPU runs: verl Parquet for validation.")] = None,
    logger: Annotated[
        str,
        typer.Option(
            "--logger",
            help=f"Experiment loggers, comma-separated from {', '.join(LOGGERS)}; both engines log through "
            "verl's Tracking. file is always kept: it is the run folder's durable metrics "
            "(metrics/attempt-NNN.jsonl, what `repro collect` reads). tensorboard writes RUN_DIR/tensorboard. "
            "On the CPU trainer the progress bar is the console logger (verl's console printer is not added).",
        ),
    ] = DEFAULT_LOGGERS,
    wandb: Annotated[
        bool, typer.Option("--wandb", help="Also log to Weights & Biases (the same as adding wandb to --logger).")
    ] = False,
    model_path: Annotated[
        str | None,
        typer.Option(
            "--model-path",
            help="Train these weights (a local Hugging Face folder or a Hub id) with the settings of the backbone "
            "--model names (its template, hyperparameters, resources); the cell is named MODEL+FOLDER_NAME.",
        ),
    ] = None,
    asynchronous: Annotated[
        bool,
        typer.Option(
            "--async",
            help="Beyond the paper: sample the next step while this one trains (importance-corrected); the same "
            "as --method METHOD-async. The CPU trainer samples one step ahead; verl runs its colocate_async "
            "trainer, staleness at most 2 steps (see --dry-run for each setting and its reason).",
        ),
    ] = False,
    require_flash_attn: Annotated[
        bool,
        typer.Option(
            "--require-flash-attn",
            help="GPU cells: fail when the node cannot import flash-attn, instead of running with sdpa "
            "(slower, same result; the default, said in the log, status.json and `repro status`).",
        ),
    ] = False,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="local (the CPU trainer) or verl (verl's real trainer, as on a cluster). "
            "Default: local for tiny-arith; GPU backbones always use verl.",
        ),
    ] = None,
) -> None:
    """Train one cell of the grid. tiny-arith trains on this CPU in minutes; an interrupted run resumes.

    The run folder (`runs/<model>__<method>__<prompt set>__s<seed>`) holds config.yaml, command.json,
    status.json, metrics/attempt-NNN.jsonl (verl's file-logger format) and checkpoints/. Running the same
    command again resumes an interrupted run from its last checkpoint and refuses to redo a finished one.

    Examples:

      repro run --model tiny-arith --method seq-balance

      repro run --model tiny-arith --method grpo-n4 --steps 20 --seed 1

      repro run --model tiny-arith --method grpo-n4 --until-tokens 800000 --steps 2000 --run-dir runs/n4-800k

      repro run --model tiny-arith --method grpo-n4 --extend runs/my-n4-run --until-tokens 800000 --steps 2000

      repro run --model tiny-arith --method est --dry-run

      repro run --model tiny-arith --method seq-balance --async   # sampling overlapped with the update

      repro run --model tiny-arith --method grpo-n4 --logger console,file,tensorboard   # tensorboard --logdir runs

      repro run --model tiny-arith --method seq-balance --engine verl --steps 3   # rehearse a cluster cell

      repro run --model tiny-arith --method seq-balance --engine verl --async --steps 4   # verl's colocate_async

      repro run --model qwen2.5-math-1.5b --method seq-balance --dry-run   # the verl command for a GPU cell

      repro run --model qwen2.5-math-7b --method grpo-n4 --model-path /ckpt/my-sft   # own weights, 7B settings

      repro run --model generic --model-path ORG/NAME --train-file train.parquet --method seq-balance   # any model

      repro run --model smollm2-135m-instruct --method seq-balance --engine verl --steps 2   # a real LLM on CPU

    GPU backbones run verl 0.9.1 with the Reinforce-Ada plugin (`pip install -e .[gpu]` on the GPU machine);
    `--set key=value` then takes dotted verl config keys.
    """
    loggers = parse_loggers(logger, wandb=wandb)
    cell = resolve_cell(
        model,
        method,
        prompt_set,
        seed,
        preset=preset,
        engine=engine,
        asynchronous=asynchronous,
        model_path=model_path,
        given=_typed(context, "seed", "preset"),
    )
    if cell.backbone.weights_from_user and (model_path is None or train_file is None):
        raise ReproError(
            f"{model} is the settings for a model the catalog does not know and has no weights or prompts of its "
            "own: add --model-path DIR_OR_HUB_ID and --train-file PARQUET"
        )
    if model_path is not None:
        check_model_path(model_path)
    if cell.engine != "verl" and (train_file is not None or val_file is not None):
        raise ReproError(
            "--train-file and --val-file are read by verl runs (GPU backbones, or --engine verl); the CPU trainer "
            "trains on the backbone's prompt set (`repro data filter` builds it): drop them, or add --engine verl"
        )
    path = run_dir or runs_root / (cell.name + (MATCHED_SUFFIX if extend is not None else ""))
    if extend is not None and cell.engine == "verl":
        raise ReproError("--extend is the CPU trainer's for now; on verl, resume the run with a larger --steps")
    if until_tokens is not None and cell.engine != "verl":
        sets = [*(sets or []), f"until_tokens={until_tokens}"]
    if cell.engine == "verl":
        verl_sets = {**parse_sets(sets or []), **verl_size_sets(steps, batch)}
        if until_tokens is not None:  # the plugin's trainer ends at the step reaching it (verl_plugin.stop_trainer)
            verl_sets["+trainer.until_tokens"] = until_tokens
        if require_flash_attn:
            from repro.stack_check import require_flash_attn as required

            verl_sets = required(verl_sets, [cell.backbone.key])
        _run_verl(cell, path, train_file, val_file, loggers, verl_sets, overwrite, dry_run)
        return
    if dry_run:
        config = build_cpu_config(cell, steps, batch, parse_sets(sets or []))
        stdout_console().print(f"# run folder: {path}\n# command: repro {' '.join(sys.argv[1:])}")
        typer.echo(_provenance(cell))
        typer.echo(yaml.safe_dump(config.to_dict(), sort_keys=False))
        return
    config, note = resolve_cpu_config(cell, steps, batch, parse_sets(sets or []))
    _train(cell, config, path, overwrite, note, loggers, extend)


def _typed(context: typer.Context, *names: str) -> set[str]:
    """Which of these options the user typed (the rest took their defaults): the cell's provenance says so."""
    return {n for n in names if getattr(context.get_parameter_source(n), "name", "DEFAULT") != "DEFAULT"}


def _provenance(cell: ResolvedCell) -> str:
    """The dry run's account of the cell: each name it was resolved from, and where that name came from."""
    return "\n".join(["# cell (each name <- where it came from):", *(f"#   {line}" for line in cell.describe())])


def _train(
    cell: ResolvedCell,
    config,
    path: Path,
    overwrite: bool,
    note: str | None,
    loggers: tuple[str, ...],
    extend: Path | None = None,
) -> None:
    from repro.cpu_lm.weights import ensure_built
    from repro.launch.allocations import STOPPED_EXIT, clear_stale_request, discard_request, stop_reason
    from repro.launch.attempt import allocation_from_env, launcher_from_env
    from repro.local.trainer import CpuTrainer, StopRequested
    from repro.tasks.tiny_arith import ensure_data

    err = stderr_console()
    # validate the run folder before spending a minute building anything
    reference = None if extend is None else check_reference(extend, config.to_dict())
    rundir = RunDir.prepare(path, config.to_dict(), ["repro", *sys.argv[1:]], overwrite=overwrite)
    if reference is not None:
        seeded = seed_from(rundir, reference)
        if seeded is not None:
            err.print(
                f"starting from {extend}'s checkpoint of step {seeded} (its metrics copied beside it)",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
    if note:
        err.print(note)
    ensure_data(config.data["data_seed"], backbone=config.backbone)
    ensure_built(cell.backbone)
    launcher, job_id = launcher_from_env()
    # the CPU and kernels this attempt computes with (the config holds the pinned arithmetic itself)
    extra = {"arithmetic": arithmetic.in_force(), **allocation_from_env()}
    metrics_path = rundir.begin_attempt(launcher=launcher, job_id=job_id, extra=extra)
    clear_stale_request(path, job_id)
    pause_at(path, "start")  # a rehearsal's moment: killed here, the attempt never got to its handler
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    trainer = None
    started = time.perf_counter()
    rewards: list[float] = []
    budget = config.train.until_tokens  # with a token budget the bar counts tokens, else steps
    total_steps = config.train.total_training_steps
    total = budget or total_steps
    try:
        with progress_bar(
            err,
            TextColumn("reward {task.fields[reward]:.3f}  samples/step {task.fields[samples]:.0f}"),
            transient=False,
        ) as progress:
            task = progress.add_task(path.name, total=total, reward=0.0, samples=0)

            def on_step(step: int, metrics: dict) -> None:
                rewards.append(metrics["sampler/first_draw_reward_mean"])
                progress.update(
                    task,
                    completed=trainer.tokens_generated if budget else step,
                    reward=metrics["sampler/first_draw_reward_mean"],
                    samples=metrics["sampler/responses_total"],
                )

            trainer = CpuTrainer(config, rundir, on_step=on_step, loggers=loggers)
            latest = trainer.rundir.latest_checkpoint()
            progress.update(task, completed=latest[0] if latest and not budget else 0)
            last = trainer.fit(metrics_path)
    except StopRequested as stop:  # the allocation is ending; the job script requeues on STOPPED_EXIT
        moment = "starting" if trainer is None or trainer.moment == "starting" else f"after step {stop.step}"
        rundir.end_attempt("interrupted", stop_reason(stop.step), moment=moment)
        err.print(f"stopped after step {stop.step} (checkpointed) for the next allocation; it resumes from {path}")
        raise typer.Exit(STOPPED_EXIT) from None
    except (KeyboardInterrupt, _Terminated):
        moment = "starting" if trainer is None else trainer.moment
        latest = rundir.latest_checkpoint()
        stands = f"the checkpoint of step {latest[0]} stands" if latest else "no checkpoint yet"
        rundir.end_attempt("interrupted", f"stopped by a signal {_where(moment)}; {stands}", moment=moment)
        err.print(f"interrupted; run the same command again to resume from {path}")
        raise typer.Exit(130) from None
    except BaseException as exc:
        rundir.end_attempt("failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:  # after a TERM, later ones stay ignored
            signal.signal(signal.SIGTERM, previous)
    discard_request(path)  # one that came during the last step: there is nothing left to stop
    rundir.end_attempt("finished", moment="finished")
    pause_at(path, "end")  # a rehearsal's moment: finished and recorded, the process not yet gone
    seconds = time.perf_counter() - started
    window = max(1, min(10, len(rewards) // 2))
    head = sum(rewards[:window]) / window if rewards else float("nan")
    tail = sum(rewards[-window:]) / window if rewards else float("nan")
    stdout_console().print(
        f"finished {path} at step {last} in {seconds:.0f}s; mean reward of each prompt's first draw over "
        f"{window} steps: {head:.3f} at the start of this attempt -> {tail:.3f} at the end"
    )
    if budget:
        reached = "reached" if trainer.budget_reached() else f"NOT reached at the --steps cap {total_steps}: raise it"
        stdout_console().print(f"token budget {budget:,} {reached} ({trainer.tokens_generated:,} generated)")


def _run_verl(
    cell: ResolvedCell,
    path: Path,
    train_file: Path | None,
    val_file: Path | None,
    loggers: tuple[str, ...],
    sets: dict,
    overwrite: bool,
    dry_run: bool,
) -> None:
    from functools import partial

    from repro.launch.attempt import run_attempt
    from repro.verl_plugin.config_builder import shell_command
    from repro.verl_plugin.preflight import verify_cell

    model = cell.backbone.key
    plan = partial(verl_run, cell, path, train_file=train_file, val_file=val_file, sets=sets, loggers=loggers)
    spec = plan()
    cfg, report = verify_cell(spec, cell, sets=sets)
    if dry_run:
        from omegaconf import OmegaConf

        from repro.verl_plugin.config_builder import async_report, released_report

        stdout_console().print(f"# run folder: {path}\n# command (attempt-NNN is numbered at launch):")
        typer.echo(shell_command(spec.overrides))
        typer.echo(_provenance(cell))
        if cell.preset == "released":  # each released value beside the script flag it comes from
            typer.echo("\n".join(f"# {line}" for line in released_report(cell, spec.overrides)))
        typer.echo("\n".join(f"# {line}" for line in async_report(cell, spec.overrides)))
        typer.echo("\n".join(["# preflight", *(f"#   {line}" for line in report.lines())]))
        if not cell.is_cpu:  # where the weights are, or what fetching them takes
            from repro.weights_cache import model_path_of, report_lines

            params = None if cell.model_path else cell.backbone.param_count  # the user's model: unknown
            items = {"--model-path" if cell.model_path else model: (model_path_of(spec.overrides) or "", params)}
            typer.echo("\n".join(f"# {line}" for line in report_lines(items)))
        typer.echo("# resolved verl config (composed against verl's ppo_trainer, validate_config passed):")
        typer.echo(OmegaConf.to_yaml(cfg))
        return
    if cell.is_cpu:
        _prepare_cpu_inputs(cell)
    elif report.needs is not None:  # this host is the node: its driver, CUDA and stack, before anything starts
        from repro.stack_check import failures, run_checks

        bad = failures(run_checks(report.needs, on_node=True))
        if bad:
            more = f" (and {len(bad) - 1} more: `--dry-run` lists them)" if len(bad) > 1 else ""
            raise ReproError(
                f"{model} cannot train on this host: {bad[0].detail}{more}; or --model tiny-arith on a CPU"
            )
    if not cell.is_cpu:  # the weights into the cache the jobs read offline
        from repro.weights_cache import fetch_all, model_path_of

        if fetch_all([model_path_of(spec.overrides) or ""], lambda line: stderr_console().print(line)):
            spec = plan()  # downloaded now: the cell points at the local snapshot, checked again
            cfg, report = verify_cell(spec, cell, sets=sets)
    fetch_hub_inputs(spec, cell.backbone, lambda line: stderr_console().print(line))
    for needed in spec.data_files:
        if not needed.exists():
            raise ReproError(
                f"{needed} does not exist; run `repro data filter --model {model}` or pass --train-file/--val-file"
            )
    if not overwrite:  # a run recorded with its weights elsewhere keeps them (repro.weights_cache)
        from repro.weights_cache import keep_recorded_spec

        spec = keep_recorded_spec(path, spec, lambda line: stderr_console().print(line))
    rundir = RunDir.prepare(path, spec.config, ["repro", *sys.argv[1:]], overwrite=overwrite)
    code = run_attempt(rundir, spec.trainer_argv(sys.executable or "python"))
    if code:
        raise typer.Exit(code)


def _prepare_cpu_inputs(cell: ResolvedCell) -> None:
    """A CPU rehearsal builds its model (unless `--model-path` gives one) and data on first use, as the
    local engine does."""
    from repro.cpu_lm.weights import ensure_built
    from repro.tasks.tiny_arith import ensure_data

    ensure_data(0, backbone=cell.backbone.key)
    if cell.model_path is None:
        ensure_built(cell.backbone)
