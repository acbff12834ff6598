"""The GPU scripts without a GPU: the README's test command leaves the CUDA tests out and selecting them
without a GPU fails; gpu-prepare's manifest and choice of wheels; gpu-check and gpu-study run whole on
the CPU with tiny sizes (`--device cpu --tiny`), through their shell scripts (gpu-study's run in
test_gpu_study_script.py, so that the two longest runs of the suite go to different test processes), so they never rot
between the rare runs on a GPU machine (docs/TESTING.md, "Checking on a GPU")."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import QUIET_PLUGINS, REPO

sys.path.insert(0, str(REPO / "bench"))
import gpu_prepare  # noqa: E402 - bench/ is not a package


def _pytest(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *QUIET_PLUGINS, "-o", "addopts=",
                           *args], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300)


def readme_pytest_arguments() -> list[str]:
    """The pytest arguments of the README's test command (scripts/test.sh), less the paths and "$@"."""
    assert "bash scripts/test.sh" in (REPO / "README.md").read_text(encoding="utf-8")
    lines = [line for line in (REPO / "scripts" / "test.sh").read_text().splitlines()
             if " -m pytest " in line and not line.lstrip().startswith("#")]
    assert len(lines) == 1, lines
    command = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", lines[0].split("#")[0])  # a shell default: its value
    words = shlex.split(command)
    args = words[words.index("pytest") + 1:]
    return [a for a in args if a not in ("tests", "$@")]


def test_the_readme_test_command_deselects_the_cuda_tests():
    """Collected with the README's arguments, test_cuda.py leaves nothing selected and at least 10 tests
    deselected: every test of the file is marked cuda (`-m cuda` selects exactly those)."""
    args = readme_pytest_arguments()
    assert args[args.index("-m") + 1] == "not cuda"
    left_out = _pytest("tests/test_cuda.py", "--collect-only", "-q", *args)
    assert left_out.returncode == 5, left_out.stdout[-2000:]  # pytest: no test collected
    deselected = re.search(r"(\d+) deselected", left_out.stdout)
    assert deselected and int(deselected.group(1)) >= 10, left_out.stdout[-2000:]


def test_the_cuda_tests_selected_without_a_gpu_each_fail():
    done = _pytest("tests/test_cuda.py", "-m", "cuda", "-q", "-k", "fused_attention or dropout or int8",
                   env={"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 1, done.stdout[-3000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert "5 errors" in summary and "passed" not in summary and "skipped" not in summary, summary
    assert done.stdout.count("is marked cuda and needs a CUDA GPU") >= 5


# --- gpu-prepare ---------------------------------------------------------------------------------------------


def make_wheel(folder: Path, name: str, version: str, tags: str = "py3-none-any") -> Path:
    """A minimal valid wheel of a package `name` holding one module that says its version."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-{tags}.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tags}\n"}
    record = "".join(f"{n},sha256={_b64(hashlib.sha256(t.encode()).digest())},{len(t.encode())}\n"
                     for n, t in files.items()) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, t in {**files, f"{info}/RECORD": record}.items():
            z.writestr(n, t)
    return path


def _b64(digest: bytes) -> str:
    import base64
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def test_the_manifest_lists_every_wheel_and_data_file_with_its_size_and_digest(tmp_path):
    wheels, data = tmp_path / ".whl", tmp_path / ".gpu-data"
    a = make_wheel(wheels, "fake_pure", "1.0")
    b = make_wheel(wheels, "fake_binary", "2.5", "cp312-cp312-manylinux_2_28_x86_64")
    (data / "multi30k").mkdir(parents=True)
    (data / "multi30k" / "train.en.gz").write_bytes(b"x" * 1000)
    (data / "multi30k" / "corpus.yaml").write_text("name: multi30k\n")
    manifest = gpu_prepare.build_manifest(wheels, data, project_bytes=5000)
    assert [(w["name"], w["version"], w["pure"]) for w in manifest["wheels"]] == \
        [("fake-binary", "2.5", False), ("fake-pure", "1.0", True)]
    for row, path in zip(manifest["wheels"], (b, a)):
        assert row["file"] == path.name and row["bytes"] == path.stat().st_size
        assert row["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [(d["file"], d["bytes"]) for d in manifest["data"]] == [("multi30k/corpus.yaml", 15),
                                                                   ("multi30k/train.en.gz", 1000)]
    sizes = manifest["bytes"]
    assert sizes["total"] == 5000 + sizes["wheels"] + 1015 and sizes["limit"] == 64 * 2**20
    assert manifest["python"] == "3.12" and "manylinux2014_x86_64" in manifest["platforms"]
    gpu_prepare.check_size(manifest)
    path = gpu_prepare.write_manifest(manifest, data)
    assert json.loads(path.read_text()) == manifest
    again = gpu_prepare.build_manifest(wheels, data, project_bytes=5000)  # the manifest itself is not listed
    assert again["data"] == manifest["data"] and again["wheels"] == manifest["wheels"]
    with pytest.raises(SystemExit, match=r"over the limit of 0.0 MiB \(project 0.0, wheels"):
        gpu_prepare.check_size(gpu_prepare.build_manifest(wheels, data, project_bytes=5000, limit_mib=0.001))


def _resolved(name: str, needs: list[str], filename: str | None = None) -> dict:
    return {"metadata": {"name": name, "version": "1", "requires_dist": needs},
            "download_info": {"url": f"https://x/{filename or name + '-1-py3-none-any.whl'}"}}


def test_what_is_carried_is_what_the_gpu_machine_lacks_and_the_pure_python_it_needs():
    resolved = [
        _resolved("torch", ["typing-extensions", "nvidia-cublas; platform_system == 'Linux'"],
                  "torch-1-cp312-cp312-manylinux_2_28_x86_64.whl"),
        _resolved("nvidia-cublas", [], "nvidia_cublas-1-py3-none-manylinux_2_27_x86_64.whl"),
        _resolved("typing-extensions", []),
        _resolved("numpy", [], "numpy-1-cp312-cp312-manylinux_2_28_x86_64.whl"),
        _resolved("pydantic", ["pydantic-core", "typing-extensions", "email-validator; extra == 'email'"]),
        _resolved("pydantic-core", ["typing-extensions"], "pydantic_core-1-cp312-cp312-manylinux2014_x86_64.whl"),
        _resolved("ctranslate2", ["numpy", "pyyaml"], "ctranslate2-1-cp312-cp312-manylinux_2_28_x86_64.whl"),
        _resolved("pyyaml", [], "pyyaml-1-cp312-cp312-manylinux_2_17_x86_64.whl"),
        _resolved("old-python-only", ["tomli; python_version < '3.11'"]),
    ]
    carry = gpu_prepare.to_carry(resolved, present=["torch", "numpy", "pyyaml"])
    # torch's own needs are there; typing-extensions too, but pydantic needs it (pure Python): carried
    assert sorted(carry) == ["ctranslate2", "old-python-only", "pydantic", "pydantic-core", "typing-extensions"]


# --- the scripts, tiny, on the CPU -------------------------------------------------------------------------------


def run_script(name: str, args: list[str], tmp_path: Path, wheels: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_WHEELS": str(wheels),
           "GPU_CHECK_SITE": str(tmp_path / "site"), "OMP_NUM_THREADS": "1"}
    env.pop("OUT", None)
    return subprocess.run(["bash", f"scripts/{name}", *args], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=900)


def outputs_fit(out: Path) -> list[str]:
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert len(files) <= 8 and all(p.stat().st_size <= 16 * 2**20 for p in files), files
    return [p.name for p in files]


def test_gpu_check_runs_whole_on_the_cpu_with_tiny_sizes(multi30k_corpus, tmp_path):
    """scripts/gpu-check.sh --device cpu --tiny (fp32 alone: the CPU has no fp16 and emulates bf16 here):
    the carried wheels installed without the network, every step run and recorded."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "gpu_check_probe", "0.1")
    out = tmp_path / "out"
    done = run_script("gpu-check.sh", ["--device", "cpu", "--tiny", "--precisions", "fp32", "--corpus",
                                    str(multi30k_corpus), "--work", str(tmp_path / "work"), "--out", str(out)],
                   tmp_path, wheels)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert (tmp_path / "site" / "gpu_check_probe" / "__init__.py").is_file()
    assert set(outputs_fit(out)) == {"install.log", "pytest.log", "train.log", "metrics.jsonl", "summary.json",
                                      "summary.md"}
    summary = json.loads((out / "summary.json").read_text())
    steps = summary["steps"]
    assert list(steps) == ["cuda_tests", "training", "distributed", "inference"]
    assert all(s["ok"] and s["seconds"] >= 0 for s in steps.values()), {k: s.get("error") for k, s in steps.items()}
    assert "collected only" in steps["cuda_tests"]["result"]["note"]
    runs = steps["training"]["result"]["runs"]
    assert [(r["kind"], r["precision"]) for r in runs] == [("lstm_bridge", "fp32"), ("transformer", "fp32")]
    assert all(r["resume"] == "bit-identical" and r["tokens_per_s"] > 0 for r in runs)  # the CPU is deterministic
    assert steps["training"]["result"]["paper_size"][0]["tokens_per_s"] > 0
    ddp = steps["distributed"]["result"]
    assert ddp["backend"] == "gloo" and ddp["world_size"] == 1 and len(ddp["agreement"]) > 0
    assert ddp["same_as_one_process"] == "bit-identical"
    assert {r["kind"] for r in steps["inference"]["result"]["runs"]} == {"lstm_bridge", "transformer"}
    assert "| training | yes |" in (out / "summary.md").read_text()
