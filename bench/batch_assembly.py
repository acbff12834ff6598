"""How long `make_batch` takes to pad one training batch into tensors, at a CPU batch and at a GPU one.

Run: python bench/batch_assembly.py [--sizes 32,800] [--repeats 50] [--out bench/results/batch_assembly.jsonl]

Random pairs of 5-30 ids (seeded), one thread; the best of 3 means over `--repeats` calls per size. Run it at two
commits (e.g. from a `git worktree`) to compare them: the line records the commit, and a checksum of the
tensors, which must be the same at both.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import append_result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="32,800", help="pairs per batch, comma-separated")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import numpy as np
    import torch

    from interlingua.data.batching import make_batch
    torch.set_num_threads(1)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    for n in (int(x) for x in args.sizes.split(",")):
        rng = np.random.default_rng(n)
        src = [rng.integers(4, 8000, rng.integers(5, 30)).astype(np.int32) for _ in range(n)]
        tgt = [rng.integers(4, 8000, rng.integers(5, 30)).astype(np.int32) for _ in range(n)]
        batch = make_batch(src, tgt, "en", "de", src_prefix=7)
        means = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(args.repeats):
                make_batch(src, tgt, "en", "de", src_prefix=7)
            means.append((time.perf_counter() - t0) / args.repeats)
        checksum = int(sum(int(t.sum()) * (i + 1) for i, t in
                           enumerate((batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out))))
        append_result(args.out, {"bench": "batch_assembly", "commit": commit, "pairs": n, "threads": 1,
                                 "ms": round(min(means) * 1000, 3), "checksum": checksum})


if __name__ == "__main__":
    main()
