"""scripts/gpu-study.sh run whole on the CPU with tiny sizes (`--device cpu --tiny`), across two commands, so that
it never rots between the rare runs on a GPU machine (docs/TESTING.md, "Checking on a GPU"). Apart from
test_gpu_scripts.py (gpu-check's run) because the two are the suite's longest: in two files they run in
different test processes."""
from __future__ import annotations

import json

from test_gpu_scripts import outputs_fit, run_script


def test_gpu_study_runs_on_the_cpu_with_tiny_sizes_and_resumes_across_two_commands(multi30k_corpus, tmp_path):
    """Command 1 trains the baseline row alone (--rows) to step 8 (a step cap given with --set) and scores
    nothing (--no-score); command 2 (both rows, the tiny cap of 12 steps, scoring last.pt) resumes the
    baseline where it stopped, trains the residual row from the start beside it, and scores both."""
    work, wheels = tmp_path / "work", tmp_path / "wheels"
    common = ["--device", "cpu", "--tiny", "--corpus", str(multi30k_corpus), "--work", str(work)]
    first = run_script("gpu-study.sh", [*common, "--out", str(tmp_path / "out1"), "--rows", "baseline",
                                        "--set", "train.max_steps=8", "--no-score"], tmp_path, wheels)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    study = json.loads((tmp_path / "out1" / "study.json").read_text())
    assert study["states"]["baseline"]["steps"] == 8
    assert study["runs"] == [] and study["scored"] == {}
    assert "| baseline | step cap | 8 |" in (tmp_path / "out1" / "study.md").read_text()
    second = run_script("gpu-study.sh", [*common, "--out", str(tmp_path / "out2"), "--set", "train.max_steps=12",
                                         "--checkpoint", "last"], tmp_path, wheels)
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    out = tmp_path / "out2"
    assert set(outputs_fit(out)) == {"install.log", "study.md", "study.json", "study_dev_curves.png",
                                      "metrics_baseline.jsonl", "metrics_residual.jsonl", "study.log"}
    study = json.loads((out / "study.json").read_text())
    for row in ("baseline", "residual"):
        state = study["states"][row]
        assert state["steps"] > 8 and state["stopped_by"] in ("patience", "step cap"), state
        resumed = f"resumed from {work / row / 'last.pt'} at step 8" in (out / "study.log").read_text()
        assert resumed == (row == "baseline")
        run = next(r for r in study["runs"] if r["recipe"] == row)
        assert run["checkpoint"] == "last.pt"
        assert run["matrix"]["zero_shot"] and run["pivot_matrix"] and run["dev_curve"]
        assert all(json.loads(line)["step"] <= state["steps"]
                   for line in (out / f"metrics_{row}.jsonl").read_text().splitlines())
    text = (out / "study.md").read_text()
    assert "## Zero-shot study" in text and "zero-shot via pivot" in text and "## Dev validations" in text
    assert not any(p.suffix == ".pt" for p in out.rglob("*"))
