"""The verl-facing glue of the plugin (repro/verl_plugin/rollout.py) without Ray: the reward a worker reads
from verl's agent loop, the refusal of a reward verl only computes after the rollout, and how the manager
contains a prompt whose generation keeps failing (issue 12 a, f)."""

from __future__ import annotations

import asyncio
import json
import types
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

with warnings.catch_warnings():  # verl imports ray, whose state API warns on import; not ours to fix
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    from verl.utils import tensordict_utils as tu

    from repro.verl_plugin import pool_stats, rollout
    from repro.verl_plugin.ada_loop import GENERATE_RETRIES

from repro.sampling import SamplerSpec


def _output(score):
    return SimpleNamespace(reward_score=score, extra_fields={})


# ---- f: where the reward lives ---------------------------------------------------------------------
def test_response_reward_is_verls_reward_score_of_the_last_output():
    assert rollout.response_reward([_output(None), _output(1.0)]) == 1.0  # verl scores a run's last output
    assert rollout.response_reward([_output(0)]) == 0.0
    with pytest.raises(RuntimeError, match=r"reward_model\.enable_resource_pool"):
        rollout.response_reward([_output(None)])


def _config(enable: bool, pool: bool):
    return OmegaConf.create({"reward": {"reward_model": {"enable": enable, "enable_resource_pool": pool}}})


def test_a_colocated_reward_model_is_refused_with_the_setting_named():
    rollout.check_reward_during_rollout(_config(False, False))  # rule-based reward: scored in the rollout
    rollout.check_reward_during_rollout(_config(True, True))  # a reward model on its own pool: also
    with pytest.raises(ValueError, match=r"reward\.reward_model\.enable_resource_pool=True"):
        rollout.check_reward_during_rollout(_config(True, False))  # colocated: verl scores after the rollout


def test_the_manager_refuses_it_at_construction():
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {}, "model": {}},
            "algorithm": {"reinforce_ada": {"kind": "seq"}},
            "trainer": {"default_local_dir": "/nonexistent", "resume_mode": "disable"},
            "reward": {"reward_model": {"enable": True, "enable_resource_pool": False}},
        }
    )
    with pytest.raises(ValueError, match="colocated reward model"):
        rollout.ReinforceAdaAgentLoopManager(config, llm_client=None, reward_loop_worker_handles=None)


# ---- a: the worker stays thin ----------------------------------------------------------------------
def _worker(run_agent_loop):
    entry = {"row": {"uid": "u"}, "trajectory": {}, "params": {}, "outputs": ["earlier"]}
    worker = SimpleNamespace(_ada={"u": entry}, _run_agent_loop=run_agent_loop)
    worker._session = types.MethodType(rollout.AdaWorker._session, worker)  # the one session launcher
    return worker, entry


def test_ada_generate_returns_the_rewards_and_a_failed_batch_keeps_nothing():
    cancelled = []

    async def run_agent_loop(params, *, trajectory, trace, session_id, **row):
        if session_id == 2:
            raise ConnectionError("lost")
        if session_id > 2:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append(session_id)
                raise
        return [_output(float(session_id % 2))]

    worker, entry = _worker(run_agent_loop)
    assert asyncio.run(rollout.AdaWorker.ada_generate(worker, "u", 1)) == [1.0]  # session 1
    assert len(entry["outputs"]) == 2

    async def fail_in_a_live_loop():  # the worker's event loop lives on after a failed call
        with pytest.raises(ConnectionError):
            await rollout.AdaWorker.ada_generate(worker, "u", 3)  # sessions 2, 3, 4
        return sorted(cancelled)

    assert asyncio.run(fail_in_a_live_loop()) == [3, 4]  # no orphaned request keeps the server busy
    assert len(entry["outputs"]) == 2  # the retry starts from the same session numbers


# ---- a: the manager contains a failing prompt ------------------------------------------------------
class _Remote:
    def __init__(self, fn):
        self.remote = fn


class _FakeWorker:
    """What the manager calls on an AdaWorker, in-process: rewards from a rule, commits recorded."""

    def __init__(self, failing: set[str]):
        self.failing = failing
        self.calls: dict[str, int] = {}
        self.commits: dict[str, tuple[list[int], bool]] = {}
        self.ada_begin = _Remote(self._begin)
        self.ada_generate = _Remote(self._generate)
        self.ada_count = _Remote(self._count)
        self.ada_commit = _Remote(self._commit)
        self.sampler_log: Path | None = None  # where the manager logs the step's metrics
        self.logged_before_commit: list[bool] = []

    async def _begin(self, rows, step):
        return None

    async def _generate(self, uid, count):
        self.calls[uid] = self.calls.get(uid, 0) + 1
        await asyncio.sleep(0)
        if uid in self.failing:
            raise ConnectionError(f"lost {uid}")
        return [float(k % 2) for k in range(count)]  # half right: seq-balance exits after round one

    async def _count(self, uid, keep):
        # as AdaWorker.ada_count: tokens of every response kept in the pool (here 5 each; a prompt whose
        # generation kept failing kept none) and of the kept ones
        return {
            "resumed": 0,
            "generated": 0 if uid in self.failing else 5 * 8 * self.calls[uid],
            "trained": 5 * len(keep),
        }

    async def _commit(self, uid, keep, ok=True):
        self.commits[uid] = (list(keep), ok)
        # once a prompt is published verl may train its batch and end the run: the step's line must be written
        self.logged_before_commit.append(self.sampler_log is not None and self.sampler_log.exists())


def test_the_manager_publishes_a_failed_prompt_as_failure_and_finishes_the_step(tmp_path, monkeypatch):
    workers = [_FakeWorker({"u2"}), _FakeWorker({"u2"})]
    manager = object.__new__(rollout.ReinforceAdaAgentLoopManager)
    manager.spec = SamplerSpec(kind="seq", exit_rule="balance")
    manager.agent_loop_workers = workers
    manager._sampler_log = None
    attempt = tmp_path / "attempt-001.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(attempt))
    pool_stats.clear()
    uids = [f"u{i}" for i in range(4)]
    prompts = tu.get_tensordict({"uid": uids, "index": list(range(4))}, non_tensor_dict={"global_steps": 7})

    for worker in workers:
        worker.sampler_log = tmp_path / "attempt-001.sampler.jsonl"
    asyncio.run(manager._generate_adaptive(prompts))
    assert all(logged for w in workers for logged in w.logged_before_commit)  # 4 commits, each after the log
    assert sum(len(w.logged_before_commit) for w in workers) == 4
    commits = {uid: c for w in workers for uid, c in w.commits.items()}
    assert commits["u2"] == ([], False)  # published as "failure", no rows
    assert workers[0].calls["u2"] == 1 + GENERATE_RETRIES
    for uid in ("u0", "u1", "u3"):
        keep, ok = commits[uid]
        assert ok and len(keep) == 4
        assert pool_stats.lookup(uid) is not None and pool_stats.lookup(uid).pool_size == 8
    assert pool_stats.lookup("u2") is None  # the estimator never sees a baseline for it
    manager._sampler_log.close()
    (line,) = (tmp_path / "attempt-001.sampler.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["step"] == 7 and record["data"]["sampler/failed_prompts"] == 1
    # the step's tokens, summed from what the counts returned: 3 prompts x 8 drawn x 5, and their 4 kept x 5
    assert record["data"]["tokens/generated"] == 120 and record["data"]["tokens/trained"] == 60
    pool_stats.clear()
