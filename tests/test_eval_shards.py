"""`repro eval --shards N` on the CPU with the tiny model: the merged records and summary equal one process's
for the same seed; a killed shard resumes without regenerating what it finished; a failing shard is one line
naming it and its log; one `repro eval` at a time per eval folder; `--checkpoints` picks a run's steps."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from repro.cli import main
from repro.evaluation import shards
from repro.evaluation.runner import read_records, targets

BENCHMARKS = ("tiny-aime", "tiny-minerva")
FIRST = 12  # the first 12 problems of each (--first-problems): a shard's start-up, not generation, is the cost
K = 2


def _model(tiny_home: Path) -> Path:
    return next(p for p in (tiny_home / "models").iterdir() if (p / "config.json").is_file())


def _argv(model: Path, out: Path, *extra: str) -> list[str]:
    common = ["--benchmarks", ",".join(BENCHMARKS), "--k", str(K), "--pass-k", "1,2", "--out", str(out)]
    common += ["--first-problems", str(FIRST)]
    return ["eval", str(model), *common, *extra]


def _records(out: Path) -> dict[str, list[dict]]:
    found = {name: read_records(out / f"{name}.jsonl") for name in BENCHMARKS}
    assert all(bad == 0 for _, bad in found.values())
    return {name: records for name, (records, _) in found.items()}


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def evaluated(tiny_home, tmp_path_factory):
    """The tiny model evaluated once in one process and once in two shards, same seed."""
    root = tmp_path_factory.mktemp("eval_shards")
    model = _model(tiny_home)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("REPRO_HOME", str(tiny_home))
        assert main(_argv(model, root / "one", "--shards", "1")) == 0
        assert main(_argv(model, root / "two", "--shards", "2")) == 0
    return model, root


def test_two_shards_write_the_records_and_summary_of_one_process(evaluated) -> None:
    _, root = evaluated
    one, two = _records(root / "one"), _records(root / "two")
    assert {name: len(r) for name, r in two.items()} == {"tiny-aime": FIRST * K, "tiny-minerva": FIRST * K}
    assert two == one  # same responses, scores and order (problem order, then sample order)
    keys = [(r["problem_id"], r["sample_index"]) for r in two["tiny-aime"]]
    assert keys == [(pid, j) for pid in dict.fromkeys(k[0] for k in keys) for j in range(K)]
    s1, s2 = _summary(root / "one"), _summary(root / "two")
    assert s2.pop("generation") == {**s1.pop("generation"), "shards": 2}
    assert s2 == s1  # Ave@k, pass@k, weighted average, grading counts, sources: all the same
    assert sum(s2["grading"].values()) == 2 * FIRST * K
    left = sorted(p.name for p in (root / "two" / "shards").iterdir())
    assert left == ["shard-0.log", "shard-1.log"]  # records folded in, only the logs stay


def test_a_killed_shard_resumes_without_regenerating_finished_problems(evaluated, tiny_env, tmp_path) -> None:
    model, root = evaluated
    reference = _records(root / "one")
    out = tmp_path / "killed"
    for i in (0, 1):  # both children as a run would start them, in this process
        assert main(_argv(model, out, "--shard", f"{i}/2")) == 0
    kept: dict[str, str] = {}
    for i in (0, 1):
        path = shards.record_file(out, "tiny-aime", i, 2)
        lines = path.read_text().splitlines()
        # mark one finished problem's responses: a regenerated problem would lose the mark
        first = json.loads(lines[0])
        kept[first["problem_id"]] = f"kept by shard {i}"
        lines = [
            json.dumps({**r, "response": kept[first["problem_id"]]}) if r["problem_id"] == first["problem_id"] else line
            for line, r in ((x, json.loads(x)) for x in lines)
        ]
        if i == 1:  # shard 1 was killed: 3 of its 6 problems on disk, the next half-written
            lines = lines[: 3 * K + 1]
            lines[-1] = lines[-1][:25]
        path.write_text("\n".join(lines) + ("" if i == 1 else "\n"))
    assert main(_argv(model, out, "--shards", "2")) == 0
    records = _records(out)
    summary = _summary(out)
    assert sum(summary["grading"].values()) == (FIRST // 2 - 3) * K  # only the killed shard's missing problems
    for name, recs in records.items():
        assert [(r["problem_id"], r["sample_index"]) for r in recs] == [
            (r["problem_id"], r["sample_index"]) for r in reference[name]
        ]
        for got, want in zip(recs, reference[name], strict=True):
            if got["problem_id"] in kept and name == "tiny-aime":
                assert got["response"] == kept[got["problem_id"]]
            else:
                assert got == want
    assert summary["benchmarks"] == _summary(root / "one")["benchmarks"]  # the marked texts kept their scores

    # a rerun of a finished evaluation generates nothing at all (no shard loads the model)
    assert main(_argv(model, out, "--shards", "2")) == 0
    assert _records(out) == records and _summary(out)["grading"] == {}


def test_a_failing_shard_is_one_line_naming_it_and_its_log(tiny_env, evaluated, tmp_path, capsys) -> None:
    model, _ = evaluated
    out = tmp_path / "failing"
    shards.meta_file(out, 1, 2).mkdir(parents=True)  # shard 1 cannot write its end-of-run facts
    assert main(_argv(model, out, "--shards", "2", "--benchmarks", "tiny-aime")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    log = out / "shards" / "shard-1.log"
    assert len(err) == 1 and err[0].startswith("error: eval shard 1/2 of ") and err[0].endswith(f"its log: {log}")
    assert "exit code 1: IsADirectoryError" in err[0] and "Traceback" in log.read_text()
    assert not (out / "summary.json").exists()


def test_a_second_eval_of_the_same_folder_is_refused(tiny_env, evaluated, tmp_path, capsys) -> None:
    model, _ = evaluated
    out = tmp_path / "locked"
    with shards.eval_lock(out):
        assert main(_argv(model, out)) == 2
    err = capsys.readouterr().err
    assert err == f"error: another repro eval (pid {os.getpid()}) is writing {out}; wait for it or stop it\n"
    assert not (out / "tiny-aime.jsonl").exists()
    with shards.eval_lock(out):  # released on exit, by the kernel when a holder dies
        pass


def _run(root: Path, steps: tuple[int, ...]) -> Path:
    run = root / "tiny-arith__grpo-n4__standard__s0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "status.json").write_text('{"state": "finished", "attempts": []}')
    (run / "config.yaml").write_text("cell: tiny-arith__grpo-n4__standard__s0\n")
    for step in steps:
        hf = run / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
        (hf / "model.safetensors").write_bytes(b"")  # only its presence is checked before loading
    return run


def test_checkpoints_picks_final_all_or_listed_steps(tmp_path, capsys) -> None:
    run = _run(tmp_path, (2, 4, 6))
    assert [t.step for t in targets(run)] == [6]
    assert [t.step for t in targets(run, checkpoints="final")] == [6]
    assert [t.step for t in targets(run, checkpoints="all")] == [2, 4, 6]
    assert [t.step for t in targets(run, True)] == [2, 4, 6]  # --all-checkpoints, the alias
    found = targets(run, checkpoints="6,2")
    assert [(t.step, t.out_dir.name) for t in found] == [(2, "global_step_2"), (6, "global_step_6")]
    assert {t.lock_root for t in found} == {run / "eval"}  # one lock for the run's evaluations

    assert main(["eval", str(run), "--checkpoints", "3,4"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {run} has no kept checkpoint at step 3; kept steps: 2, 4, 6\n"
    assert main(["eval", str(run), "--checkpoints", "last"]) == 2
    assert "--checkpoints takes final, all or comma-separated steps" in capsys.readouterr().err
    assert main(["eval", str(run), "--checkpoints", "2", "--all-checkpoints"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (run / "eval").exists()


def test_a_step_list_needs_a_run_folder(tiny_env, capsys) -> None:
    model = _model(Path(tiny_env["REPRO_HOME"]))
    assert main(["eval", str(model), "--checkpoints", "2"]) == 2
    assert "picks checkpoints of a run folder" in capsys.readouterr().err


def test_shard_counts_gpu_groups_and_shares(monkeypatch) -> None:
    gpus = ["0", "1", "2", "3", "4", "5", "6", "7"]
    assert shards.shard_count(None, "vllm", 1, gpus) == 8
    assert shards.shard_count(None, "vllm", 2, gpus) == 4
    assert shards.shard_count(None, "vllm", 1, []) == 1
    assert shards.shard_count(None, "transformers", 1, gpus) == 1  # the CPU backend is sharded only if asked
    assert shards.shard_count(3, "transformers", 1, []) == 3
    with pytest.raises(Exception, match="needs 10 GPUs, 8 are visible"):
        shards.shard_count(5, "vllm", 2, gpus)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")
    assert [shards.child_env(i, 2, 2, ["3", "5", "6", "7"], "vllm")["CUDA_VISIBLE_DEVICES"] for i in (0, 1)] == [
        "3,5",
        "6,7",
    ]
    cpu = shards.child_env(1, 2, 1, [], "transformers")
    assert cpu["CUDA_VISIBLE_DEVICES"] == "3,5,6,7"  # left as it was
    assert int(cpu["OMP_NUM_THREADS"]) == max(1, len(os.sched_getaffinity(0)) // 2)
    items = list(range(7))
    assert [shards.share(items, i, 3) for i in range(3)] == [[0, 3, 6], [1, 4], [2, 5]]
    for bad in ("0", "x", "-1"):
        with pytest.raises(Exception, match="--shards takes"):
            shards.parse_shards(bad)
    assert shards.parse_shard("1/2") == (1, 2)
    with pytest.raises(Exception, match="--shard takes"):
        shards.parse_shard("2/2")
