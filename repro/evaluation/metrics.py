"""Ave@k, pass@k and the problem-weighted average of PROTOCOL.md "Evaluation: Ave@32" (numpy only).

The paper's headline number is Ave@32: every problem is sampled 32 times and the score is the mean
accuracy over all problems x samples. Its "weighted average" column combines benchmarks weighted by their
number of problems (500/272/675/230), which is the same as pooling every problem of every benchmark.
pass@k uses the unbiased estimator 1 - C(n-c, k)/C(n, k) from n samples with c correct.

All accuracies here are fractions in [0, 1]; the paper's tables are in percent (multiply by 100).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_KS",
    "ave_at_k",
    "pass_at_k",
    "pass_at_k_array",
    "per_problem_accuracy",
    "summarize",
    "weighted_average",
]

DEFAULT_KS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
_RECORD_FIELDS = ("benchmark", "problem_id", "sample_index", "score")


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) is correct.

    Equals 1 - C(n-c, k)/C(n, k), but is computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i): the binomials
    overflow a float already near n = 1030, while the product has c factors in (0, 1] and stays accurate
    (relative error about c machine epsilons). When fewer than k samples are wrong (n - c < k) every
    k-subset holds a correct one and the value is exactly 1.

    Raises ValueError unless 0 <= c <= n and 1 <= k <= n: the estimator needs at least k samples.
    """
    n, c, k = _as_int("n", n), _as_int("c", c), _as_int("k", k)
    if n < 1:
        raise ValueError(f"pass@k needs n >= 1 samples, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n (the unbiased estimator needs n >= k samples), got k={k}, n={n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_at_k_array(n: int | np.ndarray, c: np.ndarray | Sequence[int], k: int) -> np.ndarray:
    """`pass_at_k` elementwise over arrays of c (and n, broadcast against c) for one k.

    Same product form and validation as the scalar version, so both agree to the last bit: each element
    multiplies its c factors (1 - k/i), i = n-c+1..n, in the same order; slots past c are padded with 1.
    Memory is size x max(c) floats, fine for evaluation-sized inputs (thousands of problems, n <= 1024).
    """
    n_arr, c_arr = np.broadcast_arrays(np.asarray(n), np.asarray(c))
    k = _as_int("k", k)
    for name, arr in (("n", n_arr), ("c", c_arr)):
        integral = np.issubdtype(arr.dtype, np.integer) or (
            np.issubdtype(arr.dtype, np.floating) and bool(np.all(np.isfinite(arr) & (arr == np.round(arr))))
        )
        if not integral:
            raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    n_arr, c_arr = n_arr.astype(np.int64), c_arr.astype(np.int64)
    if n_arr.size == 0:
        return np.zeros(n_arr.shape, dtype=float)
    if np.any(n_arr < 1):
        raise ValueError(f"pass@k needs n >= 1 samples, got min n={int(n_arr.min())}")
    if np.any((c_arr < 0) | (c_arr > n_arr)):
        bad = np.flatnonzero((c_arr < 0) | (c_arr > n_arr))[0]
        raise ValueError(
            f"pass@k needs 0 <= c <= n, got c={int(c_arr.flat[bad])}, n={int(n_arr.flat[bad])} at index {bad}"
        )
    if k < 1 or np.any(k > n_arr):
        raise ValueError(
            f"pass@k needs 1 <= k <= n (the unbiased estimator needs n >= k samples), "
            f"got k={k}, min n={int(n_arr.min())}"
        )
    max_c = int(c_arr.max())
    j = np.arange(max_c)
    i = (n_arr - c_arr + 1)[..., None] + j  # the factor indices n-c+1 .. n, padded past c
    factors = np.where(j < c_arr[..., None], 1.0 - k / i, 1.0)
    prod = np.ones(n_arr.shape, dtype=float)
    for col in range(max_c):  # left to right, as in the scalar loop
        prod = prod * factors[..., col]
    return np.where(n_arr - c_arr < k, 1.0, 1.0 - prod)


def _scores_2d(scores: np.ndarray) -> np.ndarray:
    arr = np.asarray(scores, dtype=float)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"scores must be a non-empty [problems, samples] array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("scores must be finite")
    return arr


def per_problem_accuracy(scores: np.ndarray) -> np.ndarray:
    """Mean score of each problem over its samples: [problems, samples] -> [problems].

    The per-problem pass rate is what the samplers adapt to (and what pass@k is a function of); the
    rows of a rectangular array all have the same number of samples, so their mean is Ave@k.
    """
    return _scores_2d(scores).mean(axis=1)


def ave_at_k(scores: np.ndarray) -> float:
    """Ave@k: mean score over all problems x k samples of a [problems, k] array (0/1 or float scores).

    With the same k for every problem this equals the mean of per-problem accuracies, which is why the
    paper can report it as an average accuracy with far less variance than a single sample (Ave@1).
    """
    return float(_scores_2d(scores).mean())


def weighted_average(values: Mapping[str, float], sizes: Mapping[str, int]) -> float:
    """Average of per-benchmark values weighted by problem counts, over the benchmarks in `values`.

    Weighting by problems (PROTOCOL.md: 500/272/675/230) makes the average equal to the accuracy over
    the pooled problems, so a 230-problem benchmark counts less than a 675-problem one. Benchmarks in
    `sizes` but not in `values` are ignored; a benchmark in `values` without a size raises ValueError
    naming it, since silently dropping it would change the number.
    """
    if not values:
        raise ValueError("weighted_average needs at least one benchmark value")
    missing = [name for name in values if name not in sizes]
    if missing:
        raise ValueError(f"no problem count for benchmark(s): {', '.join(missing)}")
    weights = np.array([sizes[name] for name in values], dtype=float)
    vals = np.array([values[name] for name in values], dtype=float)
    if np.any(weights < 0) or not np.all(np.isfinite(weights)):
        raise ValueError(f"problem counts must be finite and >= 0, got {dict(zip(values, weights, strict=True))}")
    if weights.sum() <= 0:
        raise ValueError("problem counts of the benchmarks present sum to 0")
    if not np.all(np.isfinite(vals)):
        raise ValueError(f"benchmark values must be finite, got {dict(values)}")
    return float(np.dot(weights, vals) / weights.sum())


def _field(record: Mapping[str, Any], name: str, index: int) -> Any:
    try:
        return record[name]
    except (KeyError, TypeError):
        raise ValueError(f"record {index} lacks field {name!r} (needs {', '.join(_RECORD_FIELDS)})") from None


def summarize(
    records: Iterable[Mapping[str, Any]],
    ks: Iterable[int] = DEFAULT_KS,
    sizes: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Per-benchmark Ave@k and pass@k, and the weighted average, from flat per-sample records.

    Each record is a mapping with `benchmark`, `problem_id`, `sample_index` and `score`. Within a
    benchmark every problem must have the same number of samples k (Ave@k is only the mean of
    per-problem accuracies when they are equally sampled), else ValueError naming the benchmark and the
    counts; a repeated (benchmark, problem_id, sample_index) also raises. pass@k is reported for the
    requested ks that are <= k (the estimator needs n >= k) and needs 0/1 scores; pass `ks=()` for float
    scores. `sizes` weights the average (default: the problems actually present, i.e. pooled accuracy).

    Returns {"benchmarks": {name: {"problems", "samples_per_problem", "ave_at_k", "pass_at_k": {k: v}}},
    "sizes": {name: weight used}, "weighted_average": float, "weighted_pass_at_k": {k: v}} with
    benchmarks in first-seen order and weighted pass@k only for ks reported by every benchmark.
    """
    ks = sorted({_as_int("k", k) for k in ks})
    if any(k < 1 for k in ks):
        raise ValueError(f"ks must be >= 1, got {ks}")
    grouped: dict[str, dict[Any, dict[Any, float]]] = {}
    for index, record in enumerate(records):
        bench, pid, sample, score = (_field(record, name, index) for name in _RECORD_FIELDS)
        samples = grouped.setdefault(bench, {}).setdefault(pid, {})
        if sample in samples:
            raise ValueError(f"duplicate record: benchmark {bench!r}, problem {pid!r}, sample {sample!r}")
        samples[sample] = float(score)
    if not grouped:
        raise ValueError("summarize needs at least one record")

    benchmarks: dict[str, dict[str, Any]] = {}
    for bench, problems in grouped.items():
        counts = {len(s) for s in problems.values()}
        if len(counts) != 1:
            raise ValueError(
                f"benchmark {bench!r}: problems have unequal sample counts {sorted(counts)}; "
                "Ave@k needs the same k for every problem"
            )
        scores = _scores_2d(np.array([[s[i] for i in sorted(s)] for s in problems.values()]))
        n = scores.shape[1]
        usable = [k for k in ks if k <= n]
        pass_k: dict[int, float] = {}
        if usable:
            if not np.all((scores == 0) | (scores == 1)):
                raise ValueError(f"benchmark {bench!r}: pass@k needs 0/1 scores; pass ks=() for float scores")
            correct = scores.sum(axis=1).astype(np.int64)
            pass_k = {k: float(pass_at_k_array(n, correct, k).mean()) for k in usable}
        benchmarks[bench] = {
            "problems": scores.shape[0],
            "samples_per_problem": n,
            "ave_at_k": ave_at_k(scores),
            "pass_at_k": pass_k,
        }

    if sizes is None:
        sizes = {bench: info["problems"] for bench, info in benchmarks.items()}
    used = {bench: sizes[bench] for bench in benchmarks if bench in sizes}
    weighted = weighted_average({b: info["ave_at_k"] for b, info in benchmarks.items()}, sizes)
    common = [k for k in ks if all(k in info["pass_at_k"] for info in benchmarks.values())]
    weighted_pass = {
        k: weighted_average({b: info["pass_at_k"][k] for b, info in benchmarks.items()}, sizes) for k in common
    }
    return {"benchmarks": benchmarks, "sizes": used, "weighted_average": weighted, "weighted_pass_at_k": weighted_pass}
