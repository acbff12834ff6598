"""The OpenNMT-py peer as the benchmarks drive it: its folders, translation runs, checkpoints.

The peer lives in its own virtualenv under $PEER_DIR (set up by `../shared/peers/opennmt.sh
setup prep`); these helpers only start its programs and read its files."""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEER_SCRIPT = ROOT.parent / "shared" / "peers" / "opennmt.sh"
DEFAULT_PEER_DIR = Path(os.environ.get("PEER_DIR", Path.home() / ".cache" / "interlingua-peers"))


def peer_env(threads: int) -> dict[str, str]:
    """The environment the peer's own script gives its programs, with `threads` threads."""
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads),
                "PYTHONWARNINGS": "ignore", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"})
    return env


def last_checkpoint(peer_dir: Path, run: str = "budget") -> Path:
    """The peer's last saved checkpoint of a run (highest step), as its own `eval` stage picks it."""
    cks = sorted((peer_dir / "runs" / run).glob("model_step_*.pt"), key=checkpoint_step)
    if not cks:
        raise SystemExit(f"no OpenNMT-py checkpoint in {peer_dir / 'runs' / run}; train the peer first")
    return cks[-1]


def checkpoint_step(path: Path) -> int:
    found = re.search(r"model_step_(\d+)\.pt$", str(path))
    if found is None:
        raise ValueError(f"not an OpenNMT-py checkpoint name (model_step_N.pt): {path}")
    return int(found.group(1))


# OpenNMT-py 3.5.1 has `-precision int8` ("pytorch native 8-bit quantization, cpu only"), but its
# model_builder.load_test_model compares the option's string with torch.int8 (`if opt.precision ==
# torch.int8`), which is never true: the model stays fp32 (its "int8" output is its fp32 output, bit
# for bit). The bench runs onmt_translate's own entry point with that one comparison made as intended,
# so that its int8 is what the option promises: torch.quantization.quantize_dynamic on the loaded model.
ONMT_INT8 = """
import sys, torch
import onmt.model_builder as mb
build = mb.load_test_model
def load_test_model(opt, *args, **kwargs):
    vocabs, model, model_opt = build(opt, *args, **kwargs)
    if opt.precision == "int8":
        model = torch.quantization.quantize_dynamic(model, dtype=torch.qint8, inplace=False)
        print("INT8 quantize_dynamic applied", file=sys.stderr)
    return vocabs, model, model_opt
mb.load_test_model = load_test_model
import onmt.translate.translator as tr
if hasattr(tr, "load_test_model"):
    tr.load_test_model = load_test_model
from onmt.bin.translate import main
sys.argv[0] = "onmt_translate"
main()
"""


def translate(peer_dir: Path, checkpoint: Path, src_pieces: Path, output: Path, *, beam: int, threads: int,
              batch_size: int, max_length: int, int8: bool = False, timeout: float | None = None) -> dict:
    """One `onmt_translate` process over `src_pieces`; its own in-process time (model loading
    excluded: "Total translation time") and the process's wall clock (loading included). `int8`:
    `-precision int8` with the quantization it promises applied (see ONMT_INT8). Stopped after
    `timeout` seconds (subprocess.TimeoutExpired)."""
    program = ([str(peer_dir / "venv" / "bin" / "python"), "-c", ONMT_INT8] if int8
               else [str(peer_dir / "venv" / "bin" / "onmt_translate")])
    cmd = [*program, "-model", str(checkpoint), "-src", str(src_pieces),
           "-output", str(output), "-beam_size", str(beam), "-batch_size", str(batch_size), "-batch_type", "sents",
           "-max_length", str(max_length), "-report_time", *(["-precision", "int8"] if int8 else [])]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=peer_env(threads), capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    m = re.search(r"Total translation time \(s\): ([\d.]+)", log)
    if proc.returncode != 0 or not m:
        raise SystemExit(f"onmt_translate failed (exit {proc.returncode}):\n{log[-2000:]}")
    if int8 and "INT8 quantize_dynamic applied" not in log:
        raise SystemExit("onmt_translate ran without int8: the bench's hook did not take (see ONMT_INT8)")
    return {"seconds": float(m.group(1)), "wall_incl_load_s": round(wall, 2), "seconds_resolution": 0.1}


def save_step_lines(log: Path, dest: Path) -> Path:
    """Copy the `Step N/M` report lines of a peer training log (its timings) to `dest`."""
    lines = Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
    dest.write_text("".join(x + "\n" for x in lines if re.search(r"INFO\] Step", x)), encoding="utf-8")
    return dest


def decode_pieces(spm_model: Path, lines: list[str]) -> list[str]:
    """Sentencepiece pieces (one sentence per line) back to text, with the peer's own model."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    return [sp.decode(line.split()) for line in lines]
