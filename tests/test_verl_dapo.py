"""DAPO on the verl path: the async driver's bounded refills, the manager's refill rows, and the prompt
groups verl's real replay buffer ends up sampling.

Driver tests run `run_adaptive_step` against the scripted `FakeLLMServer` through `make_generate`, scored
by the project's math-verify reward; every prompt is right always, wrong always, or right on its first
call only (a mixed group of 1 positive and 3 negatives at n = 4), so the generation batches, kept groups
and `dapo/*` metrics below are worked out by hand and checked against the core's own synchronous driver
(the CPU path). Manager tests run `ReinforceAdaAgentLoopManager._generate_adaptive` with its workers'
agent loop and TransferQueue replaced by in-memory fakes (no Ray), on a batch built the way verl's
trainer builds it from verl's own `RLHFDataset`, then call verl 0.9.1's real `ReplayBuffer.sample` on
what the manager left in the (fake) TransferQueue.
"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from repro.cpu_lm.tokenizer import build_tokenizer
from repro.reward import compute_score
from repro.sampling import DapoCapExceeded, SamplerSpec, StepSampler, run_step_sync
from repro.verl_plugin.ada_loop import make_generate, run_adaptive_step
from repro.verl_plugin.refill import RefillStream, dataset_row, load_records, plan_dapo_commit

with warnings.catch_warnings():  # verl imports ray, whose state API warns on import; not ours to fix
    warnings.filterwarnings("ignore", message="Ray state API", category=DeprecationWarning)
    from repro.verl_plugin.fake_server import FakeLLMServer

DAPO = SamplerSpec(kind="dapo", n=4, max_num_gen_batches=10)
PARAMS = {"temperature": 1.0, "top_p": 1.0}
RIGHT, WRONG, MIXED = "right", "wrong", "mixed"  # right on every call / no call / call 0 only


def reward_of(kind: str, call: int) -> float:
    return float(kind == RIGHT or (kind == MIXED and call == 0))


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module", autouse=True)
def warm_reward():
    for slot in range(40):
        compute_score("test", f"\\boxed{{{10 + slot}}}", str(10 + slot))


class DapoScenario:
    """Slot i is prompt i of `kinds`; the first `target` are the step's batch, the rest come by refill."""

    def __init__(self, tok, kinds: list[str], target: int) -> None:
        self.kinds = kinds
        self.target = target
        self.prompts = [tok.encode(f"what is {i}+10?", add_special_tokens=False) for i in range(len(kinds))]
        slot_of = {tuple(p): i for i, p in enumerate(self.prompts)}

        def script(prompt_ids: list[int], call: int) -> str:
            i = slot_of[tuple(prompt_ids)]
            return f"\\boxed{{{10 + i if reward_of(kinds[i], call) else 110 + i}}}"

        self.server = FakeLLMServer(tok, script)
        answers = [str(10 + i) for i in range(len(kinds))]
        self.generate = make_generate(self.server, tok, self.prompts, answers, "test", PARAMS)
        self.refills: list[int] = []

    async def refill(self, count: int) -> list[str]:
        start = self.target + sum(self.refills)
        self.refills.append(count)
        return [f"p{i}" for i in range(start, start + count)]

    def run(self, spec: SamplerSpec):
        ids = [f"p{i}" for i in range(self.target)]
        return asyncio.run(run_adaptive_step(spec, ids, self.generate, refill=self.refill))

    def cpu_path(self, spec: SamplerSpec):
        """The same scripted rewards through the core's synchronous driver, as the CPU trainer runs it."""
        sampler = StepSampler(spec, [f"p{i}" for i in range(self.target)])
        drawn = {"next": self.target}

        def sample(slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
            ids = sampler.prompt_ids
            return np.array([[reward_of(self.kinds[int(ids[s][1:])], c) for c in range(4)] for s in slots])

        def draw(k: int) -> list[str]:
            start = drawn["next"]
            drawn["next"] += k
            return [f"p{i}" for i in range(start, start + k)]

        return run_step_sync(sampler, sample, draw)


# batch 1: one mixed group; batch 2 (first refill): one more; batch 3: three more, two of them needed
THREE_BATCHES = [*(RIGHT, WRONG, MIXED, WRONG), *(MIXED, RIGHT, RIGHT, WRONG), *(MIXED, MIXED, MIXED, RIGHT)]


def test_dapo_refills_until_enough_mixed_groups_through_the_fake_server(tok):
    sc = DapoScenario(tok, THREE_BATCHES + [MIXED] * 8, target=4)
    step = sc.run(DAPO)
    assert sc.refills == [4, 4]  # two refill batches of train_batch_size prompts: 3 generation batches
    m = step.metrics
    assert m["dapo/num_gen_batches"] == 3 and m["dapo/prompts_drawn"] == 12
    assert m["dapo/kept_prompts"] == 4 and m["dapo/discarded_surplus"] == 1  # slot 10 is mixed but surplus
    assert m["dapo/dropped_all_correct"] == 4 and m["dapo/dropped_all_wrong"] == 3  # slots 0,5,6,11 / 1,3,7
    assert m["dapo/cap_hit"] == 0
    assert m["sampler/responses_total"] == 48 and m["sampler/additional_samples"] == 32
    assert m["sampler/update_size"] == 16 and m["sampler/update_prompts"] == 4
    # every drawn prompt got exactly one request of n = 4 from the server, none beyond slot 11
    assert [len(sc.server.calls_for(p)) for p in sc.prompts] == [4] * 12 + [0] * 8
    # the update batch: exactly train_batch_size mixed groups x 4, the first four in slot order
    kept = {s: g for s, g in step.kept.items() if g}
    assert sorted(kept) == [2, 4, 8, 9] and all(len(g) == 4 for g in kept.values())
    rows = step.rows()
    assert len(rows) == 16
    for slot in kept:
        assert [x.reward for x in kept[slot]] == [1.0, 0.0, 0.0, 0.0]
        # GRPO over the kept group: mean 0.25, unbiased std 0.5
        np.testing.assert_allclose(step.kept_advantage[slot], [1.5, -0.5, -0.5, -0.5], rtol=1e-5)
    # the CPU path's driver over the same rewards makes the same choices and logs the same metrics
    cpu = sc.cpu_path(DAPO)
    assert {k: m[k] for k in cpu.metrics} == cpu.metrics  # the driver may add its own keys (retries)
    assert {k for k in m if k.startswith("dapo/")} == {k for k in cpu.metrics if k.startswith("dapo/")}
    np.testing.assert_array_equal(cpu.slot, step.result.slot)
    np.testing.assert_allclose(cpu.advantage, step.result.advantage)


def test_dapo_without_refills_when_the_batch_has_enough_mixed_groups(tok):
    sc = DapoScenario(tok, [MIXED, MIXED, RIGHT, MIXED, MIXED] + [MIXED] * 4, target=4)
    step = sc.run(DAPO.with_(max_num_gen_batches=1))
    assert sc.refills == [] and step.metrics["dapo/num_gen_batches"] == 1
    assert sorted(s for s, g in step.kept.items() if g) == [0, 1, 3] and step.metrics["dapo/cap_hit"] == 1
    sc = DapoScenario(tok, [MIXED, MIXED, MIXED, MIXED] + [MIXED] * 4, target=4)
    step = sc.run(DAPO)
    assert sc.refills == [] and step.metrics["dapo/num_gen_batches"] == 1 and step.metrics["dapo/cap_hit"] == 0


def test_dapo_cap_short_or_error_as_on_the_cpu_path(tok):
    kinds = [MIXED, WRONG, WRONG, WRONG] + [RIGHT, RIGHT, MIXED, WRONG] + [MIXED] * 8
    capped = DAPO.with_(max_num_gen_batches=2)
    sc = DapoScenario(tok, kinds, target=4)
    step = sc.run(capped)  # on_cap="short": train on the two mixed groups collected
    assert sc.refills == [4]
    m = step.metrics
    assert m["dapo/num_gen_batches"] == 2 and m["dapo/cap_hit"] == 1 and m["dapo/kept_prompts"] == 2
    assert sorted(s for s, g in step.kept.items() if g) == [0, 6] and len(step.rows()) == 8
    assert [len(sc.server.calls_for(p)) for p in sc.prompts] == [4] * 8 + [0] * 8
    cpu = sc.cpu_path(capped).metrics
    assert {k: m[k] for k in cpu} == cpu

    strict = capped.with_(on_cap="error")
    sc = DapoScenario(tok, kinds, target=4)
    with pytest.raises(DapoCapExceeded, match="max_num_gen_batches=2"):
        sc.run(strict)
    assert sc.refills == [4]
    with pytest.raises(DapoCapExceeded, match="max_num_gen_batches=2"):
        DapoScenario(tok, kinds, target=4).cpu_path(strict)


def test_dapo_refill_contract_is_checked(tok):
    sc = DapoScenario(tok, [WRONG] * 8, target=4)

    async def short_refill(count: int) -> list[str]:
        return ["p4"] * (count - 1)

    with pytest.raises(RuntimeError, match="refill returned 3 prompts for 4"):
        asyncio.run(run_adaptive_step(DAPO, ["p0", "p1", "p2", "p3"], sc.generate, refill=short_refill))
    with pytest.raises(ValueError, match="refill="):
        asyncio.run(run_adaptive_step(DAPO, ["p0"], sc.generate))


# ---- the manager's refill rows ---------------------------------------------------------------------
def write_train_set(path, kinds: list[str]) -> str:
    rows = [
        {
            "data_source": "test",
            "prompt": [{"role": "user", "content": f"what is {i}+10?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": kinds[i]},  # the fake agent loop reads it
            "extra_info": {"split": "train", "index": i, "level": i % 3},
        }
        for i in range(len(kinds))
    ]
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def verl_dataset(path: str):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.load(_verl_data_config())
    return RLHFDataset(path, tokenizer=None, config=config, processor=None)


def _verl_data_config():
    from pathlib import Path

    import verl

    return Path(verl.__file__).parent / "trainer" / "config" / "data" / "legacy_data.yaml"


def test_refill_rows_are_verls_dataset_rows_with_fresh_uids(tmp_path):
    path = write_train_set(tmp_path / "train.parquet", [MIXED] * 30)
    records = load_records(path)
    dataset = verl_dataset(path)
    for i in (0, 7, 29):
        mine, theirs = dataset_row(records[i]), dataset[i]
        assert list(mine) == list(theirs)
        for key, value in theirs.items():
            if hasattr(value, "dtype"):
                assert mine[key].dtype == value.dtype and mine[key].tolist() == value.tolist()
            else:
                assert mine[key] == value and type(mine[key]) is type(value), key

    def draw(seed, step, count=12, exclude=()):
        stream = RefillStream(records, seed=seed, step=step, exclude=exclude)
        return stream.draw(count // 2) + stream.draw(count - count // 2), stream

    first, s1 = draw(3, 5)
    again, s2 = draw(3, 5)
    assert s1.drawn == s2.drawn and len(set(s1.drawn)) == 12  # same prompts, no repeat within a pass
    assert [r["index"] for r in first] == [r["index"] for r in again]
    assert all(r["global_steps"] == 5 for r in first)
    uids = [r["uid"] for r in first + again]
    assert len(set(uids)) == 24 and all("_" not in u for u in uids)  # verl splits trajectory keys on "_"
    for a, b in zip(first, again, strict=True):
        assert {k: v for k, v in a.items() if k not in ("uid", "dummy_tensor")} == {
            k: v for k, v in b.items() if k not in ("uid", "dummy_tensor")
        }
    assert draw(3, 6)[1].drawn != s1.drawn and draw(4, 5)[1].drawn != s1.drawn
    # the step's own batch is skipped; past the end of the set a new pass starts
    _, s3 = draw(3, 5, count=26, exclude=range(4))
    assert not set(s3.drawn) & {0, 1, 2, 3} and sorted(s3.drawn) == list(range(4, 30))
    _, s4 = draw(3, 5, count=40, exclude=range(4))
    assert sorted(s4.drawn[:26]) == list(range(4, 30)) and len(s4.drawn) == 40


def test_dapo_commit_plan_leaves_exactly_the_batch_size_of_terminal_prompts():
    included = [*(False, False, True, False), *(True, False, False, False), *(True, True, False, False)]
    plan = plan_dapo_commit(included, registered=4, target=4)
    assert plan.publish == [2, 4, 8, 9] and plan.fill == []
    assert plan.drop == [0, 1, 3, 5, 6, 7, 10, 11]
    short = plan_dapo_commit([True, False, False, False, False, False, True, False], registered=4, target=4)
    assert short.publish == [0, 6] and short.fill == [1, 2] and short.drop == [3, 4, 5, 7]
    with pytest.raises(DapoCapExceeded, match="no mixed group"):
        plan_dapo_commit([False] * 8, registered=4, target=4)
    with pytest.raises(ValueError, match="5 groups kept"):
        plan_dapo_commit([True] * 5, registered=4, target=4)


# ---- the manager against verl's real replay buffer (in-memory TransferQueue, no Ray) ---------------
class MemoryTQ:
    """The TransferQueue calls the manager, workers and replay buffer make, over one dict of tags."""

    def __init__(self) -> None:
        self.parts: dict[str, dict[str, dict]] = defaultdict(dict)

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        for key, tag in zip(keys, tags, strict=True):
            self.parts[partition_id].setdefault(key, {}).update(tag)

    async def async_kv_put(self, key, partition_id, fields=None, tag=None):
        self.parts[partition_id].setdefault(key, {}).update(tag or {})

    async def async_kv_clear(self, keys, partition_id):
        self.kv_clear(keys, partition_id)

    def kv_clear(self, keys, partition_id):
        for key in [keys] if isinstance(keys, str) else keys:
            self.parts[partition_id].pop(key, None)

    def kv_list(self, partition_id=None):
        parts = self.parts if partition_id is None else {partition_id: self.parts[partition_id]}
        return {p: {k: dict(t) for k, t in items.items()} for p, items in parts.items()}


class Remote:
    """A Ray actor handle's `.method.remote(...)` over a local object (returns the awaitable)."""

    def __init__(self, target) -> None:
        self._target = target

    def __getattr__(self, name):
        return SimpleNamespace(remote=getattr(self._target, name))


@pytest.fixture
def manager_env(monkeypatch, tmp_path):
    from verl.trainer.ppo.v1 import replay_buffer
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    from repro.verl_plugin import rollout

    store = MemoryTQ()
    monkeypatch.setattr(rollout, "tq", store)
    monkeypatch.setattr(replay_buffer, "tq", store)
    published: list[tuple[str, int]] = []
    seen_rows: list[dict] = []

    async def publish(self, output, validate, **kwargs):  # verl's TQ worker: one key per session
        published.append((kwargs["uid"], kwargs["session_id"]))
        key = f"{kwargs['uid']}_{kwargs['session_id']}_0"
        await store.async_kv_put(key, "train", tag={"status": "success", "global_steps": kwargs["global_steps"]})

    monkeypatch.setattr(AgentLoopWorkerTQ.__ray_actor_class__, "_agent_loop_postprocess", publish)

    def never_wait(self, partition_id, last_debug_time):
        raise AssertionError("verl's replay buffer would wait: too few terminal prompt groups")

    monkeypatch.setattr(replay_buffer.ReplayBuffer, "_wait_for_next_poll", never_wait)

    def make(kinds: list[str], batch: list[int], spec: SamplerSpec, workers: int = 2):
        train = write_train_set(tmp_path / "train.parquet", kinds)

        async def agent_loop(params, trajectory, trace=False, session_id=0, **row):
            seen_rows.append(row)
            # as verl's AgentLoopOutput: a score and the response's mask (3 generated tokens, what the tokens count)
            score = reward_of(row["reward_model"]["ground_truth"], session_id)
            return [SimpleNamespace(reward_score=score, response_mask=[1, 1, 1])]

        handles = []
        for _ in range(workers):
            worker = object.__new__(rollout.AdaWorker)
            worker._ada = {}
            worker.config = OmegaConf.create(
                {
                    "actor_rollout_ref": {
                        "rollout": {
                            "temperature": 1.0,
                            "top_p": 1.0,
                            "top_k": -1,
                            "calculate_log_probs": False,
                            "agent": {"default_agent_loop": "single_turn_agent"},
                        }
                    }
                }
            )
            worker._run_agent_loop = agent_loop
            handles.append(Remote(worker))
        manager = object.__new__(rollout.ReinforceAdaAgentLoopManager)
        manager.spec = spec
        manager.config = OmegaConf.create({"data": {"train_files": [train], "seed": 7, "prompt_key": "prompt"}})
        manager.agent_loop_workers = handles
        manager.logged = []
        manager._log = lambda step, metrics: manager.logged.append((step, metrics))
        return manager, trainer_batch(train, batch, step=3, store=store)

    return SimpleNamespace(make=make, store=store, published=published, seen_rows=seen_rows)


def trainer_batch(train: str, indices: list[int], step: int, store: MemoryTQ):
    """What verl's sync trainer hands the manager: `_next_train_batch` + `_submit_batch_to_rollout`."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.rl_dataset import collate_fn

    dataset = verl_dataset(train)
    batch_dict = collate_fn([dataset[i] for i in indices])
    batch_dict["uid"] = np.array([str(uuid.uuid4()) for _ in indices], dtype=object)
    batch = tu.get_tensordict(batch_dict)
    tu.assign_non_tensor_data(batch, "global_steps", step)
    tags = [{"is_prompt": True, "status": "pending", "global_steps": step} for _ in indices]
    store.kv_batch_put(keys=list(batch["uid"]), partition_id="train", tags=tags)
    return batch


def replay_buffer_sample(batch_size: int, step: int = 3):
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    buffer = ReplayBuffer(
        trainer_mode="sync",
        trainer_config=OmegaConf.create({}),
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs=OmegaConf.create({}),
        poll_interval=0.0,
        refill_fn=lambda count: pytest.fail(f"verl's replay buffer asked the trainer for {count} prompts"),
        filter_groups_metric=None,  # algorithm.filter_groups.enable=false
        train_batch_size=batch_size,
        gen_batch_size=batch_size,
    )
    return buffer.sample(global_steps=step, partition_id="train", batch_size=batch_size)


def uid_groups(keys: list[str]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for key in keys:
        uid, session, _ = key.split("_")
        groups[uid].append(int(session))
    return {uid: sorted(s) for uid, s in groups.items()}


def test_manager_dapo_step_gives_verls_replay_buffer_exactly_the_kept_groups(manager_env):
    # the dataloader batch (dataset rows 0-3) has one mixed group; the other four rows are mixed
    kinds = [RIGHT, WRONG, MIXED, WRONG] + [MIXED] * 4
    manager, batch = manager_env.make(kinds, [0, 1, 2, 3], DAPO)
    batch_uids = list(batch["uid"])
    asyncio.run(manager._generate_adaptive(batch))

    ((step, metrics),) = manager.logged
    assert step == 3 and metrics["dapo/num_gen_batches"] == 2 and metrics["dapo/kept_prompts"] == 4
    assert metrics["dapo/discarded_surplus"] == 1 and metrics["dapo/cap_hit"] == 0
    # refill rows reached the agent loop with the dataloader rows' fields, fresh uids and the step
    rows = manager_env.seen_rows
    assert len({frozenset(r) for r in rows}) == 1
    refill_uids = list(dict.fromkeys(r["uid"] for r in rows if r["uid"] not in batch_uids))
    assert len(refill_uids) == 4 and all(r["global_steps"] == 3 for r in rows)
    refill_index = {r["uid"]: r["index"] for r in rows}
    assert sorted(refill_index[u] for u in refill_uids) == [4, 5, 6, 7]  # the step's own prompts are skipped

    meta, _ = replay_buffer_sample(batch_size=4)
    groups = uid_groups(meta.keys)
    assert set(groups) == {batch_uids[2], *refill_uids[:3]}  # kept: slot 2 and the first three refills
    assert all(sessions == [0, 1, 2, 3] for sessions in groups.values()) and len(meta.keys) == 16
    # nothing of this step is left for a later step: dropped prompt keys were cleared, kept ones sampled
    left = manager_env.store.parts["train"]
    assert not [k for k, t in left.items() if t.get("is_prompt")]
    assert sorted(left) == sorted(meta.keys)  # the trajectories, which the trainer clears after the update


def test_manager_dapo_at_the_cap_gives_a_short_batch_or_a_clear_error(manager_env):
    kinds = [RIGHT, WRONG, MIXED, WRONG] + [WRONG] * 16
    manager, batch = manager_env.make(kinds, [0, 1, 2, 3], DAPO.with_(max_num_gen_batches=2))
    batch_uids = list(batch["uid"])
    asyncio.run(manager._generate_adaptive(batch))
    assert manager.logged[0][1]["dapo/cap_hit"] == 1 and manager.logged[0][1]["dapo/kept_prompts"] == 1
    meta, _ = replay_buffer_sample(batch_size=4)
    assert uid_groups(meta.keys) == {batch_uids[2]: [0, 1, 2, 3]}  # one group x 4; verl pads the rest
    assert not [k for k, t in manager_env.store.parts["train"].items() if t.get("is_prompt")]

    manager_env.store.parts.clear()
    manager, batch = manager_env.make([WRONG] * 20, [0, 1, 2, 3], DAPO.with_(max_num_gen_batches=2))
    with pytest.raises(DapoCapExceeded, match="no mixed group"):
        asyncio.run(manager._generate_adaptive(batch))
    statuses = {t.get("status") for t in manager_env.store.parts["train"].values() if t.get("is_prompt")}
    assert statuses == {"failure"}


# ---- the bench's families through the same manager (repro.sampling.policies) -----------------------
def test_manager_pods_publishes_the_max_variance_four_of_sixteen_and_their_affine_advantage(manager_env):
    """PODS rides the reinforce_ada path: 16 drawn, the 4 of largest reward variance published, and the
    baseline/scale of GRPO over those 4 left for the plugin's estimator (A = (r - baseline) x scale)."""
    from repro import catalog
    from repro.verl_plugin import pool_stats, state

    spec = catalog.get_method("pods-16-4").sampler_spec()
    assert (spec.kind, spec.n, spec.pods_generate) == ("pods", 4, 16)
    # MIXED is right on session 0 only: 1 of 16; the best 4 by variance are that one and three wrong ones
    kinds = [MIXED, WRONG, RIGHT, MIXED]
    manager, batch = manager_env.make(kinds, [0, 1, 2, 3], spec)
    uids = list(batch["uid"])
    state.reset()
    pool_stats.clear()
    asyncio.run(manager._generate_adaptive(batch))
    ((_, metrics),) = manager.logged
    assert metrics["sampler/responses_total"] == 64 and metrics["tokens/generated"] == 64 * 3
    assert metrics["tokens/trained"] == 4 * 4 * 3  # every prompt keeps 4 (an all-equal group has A = 0), 3 tokens each
    meta, _ = replay_buffer_sample(batch_size=4)
    groups = uid_groups(meta.keys)
    assert set(groups) == set(uids) and all(s == [0, 1, 2, 3] for s in groups.values())
    std = np.std([1.0, 0.0, 0.0, 0.0], ddof=1)  # the authors' torch.std: unbiased
    for slot in (0, 3):
        stat = pool_stats.lookup(uids[slot])
        assert stat.pool_size == 16 and stat.pool_mean == pytest.approx(0.25)  # the field the estimator reads
        assert stat.weight == pytest.approx(1.0 / (std + 1e-4))
    pool_stats.clear()


def test_manager_greso_fills_the_batch_with_mixed_groups_and_remembers_each_prompt(manager_env):
    """GRESO rides DAPO's refill path: a first round of 1.5x the batch (6 prompts for 4), all-equal groups
    dropped, refills until 4 mixed groups, exactly those published; every drawn prompt enters its memory."""
    from repro import catalog
    from repro.verl_plugin import state

    spec = catalog.get_method("greso").sampler_spec(n=4)
    kinds = [MIXED, WRONG, MIXED, RIGHT, MIXED, WRONG] + [MIXED] * 10
    manager, batch = manager_env.make(kinds, [0, 1, 2, 3], spec)
    state.reset()
    asyncio.run(manager._generate_adaptive(batch))
    ((_, metrics),) = manager.logged
    # round 1: 6 prompts (1.5 x 4), 3 mixed; one refill of 2 (both mixed): 5 mixed, the first 4 kept
    assert (metrics["greso/prompts_drawn"], metrics["greso/rounds"], metrics["greso/kept_prompts"]) == (8, 2, 4)
    assert metrics["tokens/generated"] == 8 * 4 * 3 and metrics["tokens/trained"] == 4 * 4 * 3
    meta, _ = replay_buffer_sample(batch_size=4)
    groups = uid_groups(meta.keys)
    assert len(groups) == 4 and all(s == [0, 1, 2, 3] for s in groups.values())
    kept_rows = {r["uid"]: r["index"] for r in manager_env.seen_rows}
    assert all(kinds[kept_rows[u]] == MIXED for u in groups)  # only mixed groups reach the update
    memory = state.estimator(spec)
    assert len(memory.histories) == 8  # every prompt the rounds drew, by its dataset index
    state.reset()
