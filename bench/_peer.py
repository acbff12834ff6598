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
    return int(re.search(r"model_step_(\d+)\.pt$", str(path)).group(1))


def translate(peer_dir: Path, checkpoint: Path, src_pieces: Path, output: Path, *, beam: int, threads: int,
              batch_size: int, max_length: int, int8: bool = False) -> dict:
    """One `onmt_translate` process over `src_pieces`; its own in-process time (model loading
    excluded: "Total translation time") and the process's wall clock (loading included). `int8`:
    its `-int8` option (PyTorch's dynamic int8 quantization of the linear layers, CPU only)."""
    cmd = [str(peer_dir / "venv" / "bin" / "onmt_translate"), "-model", str(checkpoint), "-src", str(src_pieces),
           "-output", str(output), "-beam_size", str(beam), "-batch_size", str(batch_size), "-batch_type", "sents",
           "-max_length", str(max_length), "-report_time", *(["-int8"] if int8 else [])]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=peer_env(threads), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    m = re.search(r"Total translation time \(s\): ([\d.]+)", log)
    if proc.returncode != 0 or not m:
        raise SystemExit(f"onmt_translate failed (exit {proc.returncode}):\n{log[-2000:]}")
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
