"""A model folder (`interlingua export folder`) against its `.pt` checkpoint: size on disk, load time,
and whether translations and sentence vectors are identical.

Run: python bench/export_folder.py --model demo_run/model/best.pt [--src de --tgt en]
     [--sentences FILE (default: Multi30k val.<src>.gz, first --max-sentences lines)] [--repeats 5]
     [--out bench/results/export_folder.jsonl]

The folder is exported to a temporary folder (and removed). Load times are the minimum and median of
`--repeats` loads on the CPU with one thread, after one warm-up load of each (the page cache holds both
files). Translations are compared greedy and with beam 5, byte for byte; vectors with `np.array_equal`.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _results import append_result  # noqa: E402

from interlingua.cli import positive_int  # noqa: E402
from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.inference.api import load  # noqa: E402
from interlingua.model_files.export import export_folder  # noqa: E402


def size_mib(path: Path) -> float:
    files = [path] if path.is_file() else [f for f in path.iterdir() if f.is_file()]
    return sum(f.stat().st_size for f in files) / 2**20


def load_seconds(path: Path, repeats: int) -> list[float]:
    load(path, "cpu")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        load(path, "cpu")
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--src", default=None)
    parser.add_argument("--tgt", default=None)
    parser.add_argument("--sentences", type=Path, default=None)
    parser.add_argument("--max-sentences", type=positive_int, default=100)
    parser.add_argument("--repeats", type=positive_int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench/results/export_folder.jsonl"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load(args.model, "cpu")
    src, tgt = (args.src, args.tgt) if args.src and args.tgt else model.languages.trained[0]
    sentences = args.sentences or ROOT / "../shared/data/multi30k" / f"val.{src}.gz"
    texts = read_lines(sentences)[:args.max_sentences]
    with tempfile.TemporaryDirectory() as tmp:
        folder = export_folder(args.model, Path(tmp) / "model")
        pt_times, folder_times = load_seconds(args.model, args.repeats), load_seconds(folder, args.repeats)
        shipped = load(folder, "cpu")
        identical = {f"beam{beam}": model.translate(texts, src, tgt, beam=beam) == shipped.translate(texts, src, tgt,
                                                                                                      beam=beam)
                     for beam in (1, 5)}
        identical["vectors"] = bool(np.array_equal(model.encode(texts, src), shipped.encode(texts, src)))
        append_result(args.out, {
            "bench": "export_folder", "model": str(args.model), "direction": f"{src}-{tgt}",
            "sentences": len(texts), "pt_mib": round(size_mib(args.model), 1),
            "folder_mib": round(size_mib(folder), 1),
            "safetensors_mib": round(size_mib(folder / "model.safetensors"), 1),
            "load_pt_s": {"min": round(min(pt_times), 4), "median": round(statistics.median(pt_times), 4)},
            "load_folder_s": {"min": round(min(folder_times), 4), "median": round(statistics.median(folder_times), 4)},
            "identical": identical})


if __name__ == "__main__":
    main()
