"""Shared fixtures: a private REPRO_HOME holding a quickly built tiny-arith model and its data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_home(tmp_path_factory) -> Path:
    """A REPRO_HOME with the tiny-arith data and a model warm-started for 40 steps instead of 1500.

    The mechanics under test (resume, run layout, losses) do not depend on how well the model adds; the
    folder has the name the CLI looks for, and its repro_build.json records the short warm start.
    """
    import torch

    from repro.local.model import TinyModelSpec, ensure_tiny_model
    from repro.tasks.tiny_arith import ensure_data

    home = tmp_path_factory.mktemp("repro_home")
    torch.set_num_threads(2)
    ensure_tiny_model(home=home, spec=TinyModelSpec(sft_steps=40))
    ensure_data(0, home=home)
    return home


@pytest.fixture
def tiny_env(tiny_home, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("REPRO_HOME", str(tiny_home))
    return {**os.environ, "REPRO_HOME": str(tiny_home)}
