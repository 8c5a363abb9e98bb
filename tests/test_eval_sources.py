"""Evaluation as released: the Hub copies the released eval loads come first, the public originals are
fallbacks; integer answers become text; vLLM gets the released max_model_len. No network: the Hub loader
and vLLM are replaced by fakes that record what they were asked."""

from __future__ import annotations

import json

import pytest

from repro.errors import ReproError
from repro.evaluation import benchmarks as bench

MATHARENA_AIME_LIKE = [
    ("MathArena/aime_2024_I", 15),
    ("MathArena/aime_2024_II", 15),
    ("MathArena/aime_2025", 30),
    ("MathArena/hmmt_feb_2024", 30),
    ("MathArena/hmmt_feb_2025", 30),
    ("MathArena/brumo_2025", 30),
    ("MathArena/amc23", 40),
    ("MathArena/cmimc_2025", 40),
]


class FakeHub:
    """Stands in for `bench.hub_rows`: serves `sets` (hub id -> rows), raises ConnectionError for the rest."""

    def __init__(self, sets: dict[str, list[dict]]) -> None:
        self.sets, self.calls = sets, []

    def __call__(self, spec: dict) -> list[dict]:
        self.calls.append((spec["hf"], spec.get("config"), spec.get("split")))
        if spec["hf"] not in self.sets:
            raise ConnectionError(f"no network for {spec['hf']}")
        return self.sets[spec["hf"]]


def _rows(n: int, problem: str = "problem", answer: str = "answer", **extra) -> list[dict]:
    return [{problem: f"Compute {i} + 1.", answer: i + 1, **{k: f"{v}{i}" for k, v in extra.items()}} for i in range(n)]


def test_the_released_copy_is_loaded_first(monkeypatch) -> None:
    hub = FakeHub({"weqweasdas/math500": _rows(500)})
    monkeypatch.setattr(bench, "hub_rows", hub)
    loaded = bench.load_benchmark("math500")
    assert hub.calls == [("weqweasdas/math500", None, "train")]  # gen_data.py: load_dataset(name, split="train")
    assert loaded.origin == "hub" and loaded.datasets == ("weqweasdas/math500",) and loaded.released_copy
    assert loaded.summary() == {"origin": "hub", "datasets": ["weqweasdas/math500"], "released_copy": True}
    assert len(loaded.problems) == 500
    assert (loaded.problems[7].problem, loaded.problems[7].answer) == ("Compute 7 + 1.", "8")


@pytest.mark.parametrize(
    ("name", "released", "fallback", "fields"),
    [
        ("math500", "weqweasdas/math500", ("HuggingFaceH4/MATH-500", None, "test"), {"id": "unique_id"}),
        ("minerva_math", "weqweasdas/minerva_math", ("math-ai/minervamath", None, "test"), {"problem": "question"}),
        (
            "olympiadbench",
            "weqweasdas/olympiadbench",
            ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
            {"problem": "question", "answer": "final_answer", "id": "id"},
        ),
    ],
)
def test_a_public_original_is_the_fallback(monkeypatch, name, released, fallback, fields) -> None:
    size = bench.expected_size(name)
    rows = _rows(size, fields.get("problem", "problem"), fields.get("answer", "answer"))
    if "id" in fields:
        rows = [{**row, fields["id"]: f"x/{i}"} for i, row in enumerate(rows)]
    hub = FakeHub({fallback[0]: rows})
    monkeypatch.setattr(bench, "hub_rows", hub)
    loaded = bench.load_benchmark(name)
    assert hub.calls == [(released, None, "train"), fallback]
    assert loaded.datasets == (fallback[0],) and not loaded.released_copy
    assert loaded.failed == (f"{released} (ConnectionError)",)
    assert loaded.summary()["failed_first"] == [f"{released} (ConnectionError)"]
    assert len(loaded.problems) == size and loaded.problems[3].answer == "4"
    if "id" in fields:
        assert loaded.problems[3].problem_id == "x/3"


def test_aime_like_is_one_released_set_and_eight_matharena_sets_as_fallback(monkeypatch) -> None:
    first, second = bench.alternatives("aime_like")
    assert [s["hf"] for s in first] == ["weqweasdas/aime_hmmt_brumo_cmimc_amc23"]
    assert [s["hf"] for s in second] == [hf for hf, _ in MATHARENA_AIME_LIKE]
    assert "MathArena/aime_2024" not in [s["hf"] for s in second]  # AIME 2024 is two sets there
    assert sum(size for _, size in MATHARENA_AIME_LIKE) == 230 == bench.expected_size("aime_like")

    # MathArena stores AIME answers as integers: they must reach the grader as text
    sets = {
        hf: [{"problem": f"{hf} #{i}", "answer": 100 + i, "problem_idx": i + 1} for i in range(n)]
        for hf, n in MATHARENA_AIME_LIKE
    }
    hub = FakeHub(sets)
    monkeypatch.setattr(bench, "hub_rows", hub)
    loaded = bench.load_benchmark("aime_like")
    assert [call[0] for call in hub.calls] == ["weqweasdas/aime_hmmt_brumo_cmimc_amc23", *sets]
    assert loaded.datasets == tuple(sets) and loaded.failed == (
        "weqweasdas/aime_hmmt_brumo_cmimc_amc23 (ConnectionError)",
    )
    problems = loaded.problems
    assert len(problems) == 230 and len({p.problem_id for p in problems}) == 230
    assert all(isinstance(p.answer, str) for p in problems)
    assert (problems[0].problem, problems[0].answer) == ("MathArena/aime_2024_I #0", "100")
    assert (problems[15].problem, problems[15].answer) == ("MathArena/aime_2024_II #0", "100")
    assert problems[229].answer == "139"  # the 40th CMIMC problem


def test_released_aime_like_is_one_set_of_230(monkeypatch) -> None:
    hub = FakeHub({"weqweasdas/aime_hmmt_brumo_cmimc_amc23": _rows(230)})
    monkeypatch.setattr(bench, "hub_rows", hub)
    loaded = bench.load_benchmark("aime_like")
    assert hub.calls == [("weqweasdas/aime_hmmt_brumo_cmimc_amc23", None, "train")]
    assert len(loaded.problems) == 230 and loaded.released_copy


def test_a_wrong_sized_released_copy_is_an_error_not_a_fallback(monkeypatch) -> None:
    hub = FakeHub({"weqweasdas/math500": _rows(499), "HuggingFaceH4/MATH-500": _rows(500)})
    monkeypatch.setattr(bench, "hub_rows", hub)
    with pytest.raises(ReproError, match="math500 has 499 problems, expected 500"):
        bench.load_benchmark("math500")
    assert [call[0] for call in hub.calls] == ["weqweasdas/math500"]


def test_when_every_source_fails_the_error_names_them_and_the_flag(monkeypatch) -> None:
    monkeypatch.setattr(bench, "hub_rows", FakeHub({}))
    with pytest.raises(ReproError) as info:
        bench.load_benchmark("aime_like")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "cannot load aime_like from the Hugging Face Hub (tried weqweasdas/aime_hmmt_brumo_cmimc_amc23 "
        "(ConnectionError); MathArena/aime_2024_I + MathArena/aime_2024_II + MathArena/aime_2025"
    )
    assert message.endswith("pass --benchmark-file aime_like=PATH")


@pytest.mark.parametrize(
    ("value", "text"),
    [(204, "204"), (204.0, "204"), (0.5, "0.5"), ("\\frac{1}{2} ", "\\frac{1}{2}"), ([7], "7"), ([1, 2], "1, 2")],
)
def test_answers_become_text(value, text) -> None:
    assert bench._answer(value) == text


def test_a_local_file_may_use_the_released_or_the_public_field_names(tmp_path) -> None:
    released = tmp_path / "released.jsonl"
    released.write_text("\n".join(json.dumps(row) for row in _rows(272)))
    public = tmp_path / "public.jsonl"
    public.write_text("\n".join(json.dumps(row) for row in _rows(272, problem="question")))
    for path in (released, public):
        loaded = bench.load_benchmark("minerva_math", path)
        assert loaded.summary() == {"origin": "file", "path": str(path)}
        assert (loaded.problems[5].problem, loaded.problems[5].answer) == ("Compute 5 + 1.", "6")


# ------------------------------------------------------------------------------------------- vLLM


@pytest.fixture
def fake_vllm(monkeypatch):
    """The suite's strict vLLM stand-in (tests/fake_vllm.py); responses name their request's seed."""
    import fake_vllm as fv

    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    return fv.install(monkeypatch, respond=lambda _ids, params, _j: f"seed {params.seed}")


def _model(tmp_path, positions: int, backbone: str = "qwen2.5-math-1.5b"):
    from chat_tokenizers import model_folder

    return model_folder(tmp_path / f"model-{positions}", backbone, positions)


def test_the_fake_vllm_refuses_a_long_context_as_vllm_does(fake_vllm, tmp_path, monkeypatch) -> None:
    """Without hf_overrides a 4096-position model cannot start at 8192 (vLLM's rule, vLLM's words)."""
    import vllm

    from repro.vllm_rules import VLLMRefusal

    model = _model(tmp_path, 4096)
    with pytest.raises(VLLMRefusal, match=r"User-specified max_model_len \(8192\) is greater than the derived"):
        vllm.LLM(model=str(model), max_model_len=8192)
    vllm.LLM(model=str(model), max_model_len=8192, hf_overrides={"max_position_embeddings": 8192})
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    vllm.LLM(model=str(model), max_model_len=8192)
    with pytest.raises(TypeError):
        vllm.LLM(model=str(model), max_model_length=8192)  # a misspelt engine argument
    for bad in ({"n": 0}, {"temperature": -1.0}, {"top_p": 0.0}, {"max_tokens": 0}, {"seed": 1.5}):
        with pytest.raises((ValueError, TypeError)):
            vllm.SamplingParams(**bad)


def test_vllm_gets_the_released_max_model_len_and_a_4k_model_its_positions_raised(fake_vllm, tmp_path) -> None:
    from repro.evaluation.vllm_engine import vllm_device, vllm_engine_args
    from repro.evaluation.vllm_generator import VLLMGenerator
    from repro.prompting import template_for

    assert bench.generation_setting("max_model_len") == 8192
    model = _model(tmp_path, 4096)  # Qwen2.5-Math's config
    problems = ["What is 1+1?", "What is 2+2?"]
    generator = VLLMGenerator(model, max_new_tokens=4096, template=template_for("qwen2.5-math-1.5b"), problems=problems)
    assert fake_vllm.engines == [
        {
            "model": str(model),
            "tensor_parallel_size": 1,
            "gpu_memory_utilization": 0.85,
            "max_model_len": 8192,
            "hf_overrides": {"max_position_embeddings": 8192},
            **vllm_engine_args(vllm_device()),  # the catalog's dtype (and on a CPU eager mode)
        }
    ]
    assert "released eval's max_model_len 8192" in generator.max_model_len_reason
    texts = generator.generate_seeded(problems, [[11, 12, 13], [21, 22, 23]])
    assert texts == [["seed 11", "seed 12", "seed 13"], ["seed 21", "seed 22", "seed 23"]]
    requests = fake_vllm.requests
    assert len(fake_vllm.calls) == 1 and len(requests) == 6  # one request per sample
    assert [r.params.kwargs for r in requests[:1]] == [
        {"n": 1, "temperature": 1.0, "top_p": 1.0, "max_tokens": 4096, "seed": 11}
    ]
    assert [r.params.seed for r in requests] == [11, 12, 13, 21, 22, 23]
    assert {r.given_as for r in requests} == {"tokens"}  # vLLM tokenizes nothing
    tokenizer = generator.tokenizer
    assert tokenizer.decode(requests[0].prompt_token_ids) == (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>user\nWhat is 1+1? Let's think step by step and output the final answer within "
        "\\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )
    # the positional call (the difficulty filter's) also gives every sample its own seed
    generator.generate(problems, 3, seed=11)
    seeds = [r.params.seed for r in fake_vllm.calls[-1]]
    assert len(set(seeds)) == 6 and all(0 <= s < 2**63 for s in seeds)


def test_vllm_leaves_a_long_context_model_as_it_is(fake_vllm, tmp_path) -> None:
    from repro.evaluation.vllm_generator import VLLMGenerator

    model = _model(tmp_path, 262144, "qwen3-4b-instruct")  # Qwen3-4B-Instruct-2507
    VLLMGenerator(model)
    assert fake_vllm.engines[-1]["max_model_len"] == 8192 and "hf_overrides" not in fake_vllm.engines[-1]
    VLLMGenerator(_model(tmp_path, 32768), max_model_len=16384)
    assert fake_vllm.engines[-1]["max_model_len"] == 16384 and "hf_overrides" not in fake_vllm.engines[-1]


def test_vllm_context_grows_with_max_new_tokens_and_the_longest_prompt(fake_vllm, tmp_path) -> None:
    """max_model_len = max(released 8192, longest prompt + --max-new-tokens); positions follow."""
    from repro.errors import ReproError
    from repro.evaluation.vllm_generator import VLLMGenerator
    from repro.prompting import template_for

    template = template_for("qwen2.5-math-1.5b")
    model = _model(tmp_path, 4096)
    problems = ["What is 1+1?", "Add " + "1 + " * 50 + "1."]
    generator = VLLMGenerator(model, max_new_tokens=8000, template=template, problems=problems)
    longest = max(len(generator.prompt_ids(p)) for p in problems)
    assert generator.max_model_len == longest + 8000 > 8192
    assert fake_vllm.engines[-1]["hf_overrides"] == {"max_position_embeddings": longest + 8000}
    assert "max_new_tokens 8000" in generator.max_model_len_reason
    generator.generate_seeded(problems, [[1], [2]])
    assert [r.max_tokens for r in fake_vllm.requests] == [8000, 8000]  # nobody's response is cut short
    small = VLLMGenerator(model, max_new_tokens=16, template=template, max_model_len=64)
    with pytest.raises(ReproError, match=r"Prompt length \(\d+\) leaves no room"):
        small.generate_seeded(problems[:1], [[1]])  # vLLM's refusal of a prompt longer than the context
