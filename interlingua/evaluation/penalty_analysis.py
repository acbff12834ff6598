"""What the penalty ||A A^T - I||^2 does to the bridge (journal Table 13 and Figure 7).

For each model, the entropy of every head's attention over a sentence's subwords, averaged
over sentences of at most 40 tokens, and split into the heads up to the sentence length n_i
and the heads beyond it (where the paper found the penalty spreads attention: 1.73 vs 0.82
nats). One example sentence's attention is drawn per head for every model.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from interlingua.atomic_files import write_text_atomic
from interlingua.errors import InterlinguaError
from interlingua.evaluation.registry import Report, named_checkpoints
from interlingua.evaluation.sentence.heads import head_entropy_stats, plot_head_heatmap, plot_head_heatmaps
from interlingua.inference.api import Model, load
from interlingua.textio import read_input_lines

# Journal Table 13: EN-DE, k = 50, 10k NewsCrawl sentences of <= 40 tokens; (with, without) penalty.
PAPER_TABLE13 = {"all_heads": (1.20, 0.63), "up_to_length": (0.49, 0.43), "beyond_length": (1.73, 0.82)}
ROW_NAMES = {"all_heads": "all heads, k in [1, k]", "up_to_length": "heads up to the length, k in [1, n_i]",
             "beyond_length": "heads beyond the length, k in (n_i, k]"}


def head_entropy_table(models: dict[str, Model], sentences: list[str], lang: str, max_tokens: int = 40) -> dict:
    """Table 13 statistics per model, over the sentences of at most `max_tokens` subwords."""
    out = {}
    for name, emb in models.items():
        atts = [m.bridge for m in emb.attention_maps(sentences, lang, self_attention=False)
                if m.bridge is not None and 0 < m.bridge.shape[1] <= max_tokens]
        out[name] = head_entropy_stats(atts)
    return out


def _example_attention(model: Model, example: str, lang: str) -> tuple[np.ndarray, list[str]]:
    """The bridge's heads over the example's tokens, and the tokens: what its heat map draws."""
    maps = model.attention_maps([example], lang, self_attention=False)[0]
    if not maps.tokens:
        raise InterlinguaError("cannot show attention for an empty sentence")
    assert maps.bridge is not None  # asked for the bridge alone: a model without an attention bridge raised
    return maps.bridge, maps.tokens


def _fmt(stat: dict) -> str:
    if stat["mean"] is None:
        return "- (no heads)"
    return f"{stat['mean']:.2f} ± {stat['std']:.2f} ({stat['count']})"


def table_markdown(stats: dict, lang: str, n_sentences: int) -> str:
    names = list(stats)
    lines = [f"# Bridge attention entropy per head ({lang})", "",
             f"Mean entropy (nats) ± std (number of sentence-head pairs) of each head's attention over the subwords, "
             f"{n_sentences} sentences of at most 40 subwords; n_i = the sentence's length. "
             "Paper: journal Table 13 (EN-DE, k = 50, NewsCrawl), with / without penalty.", "",
             "| heads | " + " | ".join(f"{n} (k={stats[n]['heads']}, {stats[n]['sentences']} sent.)" for n in names)
             + " | paper with / without |", "|---" * (len(names) + 2) + "|"]
    for row, label in ROW_NAMES.items():
        paper = PAPER_TABLE13[row]
        lines.append(f"| {label} | " + " | ".join(_fmt(stats[n][row]) for n in names)
                     + f" | {paper[0]:.2f} / {paper[1]:.2f} |")
    return "\n".join(lines) + "\n"


def penalty_analysis(models: dict[str, Model], sentences: list[str], lang: str, example: str,
                     out_dir: Path, max_tokens: int = 40) -> dict:
    """Write heads.md / heads.json (entropy table) and heat maps of `example` under out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stats = head_entropy_table(models, sentences, lang, max_tokens)
    n_used = max(s["sentences"] for s in stats.values())
    write_text_atomic(out_dir / "heads.md", table_markdown(stats, lang, n_used))
    write_text_atomic(out_dir / "heads.json", json.dumps({"lang": lang, "stats": stats, "paper_table13": PAPER_TABLE13},
                                                         indent=1))
    attentions = {name: _example_attention(emb, example, lang) for name, emb in models.items()}
    pngs = []
    for name, (att, pieces) in attentions.items():
        pngs.append(plot_head_heatmap(att, pieces, out_dir / f"heads_{name}.png", title=f"{name}: {example}"))
    pieces_sets = {tuple(p) for _, p in attentions.values()}
    if len(models) > 1 and len(pieces_sets) == 1:  # same segmentation: one stacked figure, as Figure 7
        pngs.append(plot_head_heatmaps({n: a for n, (a, _) in attentions.items()}, list(pieces_sets.pop()),
                                       out_dir / "heads_all.png", title=example))
    return {"stats": stats, "plots": [str(p) for p in pngs]}


def evaluate_heads(checkpoints: dict[str, Path], lang: str, out_dir: Path, sentences: list[str] | None = None,
                  example: str | None = None, corpus: str | Path | None = None, split: str = "test_2016_flickr",
                  device: str = "cpu", sentences_name: str = "the given sentences") -> dict:
    """`interlingua analyze heads`: `penalty_analysis` of each named checkpoint over `sentences` (default:
    the `lang` side of `split` of `corpus`, itself by default the first model's), drawing `example`
    (default: the first sentence); `sentences_name` says where given sentences came from, in errors."""
    from interlingua.evaluation.bleu_matrix import load_split_texts
    models = {name: load(path, device) for name, path in checkpoints.items()}
    for model in models.values():
        model.check_source(lang)  # unknown language: one error listing the known ones
    corpus = corpus or next(iter(models.values())).config.corpus
    where = sentences_name
    if sentences is None:
        sentences = [s for g in load_split_texts(Path(corpus), split) for s in g.get(lang, [])]
        where = f"split {split} of {corpus}"
    if not sentences:
        raise InterlinguaError(f"no '{lang}' sentences in {where}")
    return penalty_analysis(models, sentences, lang, example or sentences[0], out_dir)


def report_heads(checkpoint: str | None, model: list[str] | None, lang: str, split: str, corpus: str | None,
                 input: str | None, sentence: str | None, out: str | None, device: str) -> Report:
    """`interlingua analyze heads` (`registry.EVALUATIONS`): written under `out` (default: <first model
    folder>/analysis)."""
    models = named_checkpoints(model, "heads", checkpoint)
    out_dir = Path(out or next(iter(models.values())).parent / "analysis")
    sentences = read_input_lines(input) if input else None
    result = evaluate_heads(models, lang, out_dir, sentences=sentences, example=sentence, corpus=corpus, split=split,
                            device=device, sentences_name=str(input))
    md, js = out_dir / "heads.md", out_dir / "heads.json"
    return Report(md.read_text(encoding="utf-8"), json.loads(js.read_text(encoding="utf-8")),
                  [md, js, *map(Path, result["plots"])], result=result)
