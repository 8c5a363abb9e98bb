"""The GPU stack is verl 0.9.1's tested one: the shipped constraints file equals verl's own pins (read from
the installed verl's metadata), pyproject's `gpu` extra and ranges admit exactly those versions, the install
scripts use them, and `stack_problems` names each drift with its fix. No network: the resolver's report
parser in scripts/resolve-gpu.sh is run on a report built from installed metadata."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from repro import gpu_stack

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = [ROOT / "scripts" / "setup-venv.sh", ROOT / "scripts" / "resolve-gpu.sh"]
# what verl 0.9.1 pins for its vLLM rollout (`vllm` extra) and FSDP attention (`flash-attn-cu130torch211`)
VERL_PINNED = {"vllm", "torch", "torchvision", "torchaudio", "transformers", "flash-attn"}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _reqs(lines: list[str]) -> dict[str, SpecifierSet]:
    out = {}
    for line in lines:
        req = Requirement(line)
        out[gpu_stack._norm(req.name)] = req.specifier
    return out


def _neighbours(version: str) -> list[str]:
    """The version and the releases around it that a loose specifier would also admit."""
    major, minor, patch = (int(p) for p in version.split("."))
    return [
        version,
        f"{major}.{minor}.{patch + 1}",
        f"{major}.{minor + 1}.0",
        f"{major}.{max(minor - 1, 0)}.0",
        f"{major + 1}.0.0",
        f"{version}.post1",
    ]


# ---- the constraints file against verl's own metadata --------------------------------------------------


def test_installed_verl_is_0_9_1():
    assert metadata.version("verl") == "0.9.1"


def test_constraints_equal_verl_0_9_1_pins():
    verl = gpu_stack.verl_tested_versions()
    tested = gpu_stack.tested_versions()
    assert set(verl) == VERL_PINNED, verl
    for name, version in verl.items():
        assert tested.get(name) == version, f"{name}: constraints {tested.get(name)}, verl 0.9.1 pins {version}"
    # nothing in the constraints that verl does not pin itself
    assert set(tested) == set(verl)


def test_verl_pins_are_the_known_stack():
    """The facts the constraints file's comments state, from verl's metadata (not from our own file)."""
    verl = gpu_stack.verl_tested_versions()
    assert verl["vllm"] == "0.24.0"
    assert verl["torch"] == "2.11.0"
    assert verl["torchvision"] == "0.26.0"
    assert verl["torchaudio"] == "2.11.0"
    assert verl["transformers"] == "5.9.0"
    assert verl["flash-attn"] == "2.8.3"


def test_constraints_lines_are_pins_with_sources():
    text = (ROOT / "repro" / "catalog" / "gpu_constraints.txt").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            assert "==" in line and "# verl 0.9.1" in line, f"pin without its source: {line!r}"
    with pytest.raises(ValueError, match="not an exact"):
        gpu_stack.parse_constraints("vllm>=0.24\n")


def test_constraints_file_is_package_data():
    package_data = _pyproject()["tool"]["setuptools"]["package-data"]["repro"]
    assert "catalog/*.txt" in package_data
    assert gpu_stack.tested_versions()["vllm"] == "0.24.0"


# ---- pyproject admits exactly the tested stack --------------------------------------------------------


def test_gpu_extra_admits_exactly_the_tested_versions():
    project = _pyproject()["project"]
    core = _reqs(project["dependencies"])
    gpu = _reqs(project["optional-dependencies"]["gpu"])
    tested = gpu_stack.tested_versions()
    # flash-attn has no wheel on PyPI, so it is installed by setup-venv.sh, not by the extra
    assert set(gpu) == set(tested) - {"flash-attn"}
    for name, spec in gpu.items():
        combined = spec & core.get(name, SpecifierSet())
        assert list(combined.filter(_neighbours(tested[name]), prereleases=True)) == [tested[name]], (
            f"{name}: pyproject admits {combined}, the tested version is {tested[name]}"
        )


def test_core_ranges_admit_gpu_and_cpu_torch():
    core = _reqs(_pyproject()["project"]["dependencies"])
    tested = gpu_stack.tested_versions()
    assert core["torch"].contains(tested["torch"])  # the GPU stack
    assert core["torch"].contains("2.13.0")  # the CPU build scripts/setup-venv.sh installs from disk
    assert core["transformers"].contains(tested["transformers"])
    assert core["verl"] == SpecifierSet("==0.9.1")
    # inside verl 0.9.1's own transformers window, 5.6.0 excluded as verl does
    verl_core = next(Requirement(r) for r in metadata.requires("verl") if r.startswith("transformers") and ";" not in r)
    assert verl_core.specifier.contains(tested["transformers"])
    assert not core["transformers"].contains("5.6.0")
    assert not core["transformers"].contains("5.11.0")


def test_project_ranges_read_pyproject():
    ranges = gpu_stack.project_ranges()
    assert ranges["torch"] == _reqs(_pyproject()["project"]["dependencies"])["torch"]


# ---- stack_problems ----------------------------------------------------------------------------------

MATCHING = {"vllm": "0.24.0", "torch": "2.11.0", "transformers": "5.9.0", "flash-attn": "2.8.3"}


@pytest.fixture
def fake_stack(monkeypatch):
    """Replace the version and import lookups; returns the dicts a test edits."""
    versions = dict(MATCHING)
    imports = {"flash_attn": True, "flash_attn_interface": False}
    monkeypatch.setattr(gpu_stack, "installed_version", lambda dist: versions.get(dist))
    monkeypatch.setattr(gpu_stack, "importable", lambda module: imports.get(module, False))
    return versions, imports


def test_matching_stack_has_no_problems(fake_stack):
    assert gpu_stack.stack_problems(cuda=True) == []
    assert gpu_stack.stack_problems(cuda=False) == []


def test_vllm_0_31_on_cuda_is_one_line_naming_the_tested_version(fake_stack):
    versions, _ = fake_stack
    versions["vllm"] = "0.31.0"
    problems = gpu_stack.stack_problems(cuda=True)
    assert problems == [
        "vllm 0.31.0 is installed, the project tested 0.24.0 (verl 0.9.1's pin): run `bash scripts/setup-venv.sh gpu`"
    ]


def test_vllm_missing_on_cuda(fake_stack):
    versions, _ = fake_stack
    del versions["vllm"]
    (line,) = gpu_stack.stack_problems(cuda=True)
    assert "vLLM is not installed" in line and "0.24.0" in line and "setup-venv.sh gpu" in line


def test_no_cuda_ignores_vllm_and_flash_attn(fake_stack):
    versions, imports = fake_stack
    versions["vllm"] = "0.31.0"
    versions["flash-attn"] = "2.7.4"
    imports["flash_attn"] = False
    versions["torch"] = "2.13.0+cpu"  # the CPU rehearsal's build
    versions["transformers"] = "5.10.4"
    assert gpu_stack.stack_problems(cuda=False) == []
    del versions["vllm"]
    del versions["flash-attn"]
    assert gpu_stack.stack_problems(cuda=False) == []


def test_no_cuda_still_checks_pyproject_ranges(fake_stack):
    versions, _ = fake_stack
    versions["torch"] = "2.9.1+cpu"
    versions["transformers"] = "5.6.0"
    problems = gpu_stack.stack_problems(cuda=False)
    assert len(problems) == 2
    assert problems[0].startswith("torch 2.9.1+cpu is installed, outside this project's range")
    assert problems[1].startswith("transformers 5.6.0 is installed, outside this project's range")
    assert all(p.endswith("run `bash scripts/setup-venv.sh`") for p in problems)


def test_cuda_torch_and_transformers_must_equal_the_tested_ones(fake_stack):
    versions, _ = fake_stack
    versions["torch"] = "2.13.0+cu130"  # inside pyproject's range, but not what verl tested on GPUs
    versions["transformers"] = "5.10.4"
    problems = gpu_stack.stack_problems(cuda=True)
    assert problems == [
        "torch 2.13.0+cu130 is installed, the project tested 2.11.0 on GPUs (verl 0.9.1's pin): "
        "run `bash scripts/setup-venv.sh gpu`",
        "transformers 5.10.4 is installed, the project tested 5.9.0 on GPUs (verl 0.9.1's pin): "
        "run `bash scripts/setup-venv.sh gpu`",
    ]
    versions["torch"] = "2.11.0+cu130"  # a local build tag of the tested version is the tested version
    versions["transformers"] = "5.9.0"
    assert gpu_stack.stack_problems(cuda=True) == []


def test_flash_attn_missing_on_cuda(fake_stack):
    versions, imports = fake_stack
    imports["flash_attn"] = False
    del versions["flash-attn"]
    (line,) = gpu_stack.stack_problems(cuda=True)
    assert line.startswith("attn_implementation flash_attention_2 needs `flash_attn`, and flash-attn is not installed")
    assert "REPRO_FLASH_ATTN_WHEEL=" in line and "cu130torch2.11-cp311" in line
    assert "--set +actor_rollout_ref.model.override_config.attn_implementation=sdpa" in line
    # a cell that asks for torch's own attention needs no flash-attn
    assert gpu_stack.stack_problems(cuda=True, attn_implementation="sdpa") == []
    assert gpu_stack.stack_problems(cuda=True, attn_implementation="eager") == []


def test_flash_attn_that_does_not_import_or_differs(fake_stack):
    versions, imports = fake_stack
    imports["flash_attn"] = False  # installed, but built for another torch
    (line,) = gpu_stack.stack_problems(cuda=True)
    assert "flash-attn 2.8.3 is installed but does not import" in line
    imports["flash_attn"] = True
    versions["flash-attn"] = "2.7.4.post1"
    (line,) = gpu_stack.stack_problems(cuda=True)
    assert line.startswith("flash-attn 2.7.4.post1 is installed, the project tested 2.8.3")


def test_flash_attention_3_checks_its_own_module(fake_stack):
    (line,) = gpu_stack.stack_problems(cuda=True, attn_implementation="flash_attention_3")
    assert "needs `flash_attn_interface`" in line and "sdpa" in line


def test_real_lookups_on_this_machine():
    """Unpatched: this CPU venv (torch 2.13.0 CPU, no vLLM) is a valid CPU rehearsal stack."""
    assert gpu_stack.installed_version("no-such-distribution-xyz") is None
    assert gpu_stack.importable("json") and not gpu_stack.importable("no_such_module_xyz")
    assert gpu_stack.stack_problems(cuda=False) == []


# ---- the scripts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_valid_bash(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_setup_venv_gpu_installs_under_the_constraints():
    text = SCRIPTS[0].read_text(encoding="utf-8")
    assert 'constraints="repro/catalog/gpu_constraints.txt"' in text
    assert 'pipi -c "$constraints" -e "$spec"' in text
    assert 'pipi "torch==2.13.0"' in text  # the CPU install is unchanged
    # the torch pin is taken from the constraints file with this sed: check it extracts the tested version
    sed = re.search(r"torch_pin=\"\$\(sed -n '([^']+)' \"\$constraints\"\)\"", text)
    assert sed, "setup-venv.sh no longer reads torch's pin from the constraints file"
    out = subprocess.run(
        ["sed", "-n", sed.group(1), str(ROOT / "repro" / "catalog" / "gpu_constraints.txt")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == gpu_stack.tested_versions()["torch"]
    assert "attn_implementation=sdpa" in text  # the one line said when no flash-attn wheel imports


def _run_report_parser(tmp_path: Path, resolved: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run resolve-gpu.sh's report parser (its heredoc) on a pip report made from `resolved` and the
    installed verl's real Requires-Dist."""
    text = SCRIPTS[1].read_text(encoding="utf-8")
    parser = text.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    items = [{"metadata": {"name": name, "version": version}} for name, version in resolved.items()]
    items.append({"metadata": {"name": "verl", "version": "0.9.1", "requires_dist": metadata.requires("verl")}})
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"install": items}))
    constraints = ROOT / "repro" / "catalog" / "gpu_constraints.txt"
    return subprocess.run(
        [sys.executable, "-", str(report), str(constraints), "7"], input=parser, capture_output=True, text=True
    )


def test_resolve_report_says_yes_for_the_tested_stack(tmp_path):
    resolved = {k: v for k, v in gpu_stack.tested_versions().items() if k != "flash-attn"}
    resolved["nvidia-cuda-runtime"] = "13.0.96"
    result = _run_report_parser(tmp_path, resolved)
    assert result.returncode == 0, result.stderr
    assert "  vllm          0.24.0" in result.stdout
    assert "  torch         2.11.0" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("equal to verl 0.9.1's tested versions: yes")


def test_resolve_report_says_no_for_another_vllm(tmp_path):
    resolved = {k: v for k, v in gpu_stack.tested_versions().items() if k != "flash-attn"}
    resolved["vllm"] = "0.31.0"
    result = _run_report_parser(tmp_path, resolved)
    assert result.returncode == 1
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("equal to verl 0.9.1's tested versions: NO")
    assert "vllm 0.31.0 (verl 0.9.1 tested 0.24.0)" in last


def test_setup_says_which_flash_attn_wheel_it_installed_with_its_sha256(tmp_path) -> None:
    """scripts/setup-venv.sh gpu prints this line from pip's own --report (here of a hand-built wheel of the
    same name, installed --dry-run from a local file: no network)."""
    import base64
    import hashlib
    import zipfile

    wheel = tmp_path / "flash_attn-2.8.3-py3-none-any.whl"
    files = {
        "flash_attn/__init__.py": b"",
        "flash_attn-2.8.3.dist-info/METADATA": b"Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3\n",
        "flash_attn-2.8.3.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        record = []
        for name, data in files.items():
            archive.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append("flash_attn-2.8.3.dist-info/RECORD,,")
        archive.writestr("flash_attn-2.8.3.dist-info/RECORD", "\n".join(record))
    report = tmp_path / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps", "--no-index"]
    subprocess.run([*pip, "--report", str(report), str(wheel)], check=True, timeout=120)
    line = gpu_stack.installed_from(json.loads(report.read_text()), "flash_attn")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert line == f"repro: installed flash-attn 2.8.3 from {wheel.as_uri()} (sha256 {sha})"
    assert gpu_stack.installed_from(json.loads(report.read_text()), "vllm") is None
