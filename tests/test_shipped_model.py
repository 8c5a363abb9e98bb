"""The tiny-arith model the project ships (repro/cpu_lm/shipped): it is the current version's and spec's, so a
fresh checkout uses the bytes the builder would write instead of spending its build, and only for that spec."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from repro.cpu_lm import model as tiny


def test_the_shipped_model_is_this_versions_default_and_a_fresh_home_gets_its_bytes(tmp_path, monkeypatch) -> None:
    spec = tiny.TinyModelSpec()
    shipped = tiny.SHIPPED / spec.key()
    # a new model version or spec must ship its build (scripts: REPRO_BUILD_TINY=1 repro data filter, then copy)
    assert shipped.is_dir(), f"no shipped model for {spec.key()}"
    record = json.loads((shipped / "repro_build.json").read_text())
    assert record["spec"] == asdict(spec)
    monkeypatch.delenv(tiny.BUILD_ENV, raising=False)
    folder = tiny.ensure_tiny_model(home=tmp_path)
    assert (folder / "COMPLETE").exists() and folder == tmp_path / "models" / spec.key()
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert digest == hashlib.sha256((shipped / "model.safetensors").read_bytes()).hexdigest()
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert sum(p.numel() for p in loaded.parameters()) == record["parameters"]
    # another spec (the suite's small models) is never served the shipped copy; nor is anything with the switch on
    assert tiny.shipped_model(tiny.TinyModelSpec(sft_steps=40)) is None
    monkeypatch.setenv(tiny.BUILD_ENV, "1")
    assert tiny.shipped_model(spec) is None
