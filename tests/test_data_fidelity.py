"""Data as the released code built it: one prompt template everywhere, the 700-token filter on training
prompts, released sets by Hub id, and Qwen3-4B trained on the 7B hard set under the released preset."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from repro import catalog
from repro.cli import main
from repro.data import filter as flt
from repro.data import released
from repro.prompting import chat_messages, problem_text, template_for

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."  # PROTOCOL.md, verbatim


def _user(row: dict) -> str:
    return next(m["content"] for m in row["prompt"] if m["role"] == "user")


@pytest.mark.parametrize(
    "backbone", ["qwen2.5-math-1.5b", "qwen2.5-math-7b", "llama-3.2-3b-instruct", "qwen3-4b-instruct"]
)
def test_every_paper_backbone_uses_the_released_chat(backbone: str) -> None:
    messages = chat_messages("What is 2+2?", template_for(backbone))
    assert messages == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2+2?" + SUFFIX}]


def test_the_tiny_model_keeps_its_bare_problem_and_a_suffix_is_never_doubled() -> None:
    tiny = template_for("tiny-arith")
    assert chat_messages("What is 1 plus 2?", tiny)[1]["content"] == "What is 1 plus 2?"
    paper = template_for("qwen2.5-math-7b")
    assert problem_text("What is 2+2?" + SUFFIX, paper) == "What is 2+2?"
    assert problem_text("What is 2+2?", paper) == "What is 2+2?"


def test_a_built_training_row_carries_the_instruction_suffix() -> None:
    rows = flt.verl_rows([flt.Candidate("k", "Find $x$ if $2x=6$.", "3")], "train", template_for("qwen2.5-math-7b"))
    assert rows[0]["prompt"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Find $x$ if $2x=6$." + SUFFIX},
    ]
    assert rows[0]["reward_model"] == {"style": "rule", "ground_truth": "3"}


def _fake_vllm(monkeypatch, tmp_path) -> tuple:
    """The suite's strict vLLM (tests/fake_vllm.py) over a Qwen2.5-Math-style model folder (the real chat
    template, a built tokenizer): every response says 4."""
    import fake_vllm
    from chat_tokenizers import model_folder

    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    return fake_vllm.install(monkeypatch), model_folder(tmp_path / "models", "qwen2.5-math-1.5b")


def _chat(problem: str) -> str:
    """Qwen2.5-Math's chat template over the released system prompt and suffixed user turn."""
    return (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
        f"<|im_start|>user\n{problem}{SUFFIX}<|im_end|>\n<|im_start|>assistant\n"
    )


def test_an_eval_request_sends_the_system_prompt_and_the_suffix(monkeypatch, tmp_path) -> None:
    from repro.evaluation.backends import make_generator

    fake, model = _fake_vllm(monkeypatch, tmp_path)
    generator = make_generator("vllm", model, 4096, template_for("qwen2.5-math-7b"), problems=["What is 2+2?"])
    assert generator.generate(["What is 2+2?"], n=2, seed=0) == [["\\boxed{4}", "\\boxed{4}"]]
    assert [generator.tokenizer.decode(r.prompt_token_ids) for r in fake.requests] == [_chat("What is 2+2?")] * 2


@pytest.fixture
def home(tmp_path, monkeypatch) -> dict[str, str]:
    """A private REPRO_HOME: Hub caches written by one test must not leak into another."""
    folder = tmp_path / "repro_home"
    monkeypatch.setenv("REPRO_HOME", str(folder))
    return {"REPRO_HOME": str(folder)}


def _raw_rows(path: Path, problems: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"problem": p, "answer": a}) + "\n" for p, a in problems))
    return path


def test_the_filter_samples_the_training_chat_and_drops_long_training_prompts(monkeypatch, tmp_path) -> None:
    """A paper backbone's filter: requests carry the suffix, and prompts over 700 tokens leave training too
    (not only validation). Token counts: one token per word, so the long problem has 701."""
    import repro.commands.data as dc

    fake, model = _fake_vllm(monkeypatch, tmp_path)
    monkeypatch.setattr(flt, "token_counter", lambda _path: lambda text: len(text.split()))
    monkeypatch.setattr(dc, "_model_path", lambda _model, _backbone: model)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)  # so `auto` picks the (fake) vLLM backend
    long_problem = " ".join(["word"] * 700) + " 2+2?"
    problems = [(f"What is {i}+{4 - i}?", "4") for i in range(30)] + [(long_problem, "4")]  # the fake says 4
    source = _raw_rows(tmp_path / "candidates.jsonl", problems)
    out = tmp_path / "filtered"
    args = ["data", "filter", "--model", "qwen2.5-math-7b", "--input", str(source), "--out", str(out)]
    assert main([*args, "--base-samples", "4", "--pass-rate", "1.0", "--val-size", "2"]) == 0
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = [tokenizer.decode(r.prompt_token_ids) for r in fake.requests]
    assert all(p.endswith(SUFFIX + "<|im_end|>\n<|im_start|>assistant\n") for p in prompts)
    assert len(set(prompts)) == 31  # every candidate was sampled, the long one too
    assert len(prompts) == 31 * 4 and {r.params.n for r in fake.requests} == {1}  # a request per sample
    assert len({r.params.seed for r in fake.requests}) == 31 * 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stages"]["too_long_dropped"] == 1 and summary["prompt_template"] == "released"
    assert summary["max_prompt_tokens"] == 700
    train, val = pd.read_parquet(out / "train.parquet"), pd.read_parquet(out / "val.parquet")
    assert len(train) + len(val) == 30 and len(val) == 2
    users = [_user(r) for r in train.to_dict("records")] + [_user(r) for r in val.to_dict("records")]
    assert all(u.endswith(SUFFIX) and u.count(SUFFIX) == 1 for u in users)
    assert not any(u.startswith("word word") for u in users)


def test_drop_long_keeps_exactly_the_limit() -> None:
    rows = [flt.Candidate(str(n), " ".join(["w"] * n), "1") for n in (699, 700, 701)]
    kept, dropped = flt.drop_long(rows, 700, lambda text: len(text.split()))
    assert [r.key for r in kept] == ["699", "700"] and dropped == 1
    assert flt.drop_long(rows, 700, None) == (rows, 0)  # no tokenizer: nothing dropped (and the CLI warns)


# ---------------------------------------------------------------------------------- released sets by Hub id

RELEASED_ROWS = [  # the shape data_process/reformat.py writes: the suffix is already in the user turn
    {
        "data_source": "numina_math",
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {i}*3?{SUFFIX}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(3 * i)},
        "extra_info": {"split": "train", "index": i},
    }
    for i in range(12)
]
VALIDATE_ROWS = [{"problem": f"What is {i}-1?", "answer": str(i - 1)} for i in range(5)] + [
    {"problem": " ".join(["long"] * 701), "answer": "0"}
]


def test_is_hub_id() -> None:
    assert released.is_hub_id("RLHFlow/reinforce_ada_hard_prompt") and released.is_hub_id("weqweasdas/validate")
    assert not released.is_hub_id("data/train.parquet") and not released.is_hub_id("train.parquet")
    assert not released.is_hub_id("/abs/path/x") and not released.is_hub_id("a/b/c")


def test_a_released_set_by_hub_id_becomes_local_verl_rows(home) -> None:
    path = released.materialise(
        "RLHFlow/reinforce_ada_hard_prompt",
        catalog.get_backbone("qwen2.5-math-7b"),
        "train",
        loader=lambda _id: RELEASED_ROWS,
        count_tokens=lambda text: len(text.split()),
    )
    assert path == Path(home["REPRO_HOME"]) / "data/hub/RLHFlow__reinforce_ada_hard_prompt/train.parquet"
    rows = pd.read_parquet(path).to_dict("records")
    assert [_user(r) for r in rows] == [f"What is {i}*3?{SUFFIX}" for i in range(12)]  # suffix once
    assert [r["reward_model"]["ground_truth"] for r in rows] == [str(3 * i) for i in range(12)]
    val = released.materialise(
        "weqweasdas/validate",
        catalog.get_backbone("qwen2.5-math-7b"),
        "val",
        loader=lambda _id: VALIDATE_ROWS,
        count_tokens=len,
    )
    # validate's raw rows are built with the chat and the length filter (here 1 token per character)
    assert len(pd.read_parquet(val)) == 5
    summary = json.loads(val.with_suffix(".summary.json").read_text())
    assert summary["loaded"] == 6 and summary["too_long_dropped"] == 1 and summary["rows"] == 5


def test_data_filter_takes_a_released_set_by_hub_id(home, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(released, "load_hub_rows", lambda hub_id, split="train": RELEASED_ROWS)
    monkeypatch.setattr(flt, "token_counter", lambda _path: lambda text: len(text.split()))
    out = tmp_path / "out"
    args = ["data", "filter", "--model", "qwen2.5-math-7b", "--pass-rate", "0.125"]
    assert main([*args, "--input", "RLHFlow/reinforce_ada_hard_prompt", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stages"]["prefiltered_input"] == 12 and summary["split"] == {"train": 11, "val": 1}


def _cell(model: str, prompt_set: str, preset: str, tmp_path: Path, **files):
    from repro.cell import resolve_cell
    from repro.cell_config import verl_run

    return verl_run(resolve_cell(model, "seq-balance", prompt_set, 0, preset=preset), tmp_path / "run", **files)


def _value(spec, key: str) -> str:
    return dict(item.split("=", 1) for item in spec.overrides)[key]


def test_qwen3_trains_on_the_7b_hard_set_under_the_released_preset(home, tmp_path) -> None:
    home = Path(home["REPRO_HOME"])
    spec = _cell("qwen3-4b-instruct", "hard", "released", tmp_path)
    train = home / "data/hub/RLHFlow__reinforce_ada_hard_prompt/train.parquet"
    assert _value(spec, "data.train_files") == str(train)
    assert spec.hub_sources == {
        str(train): "RLHFlow/reinforce_ada_hard_prompt",
        str(home / "data/hub/weqweasdas__validate/val.parquet"): "weqweasdas/validate",
    }
    assert spec.config["hub_sources"] == spec.hub_sources
    # the paper preset filters with the backbone itself (this project's documented choice)
    paper = _cell("qwen3-4b-instruct", "hard", "paper", tmp_path)
    assert _value(paper, "data.train_files") == str(home / "data/qwen3-4b-instruct-hard/train.parquet")
    assert paper.hub_sources == {} and "hub_sources" not in paper.config
    # a backbone whose released set exists takes its own; one without (llama standard) falls back
    seven = _cell("qwen2.5-math-7b", "standard", "released", tmp_path)
    assert "RLHFlow__reinforce_ada_easy_prompt" in _value(seven, "data.train_files")
    llama = _cell("llama-3.2-3b-instruct", "standard", "released", tmp_path)
    assert _value(llama, "data.train_files") == str(home / "data/llama-3.2-3b-instruct-standard/train.parquet")


def test_train_file_by_hub_id_is_fetched_before_the_run(home, monkeypatch, tmp_path) -> None:
    from repro.cell_config import fetch_hub_inputs

    spec = _cell(
        "qwen2.5-math-1.5b",
        "hard",
        "paper",
        tmp_path,
        train_file=Path("RLHFlow/reinforce_ada_hard_prompt_1-5b"),
        val_file=Path("weqweasdas/validate"),
    )
    assert set(spec.hub_sources.values()) == {"RLHFlow/reinforce_ada_hard_prompt_1-5b", "weqweasdas/validate"}
    loads: list[str] = []

    def loader(hub_id: str, split: str = "train") -> list[dict]:
        loads.append(hub_id)
        return RELEASED_ROWS if hub_id.startswith("RLHFlow/") else VALIDATE_ROWS

    monkeypatch.setattr(released, "load_hub_rows", loader)
    monkeypatch.setattr(flt, "token_counter", lambda _path: None)
    lines: list[str] = []
    fetch_hub_inputs(spec, catalog.get_backbone("qwen2.5-math-1.5b"), lines.append)
    assert all(Path(local).exists() for local in spec.hub_sources)
    assert len(lines) == 2 and all(line.startswith("downloading ") for line in lines)
    fetch_hub_inputs(spec, catalog.get_backbone("qwen2.5-math-1.5b"), lines.append)  # cached: nothing fetched again
    assert len(loads) == 2 and len(lines) == 2


def test_a_hub_set_that_cannot_load_is_one_clear_error(home, monkeypatch, capsys) -> None:
    # the real loader, offline (no Hub here; offline mode only skips the network retries) fails with one line
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    code = main(["data", "filter", "--model", "qwen2.5-math-7b", "--input", "RLHFlow/no_such_set_here"])
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot load RLHFlow/no_such_set_here from the Hugging Face Hub" in err and "--input PATH" in err


def test_catalog_lists_one_template_per_backbone() -> None:
    assert {k: b.prompt_template for k, b in catalog.backbones().items()} == {
        "qwen2.5-math-1.5b": "released",
        "qwen2.5-math-7b": "released",
        "llama-3.2-3b-instruct": "released",
        "qwen3-4b-instruct": "released",
        "tiny-arith": "tiny",
        "smollm2-135m-instruct": "one-shot",
        "generic": "released",
    }


def test_the_released_dry_run_names_the_hub_set_it_will_fetch(home, capsys) -> None:
    args = ["run", "--model", "qwen3-4b-instruct", "--method", "seq-balance", "--prompt-set", "hard"]
    assert main([*args, "--preset", "released", "--dry-run"]) == 0
    out = capsys.readouterr().out
    train = Path(home["REPRO_HOME"]) / "data/hub/RLHFlow__reinforce_ada_hard_prompt/train.parquet"
    assert f"data.train_files={train}" in out
    assert "it is RLHFlow/reinforce_ada_hard_prompt, downloaded from the Hub when the run starts" in out
    assert not (train.parent).exists()  # a dry run downloads nothing


class _RecordingScheduler:
    """A scheduler on the Scheduler protocol that records what it was given, and checks the released set is
    on disk by the time the job is submitted (a compute node may have no network)."""

    name = "recording"

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def check(self) -> None:
        pass

    def submit(self, plan, sweep_name: str) -> dict:
        assert all(Path(local).exists() for local in plan.gpu.hub_sources), "submitted before the data was fetched"
        self.submitted.append(plan.name)
        return {"launcher": self.name, "job_id": str(len(self.submitted)), "sweep": sweep_name}

    def state(self, record: dict):
        from repro.launch.jobs import JobState

        return JobState("queued")

    def cancel(self, record: dict) -> None:
        pass


def test_a_released_sweep_fetches_its_hub_sets_before_it_submits(home, monkeypatch, tmp_path) -> None:
    from repro.sweep import load_sweep
    from repro.sweep_submit import submit_sweep

    sweep_file = tmp_path / "released.yaml"
    sweep_file.write_text(
        "name: released-one\ndescription: one released cell\nbackbones: [qwen3-4b-instruct]\n"
        "methods: [seq-balance]\nprompt_sets: [hard]\nseeds: [0]\npreset: released\n"
    )
    loads: list[str] = []
    monkeypatch.setattr(
        released, "load_hub_rows", lambda hub_id, split="train": loads.append(hub_id) or RELEASED_ROWS * 50
    )
    monkeypatch.setattr(flt, "token_counter", lambda _path: None)
    # the submission also puts the backbone's weights into the Hugging Face cache (repro.weights_cache): there is
    # no Hub here, so that cache holds them already
    from hf_cache import model_files, populate

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    populate(tmp_path / "hf" / "hub", "Qwen/Qwen3-4B-Instruct-2507", model_files("qwen3-4b-instruct", tmp_path / "m"))
    scheduler = _RecordingScheduler()
    # the stack check would stop a GPU submission on this CPU machine (tests/test_stack_check.py shows it)
    submit_sweep(load_sweep(sweep_file), scheduler, tmp_path / "runs", check_stack=False)
    assert scheduler.submitted == ["qwen3-4b-instruct__seq-balance__hard__s0"]
    assert sorted(loads) == ["RLHFlow/reinforce_ada_hard_prompt", "weqweasdas/validate"]
    assert (tmp_path / "runs/qwen3-4b-instruct__seq-balance__hard__s0/jobs.jsonl").exists()
    train = Path(home["REPRO_HOME"]) / "data/hub/RLHFlow__reinforce_ada_hard_prompt/train.parquet"
    assert len(pd.read_parquet(train)) == 600
