"""SentEval-style evaluation of sentence vectors: classification, similarity, NLI, probing,
cross-lingual transfer and retrieval, with reference embedders beside the model.

>>> from interlingua.evaluation.sentence import run_suite, reference_embedders
>>> embedders = {"model": interlingua.load("runs/x/best.pt"), **reference_embedders(data_root)}
>>> run_suite("all", embedders, data_root, Path("runs/x/eval"))
"""
from interlingua.evaluation.sentence.baselines import BagOfSubwords, FunctionEmbedder, reference_embedders
from interlingua.evaluation.sentence.heads import (
                                                   head_entropies,
                                                   head_entropy_stats,
                                                   plot_head_heatmap,
                                                   plot_head_heatmaps,
                                                   plot_per_head_accuracy,
)
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EmbedderLike, EvaluationError
from interlingua.evaluation.sentence.suites import SUITES, Budget, run_suite
from interlingua.evaluation.sentence.tasks import MissingDataError

__all__ = [
    "SUITES", "BagOfSubwords", "Budget", "CachedEmbedder", "EmbedderLike", "EvaluationError", "FunctionEmbedder",
    "MissingDataError", "head_entropies", "head_entropy_stats", "plot_head_heatmap", "plot_head_heatmaps",
    "plot_per_head_accuracy", "reference_embedders", "run_suite",
]
