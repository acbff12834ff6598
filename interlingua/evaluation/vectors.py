"""`interlingua evaluate <suite> --model CKPT`: the sentence-vector suite on a checkpoint,
with the reference points (same architecture untrained, bag of subwords) beside it."""
from __future__ import annotations

from pathlib import Path

from interlingua.evaluation.sentence import reference_embedders, run_suite
from interlingua.inference.embedder import Embedder


def evaluate_sentence_vectors(suite: str, checkpoint: str | Path, data_root: Path, out_dir: str | Path | None = None,
                              quick: bool = False, references: bool = True, probing_dir: Path | None = None) -> dict:
    model = Embedder(checkpoint)
    embedders: dict = {"model": model}
    if references:
        embedders["untrained"] = Embedder.untrained_like(checkpoint)
        embedders.update(reference_embedders(Path(data_root), max_lines=2000 if quick else None))
    out = Path(out_dir) if out_dir else Path(checkpoint).parent / "eval"
    return run_suite(suite, embedders, Path(data_root), out, quick=quick, probing_dir=probing_dir)
