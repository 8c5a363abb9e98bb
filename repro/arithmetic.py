"""One arithmetic for the CPU miniature on any x86 CPU: the kernel choices pinned before torch or numpy loads.

The same torch wheel computes different bits on different CPUs (ATen's AVX512 kernels, MKL's dispatch,
numpy's SIMD ufuncs, the thread count), and the tiny model's training is chaotic in those bits: the committed
results of an Intel Xeon did not come out on an AMD EPYC, two verdicts included (issue 35). The pin
(catalog/cpu_arithmetic.yaml) makes every machine compute what an AVX2 machine with one thread computes.

Only environment variables can choose these kernels, and torch, MKL and numpy read them once, when they load:
`pin()` runs first thing in `repro.cli` (and the test suite's conftest), and every process `repro` starts
inherits the variables, except verl's trainer, which gets the user's own environment back (`released`): the
pin would only slow a GPU cell, and vLLM's CPU kernels pick their ISA from the hardware, so a CPU rehearsal's
rollouts cannot be pinned.

One kernel no variable pins: torch's float32 sqrt under AVX2 refines the CPU's approximate reciprocal square
root, whose bits differ by vendor. The project computes the one it trains with itself (repro.cpu_lm.adamw), and
the fingerprint records it (`replaced`).

numpy's variable names its own dispatch targets, and numpy renames them (2.4 replaced AVX512F ... AVX512_SKX by
X86_V4, and ignores a name it does not dispatch to, with an ImportWarning Python hides by default): a fixed list
stopped pinning on numpy 2.4 (issue 43). So the names come from the installed numpy's own list
(`__cpu_dispatch__`), classified by the catalog's rule (`numpy_targets`), read once per numpy install in a child
process (this process must not import numpy before the pin) that also checks, with the variable set, that numpy
then reports no AVX512-level target on; the answer is cached per numpy install (`numpy_pin`).

stdlib and PyYAML only: this module must load before anything that imports numpy.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import zlib
from functools import cache
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import yaml

SAVED_ENV = "REPRO_ARITHMETIC_SAVED"  # the user's own values of the pinned variables, for GPU children
WARNED_ENV = "REPRO_ARITHMETIC_WARNED"  # the opt-out's line is printed once per process tree
CACHE_ENV = "REPRO_ARITHMETIC_CACHE"  # the folder of numpy_pin's answers (default: ~/.cache/repro-arithmetic)
NUMPY_ENV = "NPY_DISABLE_CPU_FEATURES"  # the variable whose value numpy_pin derives

# Run in a child process by numpy_pin (and by tests/test_arithmetic.py in pinned processes): what the numpy found
# first on sys.path reports about its dispatch, as JSON. argv[1] is the folder that holds that numpy, put first
# so the child imports the very numpy this process would. Warnings are recorded, not hidden: numpy warns (an
# ImportWarning, ignored by Python's default filters) about each name in its variable that it does not know.
NUMPY_QUERY = """
import json, sys, warnings
if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import numpy
try:
    from numpy._core import _multiarray_umath as m
except ImportError:  # numpy 1.x
    from numpy.core import _multiarray_umath as m
info = getattr(m, "__cpu_targets_info__", {})
print(json.dumps({
    "version": numpy.__version__,
    "file": numpy.__file__,
    "baseline": list(m.__cpu_baseline__),
    "dispatch": list(m.__cpu_dispatch__),
    "enabled": sorted(name for name, on in m.__cpu_features__.items() if on),
    "current": sorted({sig["current"] for ufunc in info.values() for sig in ufunc.values()}),
    "warnings": [str(w.message) for w in caught if "NPY_DISABLE_CPU_FEATURES" in str(w.message)],
}))
"""


@cache
def _spec() -> dict[str, Any]:
    # read as a file beside this module: importing the repro.catalog package would load numpy before the pin
    text = (Path(__file__).parent / "catalog" / "cpu_arithmetic.yaml").read_text()
    data = yaml.safe_load(text)
    return {
        # None: derived, not given (NPY_DISABLE_CPU_FEATURES, from numpy_pin)
        "env": {name: str(entry["value"]) if "value" in entry else None for name, entry in data["env"].items()},
        "numpy_targets": {
            "kept": [str(x) for x in data["numpy_targets"]["kept"]],
            "disabled": [str(x) for x in data["numpy_targets"]["disabled"]],
        },
        "threads": int(data["threads"]),
        "replaced": {name: str(entry["value"]) for name, entry in data["replaced"].items()},
        "opt_out_env": str(data["opt_out_env"]),
    }


def classify(targets: list[str]) -> dict[str, list[str]]:
    """numpy dispatch targets split by the catalog's rule (`numpy_targets`): `kept` (at or below AVX2: the
    kernels every supported machine runs), `disabled` (AVX512-level) and `unknown` (neither: a name a numpy
    release added that the catalog has not classified; the pin disables it too, since a target numpy adds is
    a kernel with other bits, and tests/test_arithmetic.py fails on it until the catalog says which it is)."""
    rule = _spec()["numpy_targets"]
    out: dict[str, list[str]] = {"kept": [], "disabled": [], "unknown": []}
    for name in targets:
        kept = any(fnmatch.fnmatchcase(name, pattern) for pattern in rule["kept"])
        disabled = any(fnmatch.fnmatchcase(name, pattern) for pattern in rule["disabled"])
        out["kept" if kept and not disabled else "disabled" if disabled and not kept else "unknown"].append(name)
    return out


def _numpy_install() -> dict[str, Any] | None:
    """Where the numpy this process would import lies, found without importing it: its folder and its compiled
    core's name, size and time (another numpy version, or a reinstall, is another file), the key of numpy_pin's
    cache. None without numpy."""
    spec = find_spec("numpy")
    if spec is None or not spec.submodule_search_locations:
        return None
    package = os.path.realpath(next(iter(spec.submodule_search_locations)))
    for sub in ("_core", "core"):  # numpy 2.x, 1.x
        try:
            names = sorted(n for n in os.listdir(os.path.join(package, sub)) if n.startswith("_multiarray_umath."))
        except OSError:
            continue
        if names:
            stat = os.stat(os.path.join(package, sub, names[0]))
            return {"path": package, "core": [f"{sub}/{names[0]}", stat.st_size, stat.st_mtime_ns]}
    return {"path": package, "core": None}


def query_numpy(numpy_dir: str | None = None, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """NUMPY_QUERY's answer from a child process with `environ` (this one's if None) that imports the numpy in
    `numpy_dir` (the folder holding the package) first."""
    import subprocess  # here, not at the top: most starts read numpy_pin's cached answer and never need it

    env = dict(os.environ if environ is None else environ)
    proc = subprocess.run(
        [sys.executable, "-c", NUMPY_QUERY, *([numpy_dir] if numpy_dir else [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"numpy's dispatch query failed: {proc.stderr.strip()[-1000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_numpy(found: dict[str, Any], disabled: list[str]) -> str | None:
    """What is wrong with a pinned numpy's own report (NUMPY_QUERY's answer under the pin), None if nothing:
    a warning about the variable, a disabled target still enabled, or a ufunc running a kernel of a target
    that is not kept."""
    kept = set(classify(found["dispatch"])["kept"])
    still = [name for name in disabled if name in found["enabled"]]
    running = [t for t in found["current"] if not t.startswith("baseline") and t not in kept]
    if found["warnings"]:
        return f"numpy {found['version']} warned: {' '.join(found['warnings'])}"
    if still or running:
        return f"numpy {found['version']} still reports {' '.join(sorted({*still, *running}))} enabled"
    return None


def _cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "repro-arithmetic"
    return Path(os.environ.get(CACHE_ENV) or default)


@cache
def numpy_pin() -> dict[str, Any] | None:
    """The installed numpy's dispatch targets, classified (`kept`, `disabled`, `unknown`), the value of
    NPY_DISABLE_CPU_FEATURES that turns off every target not kept, and `problem`: None when numpy, started
    with that value, reported no AVX512-level target on (else what it reported). None without numpy.

    Two child processes (~0.3 s) the first time per numpy install; afterwards one small file read (under 1 ms;
    no import of subprocess), keyed by numpy's folder and compiled core (its name, size and time: an upgrade or a
    reinstall asks again) and by the catalog's rule (a new classification applies at once)."""
    where = _numpy_install()
    if where is None:
        return None
    key = {**where, "rule": _spec()["numpy_targets"]}
    path = _cache_dir() / f"numpy-{zlib.crc32(json.dumps(key, sort_keys=True).encode()):08x}.json"
    try:
        record = json.loads(path.read_text())
        if {name: record.get(name) for name in key} == key:  # the file's own key, not only its name's crc
            return record
    except (OSError, ValueError):
        pass
    env = {k: v for k, v in os.environ.items() if k not in (NUMPY_ENV, opt_out_env())}
    numpy_dir = str(Path(where["path"]).parent)
    plain = query_numpy(numpy_dir, env)
    targets = classify(plain["dispatch"])
    disabled = [name for name in plain["dispatch"] if name not in targets["kept"]]  # in numpy's own order
    pinned = query_numpy(numpy_dir, {**env, NUMPY_ENV: " ".join(disabled)})
    record = {
        **key,
        "version": plain["version"],
        "dispatch": plain["dispatch"],
        **targets,
        "value": " ".join(disabled),
        "problem": _check_numpy(pinned, disabled),
    }
    import tempfile

    try:  # a folder that cannot be written only costs the query again next time
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
            f.write(json.dumps(record, indent=1) + "\n")
        os.replace(f.name, path)
    except OSError:
        pass
    return record


def pinned_env() -> dict[str, str]:
    """Every pinned variable and its value: the catalog's, and NPY_DISABLE_CPU_FEATURES from the installed
    numpy's own targets (left out without numpy: nothing to pin)."""
    env = {}
    for name, value in _spec()["env"].items():  # in the catalog's order, as a run's config.yaml lists them
        if value is None and name == NUMPY_ENV:
            found = numpy_pin()
            value = None if found is None else found["value"]
        elif value is None:
            raise ValueError(f"cpu_arithmetic.yaml: {name} has no value and repro.arithmetic derives none for it")
        if value is not None:
            env[name] = value
    return env


def opt_out_env() -> str:
    return _spec()["opt_out_env"]


def native(environ: dict[str, str] | None = None) -> bool:
    """True when the user asked each library to pick its own kernels (the opt-out variable is set to 1)."""
    environ = os.environ if environ is None else environ
    return environ.get(opt_out_env(), "").strip() not in ("", "0")


def pin() -> list[str]:
    """Set the pinned variables in this process's environment; returns the libraries that loaded too early for
    the pin to reach them (empty in every `repro` process). Under the opt-out, says once that results will
    not be comparable and changes nothing."""
    if native():
        if not os.environ.get(WARNED_ENV):
            os.environ[WARNED_ENV] = "1"
            print(
                f"repro: {opt_out_env()}=1: torch, MKL and numpy pick this CPU's own kernels and threads; results "
                "will not be comparable with the committed ones or with another machine's",
                file=sys.stderr,
            )
        return []
    env = pinned_env()
    found = numpy_pin()
    if found is not None and found["problem"]:  # said at every start: the pin does not hold on this numpy
        print(
            f"repro: {NUMPY_ENV}={found['value']!r} does not pin numpy at {found['path']}: {found['problem']}; "
            "its results may differ from another CPU's",
            file=sys.stderr,
        )
    if SAVED_ENV not in os.environ:  # the first repro process of the tree: keep the user's values
        os.environ[SAVED_ENV] = json.dumps({name: os.environ.get(name) for name in env})
    os.environ.update(env)
    return [name for name in ("torch", "numpy") if name in sys.modules]


def released(environ: dict[str, str]) -> dict[str, str]:
    """`environ` with the pin undone (the user's own values back): the environment of a GPU cell's processes."""
    if native(environ) or SAVED_ENV not in environ:
        return dict(environ)
    out = dict(environ)
    for name, value in json.loads(environ[SAVED_ENV]).items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    out.pop(SAVED_ENV, None)
    return out


def usable_cores() -> int:
    """The cores this process may run on (its affinity, which a Slurm or container limit narrows), the count the
    local launcher and the simulations size their parallelism by."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threads(requested: int) -> int:
    """torch's thread count for a computing process: the pinned one, or `requested` under the opt-out."""
    return requested if native() else _spec()["threads"]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def fingerprint() -> dict[str, Any]:
    """What decides a CPU run's bits, machine-independent: a CPU run's config records it, so a run resumed
    under another arithmetic is refused like any other change of config."""
    versions = {"torch": _version("torch"), "numpy": _version("numpy")}
    replaced = {"replaced": dict(_spec()["replaced"])}  # the project's own kernels, pinned or not
    if native():
        return {"pinned": False, **versions, **replaced}
    return {"pinned": True, **versions, **pinned_env(), **replaced}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def in_force() -> dict[str, Any]:
    """What this process actually computes with (imports torch): an attempt's record, the report's header."""
    import torch

    return {
        "cpu": cpu_model(),
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "pinned": not native(),
    }


def describe(record: dict[str, Any] | None = None) -> str:
    """One line for a report's header."""
    record = fingerprint() if record is None else record
    if not record.get("pinned"):
        return f"torch {record.get('torch')}, numpy {record.get('numpy')}, each library's own kernels (not pinned)"
    replaced = record.get("replaced", {})
    return (
        f"torch {record.get('torch')}, numpy {record.get('numpy')}, pinned: ATen {record.get('ATEN_CPU_CAPABILITY')}, "
        f"MKL_CBWR={record.get('MKL_CBWR')}, oneDNN {record.get('ONEDNN_MAX_CPU_ISA')}, "
        f"{NUMPY_ENV}={record.get(NUMPY_ENV)}, "
        f"{record.get('OMP_NUM_THREADS')} thread a process"
        + (", AdamW's square root in float64" if replaced.get("adamw_sqrt") == "float64" else "")
        + (", OpenBLAS's Haswell products" if replaced.get("linear_matmul") == "openblas-haswell" else "")
    )
