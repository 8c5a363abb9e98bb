"""`repro eval`'s processes: one that generates and grades everything itself, a shard's child that does its share,
and the parent of a sharded evaluation that runs the children and folds their records into what a single
process writes."""

from __future__ import annotations

import os
from collections import Counter

from repro import arithmetic
from repro.commands.evaluate_plan import _Plan, _Settings
from repro.console import progress_bar
from repro.errors import ReproError


def _asked(problems: dict) -> list[str]:
    """Every problem text of the evaluation (vLLM's context fits the longest, in every shard alike)."""
    return [p.problem for items in problems.values() for p in items]


def _evaluate_single(tgt, problems: dict, settings: _Settings, plan: _Plan, timeout: float, ks, err) -> dict:
    """One process: the generator loaded here, every benchmark in turn, records appended problem by problem."""
    from repro.evaluation import shards as sharding
    from repro.evaluation.grading import Grader
    from repro.evaluation.runner import evaluate_benchmark, summarise

    for name, items in problems.items():  # what a killed sharded run finished is not generated again
        main_file = tgt.out_dir / f"{name}.jsonl"
        sharding.fold(items, settings.k, main_file, sharding.shard_record_files(tgt.out_dir, name))
    generator = _load(plan.backend, tgt.model_path, plan.tokens, plan.template, _asked(problems), plan.tp)
    k = settings.k
    total = sum(len(p) for p in problems.values()) * k
    by_bench: dict[str, list[dict]] = {}
    with Grader(timeout_s=timeout) as grader, progress_bar(err) as progress:
        task = progress.add_task(f"eval {tgt.label} (problems x samples)", total=total)
        for name, items in problems.items():
            by_bench[name] = evaluate_benchmark(
                items,
                k,
                generator,
                grader,
                tgt.out_dir / f"{name}.jsonl",
                settings.seed,
                on_problems=lambda count, task=task: progress.advance(task, count * k),
                grading=settings.mode(name),
            )
        summary = summarise(by_bench, k, ks, tgt.tiny, dict(grader.counts()))
    summary["generation"] = _generation(plan.generation(generator), settings)
    return summary


def _generation(generation: dict, settings: _Settings) -> dict:
    if settings.first_problems:
        generation["first_problems"] = settings.first_problems  # a sizing run: not the whole benchmark
    return generation


class _NothingToGenerate:
    """The generator of a process with nothing left to generate: a call means records went missing."""

    def generate(self, problems, n: int, seed: int) -> list[list[str]]:
        raise ReproError(f"{len(problems)} problem(s) have no records after every shard finished; rerun to resume")


def _evaluate_share(
    tgt, problems: dict, settings: _Settings, plan: _Plan, timeout: float, index: int, count: int
) -> None:
    """A child: its share of every benchmark that the merged records lack, into its own shard files; then
    its grading counts and generation facts for the parent's summary. No model is loaded when the share is
    already complete (a vLLM start costs a minute)."""
    from repro.evaluation import shards as sharding
    from repro.evaluation.grading import Grader
    from repro.evaluation.runner import complete_problems, evaluate_benchmark, read_records

    if plan.backend == "transformers" and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        import torch

        torch.set_num_threads(arithmetic.threads(max(1, int(os.environ["OMP_NUM_THREADS"]))))
    k = settings.k
    todo: dict[str, list] = {}
    pending = 0
    for name, items in problems.items():
        merged = complete_problems(read_records(tgt.out_dir / f"{name}.jsonl")[0], k)
        todo[name] = [p for p in sharding.share(items, index, count) if p.problem_id not in merged]
        mine = complete_problems(read_records(sharding.record_file(tgt.out_dir, name, index, count))[0], k)
        pending += sum(p.problem_id not in mine for p in todo[name])
    generator = (
        _load(plan.backend, tgt.model_path, plan.tokens, plan.template, _asked(problems), plan.tp)
        if pending
        else _NothingToGenerate()
    )
    with Grader(timeout_s=timeout) as grader:
        for name, items in todo.items():
            evaluate_benchmark(
                items,
                k,
                generator,
                grader,
                sharding.record_file(tgt.out_dir, name, index, count),
                settings.seed,
                grading=settings.mode(name),
            )
        counts = dict(grader.counts())
    meta = {"shard": index, "shards": count, "problems_generated": pending, "grading_counts": counts}
    sharding.write_meta(tgt.out_dir, index, count, meta | {"generation": plan.generation(generator)})


def _evaluate_sharded(
    tgt, problems: dict, settings: _Settings, plan: _Plan, count: int, args: list[str], timeout: float, ks, err
) -> dict:
    """N children, each its share (`_evaluate_share`), then their records folded into `<benchmark>.jsonl`
    and the summary a single process writes, its grading counts the children's summed."""
    from repro.evaluation import shards as sharding
    from repro.evaluation.grading import Grader
    from repro.evaluation.runner import complete_problems, evaluate_benchmark, read_records, summarise

    k = settings.k
    main = {name: tgt.out_dir / f"{name}.jsonl" for name in problems}
    for name, items in problems.items():  # a killed run's finished problems, whatever its N, are kept
        sharding.fold(items, k, main[name], sharding.shard_record_files(tgt.out_dir, name))
    sharding.remove_metas(tgt.out_dir)
    already = sum(
        len(complete_problems(read_records(main[name])[0], k) & {p.problem_id for p in items})
        for name, items in problems.items()
    )
    counter = sharding.LineCounter(
        [sharding.record_file(tgt.out_dir, name, i, count) for name in problems for i in range(count)]
    )
    gpus = sharding.visible_gpus() if plan.gpu else []
    total = sum(len(p) for p in problems.values()) * k
    with progress_bar(err) as progress:
        task = progress.add_task(f"eval {tgt.label} ({count} shards, problems x samples)", total=total)
        sharding.run_children(
            [sharding.child_command(args, i, count) for i in range(count)],
            [sharding.child_env(i, count, plan.tp, gpus, plan.engine) for i in range(count)],
            [sharding.log_file(tgt.out_dir, i) for i in range(count)],
            f"{tgt.label} ({tgt.out_dir})",
            on_poll=lambda: progress.update(task, completed=min(total, already * k + counter.total())),
        )
    metas = sharding.read_metas(tgt.out_dir, count)
    by_bench: dict[str, list[dict]] = {}
    with Grader(timeout_s=timeout) as grader:
        for name, items in problems.items():
            missing = sharding.fold(items, k, main[name], sharding.shard_record_files(tgt.out_dir, name))
            if missing:
                raise ReproError(
                    f"{name}: {len(missing)} problem(s) (first {missing[0]!r}) have no {k} records after every "
                    f"shard finished; see the logs in {tgt.out_dir / sharding.SHARDS_DIR} and rerun to resume"
                )
            # nothing is generated here; records graded under another mode are re-graded, as a single run does
            by_bench[name] = evaluate_benchmark(
                items, k, _NothingToGenerate(), grader, main[name], settings.seed, grading=settings.mode(name)
            )
        counts = Counter(dict(grader.counts()))
    for meta in metas:
        counts.update(meta.get("grading_counts", {}))
    sharding.remove_metas(tgt.out_dir)
    summary = summarise(by_bench, k, ks, tgt.tiny, dict(counts))
    generation = plan.generation()
    for meta in metas:  # vLLM's context, as the children computed it (the same in each: same problems)
        for key in ("max_model_len", "max_model_len_reason"):
            if key in meta.get("generation", {}):
                generation[key] = meta["generation"][key]
    generation["shards"] = count
    if plan.gpu:
        generation["gpus_per_shard"] = plan.tp
    summary["generation"] = _generation(generation, settings)
    return summary


def _load(backend: str, model_path, tokens: int, template, asked: list[str], tp: int = 1):
    """The generator, or one line naming the folder when its files do not load (a torn config.json, a
    truncated safetensors file): transformers and safetensors would otherwise end the command in a traceback."""
    from repro.evaluation.backends import make_generator

    try:
        return make_generator(backend, model_path, tokens, template, problems=asked, tensor_parallel_size=tp)
    except ReproError:
        raise
    except Exception as exc:
        reason = " ".join(str(exc).split())[:240] or type(exc).__name__
        raise ReproError(
            f"cannot load the model in {model_path} ({type(exc).__name__}: {reason}); check that the folder is a "
            "complete Hugging Face model (config.json, tokenizer files, weights) or evaluate another checkpoint"
        ) from exc
