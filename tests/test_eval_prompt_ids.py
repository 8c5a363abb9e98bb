"""vLLM evaluation as the transformers backend does it (issue 20 item 5).

Both backends feed the model the same prompt token ids, built once by `apply_chat_template(tokenize=True)`
from each backbone's REAL chat template (tests/fixtures/chat_templates/) over a tokenizer the suite builds
with the family's real special tokens (tests/chat_tokenizers.py). Rendering to text and letting vLLM
tokenize it again, as the evaluation once did, gives Llama 3 two BOS tokens. And every (problem, sample)
has its own seed, the same whatever the chunking, resume or backend call that draws it.
"""

from __future__ import annotations

import types
from pathlib import Path

import fake_vllm
import pytest
from chat_tokenizers import FAMILIES, build_tokenizer, model_folder

from repro.evaluation.benchmarks import Problem
from repro.evaluation.generation import prompt_token_ids, sample_seed, sample_seeds
from repro.evaluation.runner import evaluate_benchmark, read_records
from repro.evaluation.transformers_generator import TransformersGenerator
from repro.evaluation.vllm_generator import VLLMGenerator
from repro.prompting import chat_messages, template_for

PROBLEMS = [
    "What is 2+2?",
    "Let $f(x) = x^2 - 3x$. Find $f(\\frac{1}{2})$ — in lowest terms.",  # LaTeX, a dash, braces
    "  Leading and trailing spaces, and a newline\nin the middle.  ",
]


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    return fake_vllm.install(monkeypatch)


def _transformers_prompts(monkeypatch, folder: Path, backbone: str) -> list[list[int]]:
    """The ids TransformersGenerator feeds its model for PROBLEMS (the model itself is a stand-in)."""
    import transformers

    seen: list[list[int]] = []

    def sample(_model, prompts, **_kwargs):
        seen.extend(prompts)
        return [[] for _ in prompts]

    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_pretrained", lambda *_a, **_k: types.SimpleNamespace(eval=lambda: None)
    )
    monkeypatch.setattr("repro.cpu_lm.generate.sample", sample)
    generator = TransformersGenerator(folder, 8, template=template_for(backbone))
    generator.generate_seeded(PROBLEMS, [[1]] * len(PROBLEMS))
    assert len(seen) == len(PROBLEMS)
    return seen


@pytest.mark.parametrize("backbone", sorted(FAMILIES))
def test_both_backends_send_identical_prompt_ids_for_every_backbone(backbone, fake, monkeypatch, tmp_path) -> None:
    folder = model_folder(tmp_path, backbone)
    from_transformers = _transformers_prompts(monkeypatch, folder, backbone)
    generator = VLLMGenerator(folder, max_new_tokens=64, template=template_for(backbone), problems=PROBLEMS)
    generator.generate_seeded(PROBLEMS, [[5]] * len(PROBLEMS))
    requests = fake.requests
    assert [r.given_as for r in requests] == ["tokens"] * len(PROBLEMS)  # vLLM gets ids, adds nothing
    assert [r.prompt_token_ids for r in requests] == from_transformers
    tokenizer = generator.tokenizer
    family = FAMILIES[backbone]
    for problem, ids in zip(PROBLEMS, from_transformers, strict=True):
        text = tokenizer.apply_chat_template(
            chat_messages(problem, template_for(backbone)), add_generation_prompt=True, tokenize=False
        )
        assert tokenizer.decode(ids) == text  # the template's text, token for token, nothing added
        if family.bos is not None:
            bos = tokenizer.convert_tokens_to_ids(family.bos)
            assert ids[0] == bos and ids.count(bos) == 1
        else:
            assert tokenizer.bos_token is None


def test_the_old_text_path_gives_llama_two_bos_tokens(fake, tmp_path) -> None:
    """What the evaluation did before: render to text, let vLLM tokenize it (with special tokens)."""
    import vllm

    folder = model_folder(tmp_path, "llama-3.2-3b-instruct")
    tokenizer = build_tokenizer("llama-3.2-3b-instruct")
    bos = tokenizer.convert_tokens_to_ids("<|begin_of_text|>")
    messages = chat_messages("What is 2+2?", template_for("llama-3.2-3b-instruct"))
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n")
    llm = vllm.LLM(model=str(folder), max_model_len=8192)
    llm.generate([text], vllm.SamplingParams(max_tokens=8), use_tqdm=False)
    old = fake.requests[-1].prompt_token_ids
    assert old[:2] == [bos, bos]  # the template's BOS and the post-processor's
    new = prompt_token_ids(tokenizer, "What is 2+2?", template_for("llama-3.2-3b-instruct"))
    assert new == old[1:] and new.count(bos) == 1
    for qwen in ("qwen2.5-math-1.5b", "qwen3-4b-instruct"):  # no BOS: both paths agree there
        tok = build_tokenizer(qwen)
        rendered = tok.apply_chat_template(
            chat_messages("What is 2+2?", template_for(qwen)), add_generation_prompt=True, tokenize=False
        )
        assert tok(rendered)["input_ids"] == prompt_token_ids(tok, "What is 2+2?", template_for(qwen))


def test_prompt_ids_accept_a_plain_list_and_a_batch_encoding() -> None:
    tokenizer = build_tokenizer("qwen3-4b-instruct")
    template = template_for("qwen3-4b-instruct")
    messages = chat_messages("What is 2+2?", template)
    as_list = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert isinstance(as_list, list) and prompt_token_ids(tokenizer, "What is 2+2?", template) == as_list

    class ListTokenizer:  # an older transformers: a list of ids
        def apply_chat_template(self, *_a, **_k):
            return as_list

    assert prompt_token_ids(ListTokenizer(), "What is 2+2?", template) == as_list


# ------------------------------------------------------------------------------------------- seeds


class _Grade:
    score, outcome = 0.0, "wrong"


class _Grader:
    def grade_many(self, pairs, mode):
        return [_Grade() for _ in pairs]


class _Recorder:
    """A seeded generator that remembers which seed each problem's samples got."""

    def __init__(self, interrupt_after: int | None = None) -> None:
        self.seeds: dict[tuple[str, int], int] = {}
        self.interrupt_after, self.calls = interrupt_after, 0

    def generate(self, problems, n, seed):  # pragma: no cover - the runner must use generate_seeded
        raise AssertionError("evaluate_benchmark called the positional generate")

    def generate_seeded(self, problems, seeds):
        if self.interrupt_after is not None and self.calls >= self.interrupt_after:
            raise KeyboardInterrupt
        self.calls += 1
        for problem, row in zip(problems, seeds, strict=True):
            for j, s in enumerate(row):
                self.seeds[(problem, j)] = s
        return [[f"no answer {s}" for s in row] for row in seeds]


def _problems(benchmark: str, count: int) -> list[Problem]:
    return [Problem(benchmark, f"p{i}", f"problem {i} of {benchmark}", "1") for i in range(count)]


def test_every_problem_sample_has_its_own_seed_whatever_the_chunking(tmp_path) -> None:
    problems, k = _problems("math500", 37), 8
    maps = []
    for chunk in (1, 5, 16, 64):
        recorder = _Recorder()
        evaluate_benchmark(problems, k, recorder, _Grader(), tmp_path / f"c{chunk}.jsonl", seed=3, chunk=chunk)
        maps.append(recorder.seeds)
    assert all(m == maps[0] for m in maps[1:])  # identical whatever the chunk size
    assert len(maps[0]) == 37 * k and len(set(maps[0].values())) == 37 * k  # all distinct
    assert maps[0][("problem 4 of math500", 2)] == sample_seed(3, "math500", "p4", 2)
    assert all(0 <= s < 2**63 for s in maps[0].values())
    # another benchmark with the same problem ids, and another --seed, get other seeds
    other = _Recorder()
    evaluate_benchmark(_problems("aime_like", 37), k, other, _Grader(), tmp_path / "aime.jsonl", seed=3)
    assert not set(other.seeds.values()) & set(maps[0].values())
    assert sample_seeds(4, "math500", "p4", k) != sample_seeds(3, "math500", "p4", k)


def test_a_resumed_evaluation_draws_the_seeds_an_uninterrupted_one_would(tmp_path) -> None:
    problems, k = _problems("math500", 30), 4
    whole = _Recorder()
    evaluate_benchmark(problems, k, whole, _Grader(), tmp_path / "whole.jsonl", seed=0, chunk=7)
    out = tmp_path / "resumed.jsonl"
    first = _Recorder(interrupt_after=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate_benchmark(problems, k, first, _Grader(), out, seed=0, chunk=7)
    second = _Recorder()
    evaluate_benchmark(problems, k, second, _Grader(), out, seed=0, chunk=5)  # resumed with other chunks
    assert len(second.seeds) == (30 - 14) * k  # the finished problems were not redone
    assert {**first.seeds, **second.seeds} == whole.seeds
    records, bad = read_records(out)
    assert bad == 0 and len(records) == 30 * k


def test_vllm_requests_carry_the_runners_per_sample_seeds(fake, tmp_path) -> None:
    folder = model_folder(tmp_path, "qwen2.5-math-1.5b")
    problems = _problems("math500", 5)
    generator = VLLMGenerator(folder, max_new_tokens=32, template=template_for("qwen2.5-math-1.5b"))
    evaluate_benchmark(problems, 3, generator, _Grader(), tmp_path / "math500.jsonl", seed=9, chunk=2)
    requests = fake.requests
    assert len(requests) == 15 and {r.params.n for r in requests} == {1}
    assert [r.params.seed for r in requests] == [
        sample_seed(9, "math500", f"p{i}", j) for i in range(5) for j in range(3)
    ]


def test_tiny_cpu_responses_do_not_depend_on_the_chunk(tiny_env, tmp_path) -> None:
    """The transformers backend seeds each problem's batch from that problem's seeds."""
    from repro import catalog
    from repro.cpu_lm.model import TinyModelSpec
    from repro.cpu_lm.model import model_folder as tiny_folder
    from repro.evaluation import benchmarks as bench
    from repro.evaluation.grading import Grader

    model = tiny_folder(TinyModelSpec(), Path(tiny_env["REPRO_HOME"]))
    generator = TransformersGenerator(model, 16, template=catalog.prompt_template("tiny"))
    problems = bench.load("tiny-aime")[:10]
    with Grader(timeout_s=5) as grader:
        runs = [
            evaluate_benchmark(problems, 4, generator, grader, tmp_path / f"c{chunk}.jsonl", seed=0, chunk=chunk)
            for chunk in (3, 10)
        ]
    responses = [{(r["problem_id"], r["sample_index"]): r["response"] for r in records} for records in runs]
    assert responses[0] == responses[1] and len(responses[0]) == 40


def test_the_template_fixtures_are_the_recorded_bytes() -> None:
    """Each fixture's sha256 is the one SOURCES.md records beside its origin (an edit shows here)."""
    import hashlib
    import re

    from chat_tokenizers import TEMPLATES

    recorded = dict(
        re.findall(r"^\| `([\w.-]+\.jinja)` \|.*\| ([0-9a-f]{64}) \|$", (TEMPLATES / "SOURCES.md").read_text(), re.M)
    )
    assert set(recorded) == {f.template_file for f in FAMILIES.values()}
    for name, digest in recorded.items():
        assert hashlib.sha256((TEMPLATES / name).read_bytes()).hexdigest() == digest
