"""The `reinforce_ada` advantage estimator, driven through verl 0.9.1's own advantage code paths.

Pools come from the numpy sampling core with scripted rewards, so the expected values are known by
hand: the baseline is the mean of the WHOLE pool (larger than the kept group of 4), Est multiplies by
the residual weight, and verl's padding rows get 0.
"""

from __future__ import annotations

import importlib
import sys
import threading
import uuid

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

from repro.sampling import SamplerSpec, StepSampler, make_estimator, residual_weights, run_step_sync
from repro.sampling.advantage import group_stats
from repro.verl_plugin import advantage as ada
from repro.verl_plugin import pool_stats
from repro.verl_plugin.pool_stats import PoolStat

STEP = 3
MAX_LEN = 7
SEQ_SPEC = SamplerSpec(kind="seq", exit_rule="balance", n=4, round_size=8, max_rounds=4)
ALGO_CONFIG = {"adv_estimator": ada.ADV_ESTIMATOR, "gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True}

# One scripted reward stream per prompt, consumed 8 at a time (round_size); exit rule: >= 2 pos and >= 2 neg.
_ROUNDS = {
    0: [[1, 0, 1, 0, 0, 1, 0, 0]],  # exits after round 1: pool 8, mean 3/8, kept group mean 1/2
    1: [[0, 0, 0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 1, 0]],  # round 2: pool 16, mean 1/8
    2: [[0] * 8, [0] * 8, [0, 1, 0, 0, 1, 0, 0, 0]],  # round 3: pool 24, mean 1/12
    3: [[1] * 8, [1] * 8, [1] * 8, [1, 0, 1, 1, 1, 1, 0, 1]],  # round 4: pool 32, mean 30/32
    4: [[0] * 8] * 4,  # unresolved: 32 negatives, kept group uniform, advantage 0
    5: [[1, 1, 0, 0, 1, 0, 1, 0]],  # round 1: pool 8, mean 1/2 (equal to its kept group's mean)
}
STREAMS = np.array(
    [np.concatenate([*rounds, [0] * (32 - 8 * len(rounds))]) for rounds in _ROUNDS.values()], dtype=float
)
POOL_SIZES = np.array([8 * len(rounds) for rounds in _ROUNDS.values()])


@pytest.fixture(autouse=True)
def _empty_store():
    pool_stats.clear()
    yield
    pool_stats.clear()


def new_uids(count: int) -> list[str]:
    return [str(uuid.uuid4()) for _ in range(count)]


def scripted(streams: np.ndarray):
    """A `run_step_sync` sample function that hands out each slot's stream in order."""
    position = np.zeros(streams.shape[0], dtype=np.int64)

    def sample(slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
        out = np.zeros((slots.size, int(counts.max())))
        for row, (slot, count) in enumerate(zip(slots, counts, strict=True)):
            out[row, :count] = streams[slot, position[slot] : position[slot] + count]
            position[slot] += count
        return out

    return sample


def run_seq(uids: list[str], spec: SamplerSpec = SEQ_SPEC):
    result = run_step_sync(StepSampler(spec, uids, step=STEP), scripted(STREAMS))
    np.testing.assert_array_equal(result.pool_size, POOL_SIZES)
    np.testing.assert_array_equal(result.exit_round, [1, 2, 3, 4, 0, 1])
    return result


def record_result(result, uids: list[str], pools: list[np.ndarray]) -> None:
    """What the rollout manager does: one PoolStat per prompt uid, from the step's result."""
    pool_stats.record(
        {
            uid: PoolStat(
                pool_mean=float(result.pool_mean[s]),
                pool_size=int(result.pool_size[s]),
                weight=float(result.weight[s]),
                pool_std=float(np.std(pools[s], ddof=1)),
                step=STEP,
            )
            for s, uid in enumerate(uids)
        }
    )


def build_batch(result, uids: list[str], seed: int = 0, pads: int = 2):
    """A verl batch of the KEPT rows (shuffled, variable lengths, reward on the last valid token) + pad rows.

    Returns (data, source) where source[i] is the row of `result` behind batch row i, -1 for padding.
    """
    rng = np.random.default_rng(seed)
    kept = result.slot.size
    source = rng.permutation(np.concatenate([np.arange(kept), np.full(pads, -1)]))
    rows = source.size
    lengths = rng.integers(1, MAX_LEN + 1, size=rows)
    rewards = torch.zeros(rows, MAX_LEN)
    mask = torch.zeros(rows, MAX_LEN)
    pad_uid = f"pad{uuid.uuid4().hex}"
    row_uids = []
    for i, src in enumerate(source):
        if src < 0:
            row_uids.append(pad_uid)
            continue
        mask[i, : lengths[i]] = 1
        rewards[i, lengths[i] - 1] = float(result.reward[src])
        row_uids.append(uids[result.slot[src]])
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array(row_uids, dtype=object)},
    )
    return data, source


def row_values(data: DataProto) -> torch.Tensor:
    """The per-row advantage, read on the last valid token (0 for rows without tokens)."""
    adv = data.batch["advantages"]
    last = (data.batch["response_mask"].sum(-1).long() - 1).clamp(min=0)
    return adv[torch.arange(adv.shape[0]), last]


def check_broadcast(data: DataProto, per_row: np.ndarray) -> None:
    """advantages == per_row on every response token, 0 elsewhere; returns == advantages."""
    adv = data.batch["advantages"].double()
    mask = data.batch["response_mask"].double()
    expected = torch.as_tensor(per_row, dtype=torch.float64)[:, None] * mask
    torch.testing.assert_close(adv, expected, rtol=1e-6, atol=1e-6)
    assert torch.all(adv[mask == 0] == 0)
    torch.testing.assert_close(data.batch["returns"], data.batch["advantages"])


def seq_case(seed: int = 0):
    uids = new_uids(len(_ROUNDS))
    result = run_seq(uids)
    pools = [STREAMS[s, : POOL_SIZES[s]] for s in range(len(uids))]
    record_result(result, uids, pools)
    data, source = build_batch(result, uids, seed=seed)
    real = source >= 0
    pool_mean = np.array([p.mean() for p in pools])
    expected = np.zeros(source.size)
    expected[real] = result.reward[source[real]] - pool_mean[result.slot[source[real]]]
    return uids, result, data, source, expected


def assert_global_baseline(result, data, source, expected) -> None:
    real = source >= 0
    check_broadcast(data, expected)
    values = row_values(data).double().numpy()
    np.testing.assert_allclose(values[real], result.advantage[source[real]], atol=1e-6)
    assert np.all(values[~real] == 0)
    assert torch.all(data.batch["advantages"][~real] == 0)
    # the pool mean is not the kept group's mean: the estimator must not have used the latter
    _, group_mean, _ = group_stats(result.slot, result.reward, result.pool_size.size)
    differs = np.abs(result.pool_mean - group_mean) > 0.1
    assert differs[[0, 1, 2, 3]].all() and not differs[5]
    rows = real.copy()
    rows[real] = differs[result.slot[source[real]]]
    group_version = result.reward[source[rows]] - group_mean[result.slot[source[rows]]]
    assert np.all(np.abs(values[rows] - group_version) > 0.1)
    # every row of the five resolved prompts carries signal; the unresolved prompt's four rows are 0
    assert np.count_nonzero(np.abs(values[real]) > 1e-6) == 20
    assert np.all(values[real][result.slot[source[real]] == 4] == 0)


def test_seq_balance_through_verl_compute_advantage() -> None:
    _, result, data, source, expected = seq_case(seed=1)
    assert result.slot.size == 4 * len(_ROUNDS) and np.all(result.pool_size >= 8)
    out = compute_advantage(data, adv_estimator=ada.ADV_ESTIMATOR, num_repeat=4, config=OmegaConf.create(ALGO_CONFIG))
    assert_global_baseline(result, out, source, expected)
    # by hand for prompt 0: rewards 1 and 0 against a pool mean of 3/8
    values = row_values(out).numpy()
    first = (source >= 0) & (np.where(source >= 0, result.slot[source], -1) == 0)
    np.testing.assert_allclose(np.sort(values[first]), [-3 / 8, -3 / 8, 5 / 8, 5 / 8], atol=1e-7)


def test_seq_balance_through_verl_v1_multi_trajectory_path() -> None:
    uids, result, data, source, expected = seq_case(seed=2)
    keys, seen = [], {}
    for uid in data.non_tensor_batch["uid"]:
        keys.append(f"{uid}_{seen.get(uid, 0)}_0")
        seen[uid] = seen.get(uid, 0) + 1
    out = compute_advantage_for_multi_trajectories(
        data,
        batch_keys=keys,
        adv_estimator=ada.ADV_ESTIMATOR,
        gamma=1.0,
        lam=1.0,
        num_repeat=4,
        norm_adv_by_std_in_grpo=True,
        config=OmegaConf.create(ALGO_CONFIG),
    )
    assert_global_baseline(result, out, source, expected)
    assert set(uids) <= set(data.non_tensor_batch["uid"])


def test_global_std_norm_divides_by_unbiased_pool_std() -> None:
    uids = new_uids(len(_ROUNDS))
    result = run_seq(uids, SEQ_SPEC.with_(global_std_norm=True))
    pools = [STREAMS[s, : POOL_SIZES[s]] for s in range(len(uids))]
    record_result(result, uids, pools)
    data, source = build_batch(result, uids, seed=3)
    config = OmegaConf.create({**ALGO_CONFIG, "reinforce_ada": {"global_std_norm": True}})
    out = compute_advantage(data, adv_estimator=ada.ADV_ESTIMATOR, num_repeat=4, config=config)
    real = source >= 0
    slot = result.slot[source[real]]
    mean = np.array([p.mean() for p in pools])
    std = np.array([np.sqrt(((p - p.mean()) ** 2).sum() / (p.size - 1)) for p in pools])
    expected = np.zeros(source.size)
    expected[real] = (result.reward[source[real]] - mean[slot]) / (std[slot] + 1e-6)
    check_broadcast(out, expected)
    values = row_values(out).double().numpy()
    np.testing.assert_allclose(values[real], result.advantage[source[real]], rtol=1e-6, atol=1e-6)
    # prompt 1 by hand: pool of 16 with 2 positives, std = sqrt(16 * (1/8) * (7/8) / 15)
    std1 = np.sqrt(16 * (1 / 8) * (7 / 8) / 15)
    assert np.isclose(std[1], std1)
    assert np.isclose(values[real][slot == 1].max(), (1 - 1 / 8) / (std1 + 1e-6), rtol=1e-6)
    # the knob matters: without it the same batch gives the plain centred rewards
    plain = compute_advantage(
        build_batch(result, uids, seed=3)[0], adv_estimator=ada.ADV_ESTIMATOR, config=OmegaConf.create(ALGO_CONFIG)
    )
    assert np.abs(row_values(plain).numpy()[real][slot == 1] - values[real][slot == 1]).max() > 1.0
    # a plain dict config is read the same way
    out_dict = compute_advantage(
        build_batch(result, uids, seed=3)[0],
        adv_estimator=ada.ADV_ESTIMATOR,
        config={"reinforce_ada": {"global_std_norm": True}},
    )
    torch.testing.assert_close(out_dict.batch["advantages"], out.batch["advantages"])


def test_est_weights_multiply_the_global_baseline() -> None:
    spec = SamplerSpec(kind="est", n_avg=8, n_min=2, n_max=32, w_max=1.5, kappa=2.0, decay=0.9)
    uids = new_uids(5)
    positives = np.array([0, 1, 4, 7, 8])
    estimator = make_estimator(spec)
    estimator.update(uids, positives, np.full(5, 8))
    # prior mean 0.5 with strength 2 gives a = b = 1; after decay 0.9 and k of 8: p = (0.9 + k) / 9.8
    p_hand = (0.9 + positives) / 9.8
    np.testing.assert_allclose(estimator.p_hat(uids), p_hand)
    g = 1 / np.sqrt(p_hand)
    w_hand0 = min(g[0] / g.mean(), 1.5)
    assert w_hand0 == 1.5  # the hardest prompt is clipped
    w_hand2 = (1 / np.sqrt(0.5)) / g.mean()  # p_hat = 4.9 / 9.8 = 0.5, not clipped
    w_expected = residual_weights(estimator.p_hat(uids), spec.w_max)

    rng = np.random.default_rng(11)
    p_true = np.array([0.15, 0.3, 0.5, 0.7, 0.9])
    sampler = StepSampler(spec, uids, step=STEP, estimator=estimator)
    pools: dict[int, list[float]] = {s: [] for s in range(5)}

    def sample(slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
        out = (rng.random((slots.size, int(counts.max()))) < p_true[slots, None]).astype(float)
        for row, (slot, count) in enumerate(zip(slots, counts, strict=True)):
            pools[int(slot)].extend(out[row, :count])
        return out

    result = run_step_sync(sampler, sample)
    np.testing.assert_allclose(result.weight, w_expected)
    assert np.isclose(result.weight[0], w_hand0) and np.isclose(result.weight[2], w_hand2)
    assert result.pool_size.sum() == 8 * 5 and result.slot.size == result.pool_size.sum()  # Est keeps every row
    record_result(result, uids, [np.array(pools[s]) for s in range(5)])

    data, source = build_batch(result, uids, seed=4)
    out = compute_advantage(data, adv_estimator=ada.ADV_ESTIMATOR, config=OmegaConf.create(ALGO_CONFIG))
    real = source >= 0
    slot = result.slot[source[real]]
    mean = np.array([np.mean(pools[s]) for s in range(5)])
    expected = np.zeros(source.size)
    expected[real] = (result.reward[source[real]] - mean[slot]) * w_expected[slot]
    check_broadcast(out, expected)
    values = row_values(out).double().numpy()
    np.testing.assert_allclose(values[real], result.advantage[source[real]], atol=1e-6)
    # by hand for prompt 0: its rows are (r - pool mean) * 1.5, and not the unweighted value
    rows0 = values[real][slot == 0]
    r0 = result.reward[source[real]][slot == 0]
    assert np.ptp(pools[0]) > 0, "the test needs a mixed pool for prompt 0"
    np.testing.assert_allclose(rows0, (r0 - np.mean(pools[0])) * 1.5, atol=1e-6)
    assert np.abs(rows0 - (r0 - np.mean(pools[0]))).max() > 0.1


def make_plain_batch(uids: list[str], rewards: list[float]) -> DataProto:
    rows = len(uids)
    tlr = torch.zeros(rows, 3)
    tlr[:, -1] = torch.tensor(rewards)
    mask = torch.ones(rows, 3)
    for i, uid in enumerate(uids):
        if uid.startswith("pad"):
            mask[i] = 0
            tlr[i] = 0
    return DataProto.from_dict(
        tensors={"token_level_rewards": tlr, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


def test_unknown_uids_mean_misconfiguration() -> None:
    data = make_plain_batch(new_uids(8), [1.0, 0.0] * 4)
    with pytest.raises(RuntimeError, match=r"actor_rollout_ref\.rollout\.agent\.agent_loop_manager_class"):
        compute_advantage(data, adv_estimator=ada.ADV_ESTIMATOR, config=OmegaConf.create(ALGO_CONFIG))


def test_half_unknown_is_tolerated_and_padding_does_not_count() -> None:
    known = new_uids(3)
    pool_stats.record({u: PoolStat(pool_mean=0.25, pool_size=8, step=STEP) for u in known})
    unknown = new_uids(3)
    pads = [f"pad{uuid.uuid4().hex}"] * 5
    uids = known + unknown + pads
    data = make_plain_batch(uids, [1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0, 0, 0, 0, 0])
    out = compute_advantage(data, adv_estimator=ada.ADV_ESTIMATOR, config=OmegaConf.create(ALGO_CONFIG))
    adv = out.batch["advantages"]
    torch.testing.assert_close(adv[:3, -1], torch.tensor([0.75, -0.25, 0.75]))
    assert torch.all(adv[3:] == 0), "unknown rows (mask 1) and padding rows get 0"
    # one more unknown real row tips it over half
    data = make_plain_batch([*known[:2], *unknown, *pads], [1.0] * 10)
    with pytest.raises(RuntimeError, match="agent_loop_manager_class"):
        compute_advantage(data, adv_estimator=ada.ADV_ESTIMATOR, config=None)


def test_all_padding_batch_is_zero() -> None:
    data = make_plain_batch(["pad0", "pad0"], [0.0, 0.0])
    out = compute_advantage(data, adv_estimator=ada.ADV_ESTIMATOR, config=None)
    assert torch.all(out.batch["advantages"] == 0)


def test_registered_with_verl_and_reimport_is_safe() -> None:
    assert core_algos.get_adv_estimator_fn("reinforce_ada") is ada.compute_reinforce_ada_advantage
    assert importlib.import_module("repro.verl_plugin.advantage") is ada
    reloaded = importlib.reload(ada)
    assert core_algos.get_adv_estimator_fn("reinforce_ada") is reloaded.compute_reinforce_ada_advantage

    def other(token_level_rewards, response_mask, **kwargs):
        return token_level_rewards, token_level_rewards

    with pytest.raises(ValueError, match="already been registered"):
        core_algos.register_adv_est("reinforce_ada")(other)
    assert core_algos.get_adv_estimator_fn("reinforce_ada") is reloaded.compute_reinforce_ada_advantage


# ---- pool_stats -----------------------------------------------------------------------------------


def test_pool_stats_record_lookup_forget() -> None:
    a, b, c = new_uids(3)
    pool_stats.record(
        {
            a: PoolStat(0.5, 8, step=1),
            b: PoolStat(0.25, 16, weight=2.0, pool_std=0.4, step=2),
            c: PoolStat(1.0, 32, step=3),
        }
    )
    assert pool_stats.size() == 3
    assert pool_stats.lookup(b) == PoolStat(0.25, 16, 2.0, 0.4, 2)
    assert pool_stats.lookup("nope") is None
    mean, weight, std, known = pool_stats.lookup_many([b, "nope", np.str_(a), c.encode()])
    np.testing.assert_array_equal(mean, [0.25, 0, 0.5, 1.0])
    np.testing.assert_array_equal(weight, [2.0, 0, 1.0, 1.0])
    np.testing.assert_array_equal(std, [0.4, 0, 0, 0])
    np.testing.assert_array_equal(known, [True, False, True, True])
    pool_stats.record({a: PoolStat(0.75, 8, step=3)})  # replaces
    assert pool_stats.lookup(a).pool_mean == 0.75 and pool_stats.size() == 3
    assert pool_stats.forget_before(3) == 1  # only b (step 2) is older than 3
    assert pool_stats.lookup(b) is None and pool_stats.size() == 2
    assert pool_stats.forget_before(3) == 0
    pool_stats.clear()
    assert pool_stats.size() == 0


def test_pool_stat_validation_and_from_rewards() -> None:
    with pytest.raises(TypeError):
        pool_stats.record({"x": (0.5, 8)})
    with pytest.raises(ValueError):
        PoolStat(0.5, 0)
    with pytest.raises(ValueError):
        PoolStat(float("nan"), 4)
    rewards = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    stat = PoolStat.from_rewards(rewards, weight=1.2, step=7)
    _, mean, std = group_stats(np.zeros(5, dtype=np.int64), rewards, 1)
    assert stat == PoolStat(mean[0], 5, 1.2, std[0], 7)
    assert PoolStat.from_rewards([1.0]).pool_std == 0.0


def test_pool_stats_thread_safety() -> None:
    threads_n, batches, per_batch = 4, 200, 3
    errors: list[BaseException] = []
    done = threading.Event()

    def writer(t: int) -> None:
        try:
            for k in range(batches):
                pool_stats.record({f"{t}-{k}-{j}": PoolStat(0.5, 8, step=t) for j in range(per_batch)})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            while not done.is_set():
                assert pool_stats.forget_before(-1) == 0  # iterates the store while writers insert
                pool_stats.lookup_many([f"0-{k}-0" for k in range(0, batches, 7)])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        readers = [threading.Thread(target=reader) for _ in range(2)]
        writers = [threading.Thread(target=writer, args=(t,)) for t in range(threads_n)]
        for th in readers + writers:
            th.start()
        for th in writers:
            th.join()
        done.set()
        for th in readers:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    assert pool_stats.size() == threads_n * batches * per_batch
    assert pool_stats.forget_before(2) == 2 * batches * per_batch  # the stats of threads 0 and 1
    assert pool_stats.size() == 2 * batches * per_batch


def test_knob_reaches_the_estimator_from_verls_own_config() -> None:
    """verl hands the estimator `config.algorithm` as a DictConfig; the knob is an added key there."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        on = compose(
            config_name="ppo_trainer",
            overrides=[f"algorithm.adv_estimator={ada.ADV_ESTIMATOR}", "+algorithm.reinforce_ada.global_std_norm=true"],
        )
        off = compose(config_name="ppo_trainer", overrides=[f"algorithm.adv_estimator={ada.ADV_ESTIMATOR}"])
    assert ada.global_std_norm_enabled(on.algorithm) and not ada.global_std_norm_enabled(off.algorithm)
    uid = new_uids(1)[0]
    pool_stats.record({uid: PoolStat(pool_mean=0.25, pool_size=8, pool_std=0.5, step=STEP)})
    data = make_plain_batch([uid, uid], [1.0, 0.0])
    adv_on = compute_advantage(data, adv_estimator=on.algorithm.adv_estimator, config=on.algorithm)
    torch.testing.assert_close(adv_on.batch["advantages"][:, -1], torch.tensor([0.75, -0.25]) / (0.5 + 1e-6))
    data = make_plain_batch([uid, uid], [1.0, 0.0])
    adv_off = compute_advantage(data, adv_estimator=off.algorithm.adv_estimator, config=off.algorithm)
    torch.testing.assert_close(adv_off.batch["advantages"][:, -1], torch.tensor([0.75, -0.25]))
