"""Reference embedders that stand beside the model in every table.

`BagOfSubwords` is the papers' GloVe-BoW reference rebuilt from the model's own training
text (paper 002 trained GloVe on the same BPE data): a sentencepiece model per language,
piece vectors from a truncated SVD of the positive PMI co-occurrence matrix (Levy et al.,
2015), and the sentence vector is the mean of its piece vectors. Each language has its own
unaligned space, so its cross-lingual scores show what no shared space gives (chance).
`FunctionEmbedder` turns any callable into the protocol, for third-party encoders.
"""
from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import sentencepiece as spm
from sklearn.utils.extmath import randomized_svd
from tqdm import tqdm

from interlingua.atomic_files import atomic_output, write_bytes_atomic, write_text_atomic
from interlingua.evaluation.sentence.compute import single_thread
from interlingua.evaluation.sentence.protocol import EvaluationError
from interlingua.evaluation.sentence.tasks import MULTI30K_LANGS, load_multi30k


def ppmi_embeddings(sequences: Sequence[np.ndarray], vocab_size: int, *, dim: int = 300, window: int = 5,
                    alpha: float = 0.75, seed: int = 0) -> np.ndarray:
    """(vocab_size, dim) unit-length vectors: SVD (U * sqrt(S)) of the PPMI matrix of symmetric-window counts.

    `alpha` smooths the context distribution (Levy et al., 2015); pieces never seen get zeros."""
    ids = np.concatenate(sequences) if sequences else np.zeros(0, dtype=np.int64)
    sent = np.repeat(np.arange(len(sequences)), [len(s) for s in sequences])
    rows, cols = [], []
    for off in range(1, window + 1):
        same = sent[off:] == sent[:-off]
        a, b = ids[:-off][same], ids[off:][same]
        rows += [a, b]
        cols += [b, a]
    if not rows or not sum(len(r) for r in rows):
        raise EvaluationError("too little text to build subword co-occurrence vectors")
    r, c = np.concatenate(rows), np.concatenate(cols)
    counts = sp.coo_matrix((np.ones(len(r)), (r, c)), shape=(vocab_size, vocab_size)).tocsr()
    counts.sum_duplicates()
    total = counts.sum()
    p_word = np.asarray(counts.sum(axis=1)).ravel() / total
    ctx = np.asarray(counts.sum(axis=0)).ravel() ** alpha
    p_ctx = ctx / ctx.sum()
    coo = counts.tocoo()
    pmi = np.log(coo.data / total) - np.log(p_word[coo.row]) - np.log(p_ctx[coo.col])
    keep = pmi > 0
    ppmi = sp.csr_matrix((pmi[keep], (coo.row[keep], coo.col[keep])), shape=counts.shape)
    k = max(1, min(dim, vocab_size - 1))
    U, S, _ = randomized_svd(ppmi, n_components=k, random_state=seed)
    vecs = U * np.sqrt(S)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return np.divide(vecs, norms, out=np.zeros_like(vecs), where=norms > 0).astype(np.float32)


class BagOfSubwords:
    """Mean of per-language subword vectors; implements the embedding protocol (no per-head output)."""

    supports_heads = False

    def __init__(self, models: Mapping[str, bytes], vectors: Mapping[str, np.ndarray], info: Mapping | None = None):
        if set(models) != set(vectors):
            raise EvaluationError(f"bag-of-subwords languages differ: pieces for {sorted(models)}, "
                                  f"vectors for {sorted(vectors)}")
        self._protos = dict(models)
        self._sp = {lang: spm.SentencePieceProcessor(model_proto=proto) for lang, proto in models.items()}
        self._vectors = {lang: np.asarray(v, dtype=np.float32) for lang, v in vectors.items()}
        self.languages = sorted(models)
        self.info = dict(info or {})  # how it was trained; saved with it

    @property
    def dim(self) -> int:
        return next(iter(self._vectors.values())).shape[1]

    @classmethod
    def train(cls, texts: Mapping[str, Sequence[str]], *, vocab_size: int = 8000, dim: int = 300, window: int = 5,
              seed: int = 0) -> BagOfSubwords:
        """Fit a lower-casing sentencepiece model and PPMI-SVD piece vectors per language."""
        models, vectors = {}, {}
        for lang, lines in tqdm(texts.items(), desc="bag-of-subwords reference", leave=False):
            lines = [ln for ln in lines if ln.strip()]
            if len(lines) < 10:
                raise EvaluationError(f"bag-of-subwords: only {len(lines)} non-empty lines for '{lang}' (need 10+)")
            buf = io.BytesIO()
            spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, vocab_size=vocab_size,
                                           hard_vocab_limit=False, normalization_rule_name="nmt_nfkc_cf",
                                           character_coverage=1.0, num_threads=1, minloglevel=2)
            proc = spm.SentencePieceProcessor(model_proto=buf.getvalue())
            seqs = [np.asarray(s, dtype=np.int64) for s in proc.encode(lines)]
            models[lang] = buf.getvalue()
            with single_thread():  # the randomized SVD gains nothing from a contended second thread
                vectors[lang] = ppmi_embeddings(seqs, proc.get_piece_size(), dim=dim, window=window, seed=seed)
        info = {"lines": {lang: len(t) for lang, t in texts.items()}, "vocab_size": vocab_size, "dim": dim,
                "window": window, "seed": seed}
        return cls(models, vectors, info)

    @classmethod
    def from_multi30k(cls, data_root: Path, languages: Sequence[str] = MULTI30K_LANGS, *, split: str = "train",
                      max_lines: int | None = None, **kwargs) -> BagOfSubwords:
        """Train on Multi30k (the papers' small-data setting): the text the translation models see."""
        texts = {lang: load_multi30k(data_root, split, lang)[:max_lines] for lang in languages}
        bow = cls.train(texts, **kwargs)
        bow.info.update(corpus=f"multi30k/{split}", max_lines=max_lines, data_root=str(Path(data_root).resolve()))
        return bow

    def save(self, folder: Path) -> Path:
        """Write `<lang>.model` + `<lang>.npy` per language, to reuse without retraining."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for lang in self.languages:
            write_bytes_atomic(folder / f"{lang}.model", self._protos[lang])
            with atomic_output(folder / f"{lang}.npy") as f:
                np.save(f, self._vectors[lang])
        write_text_atomic(folder / "bag_of_subwords.json", json.dumps({"languages": self.languages, "info": self.info}))
        return folder

    @classmethod
    def load(cls, folder: Path) -> BagOfSubwords:
        meta_path = Path(folder) / "bag_of_subwords.json"
        if not meta_path.is_file():
            raise EvaluationError(f"{folder} holds no saved bag-of-subwords reference (no bag_of_subwords.json)")
        meta = json.loads(meta_path.read_text())
        langs = meta["languages"]
        return cls({lang: (Path(folder) / f"{lang}.model").read_bytes() for lang in langs},
                   {lang: np.load(Path(folder) / f"{lang}.npy") for lang in langs}, meta.get("info"))

    def encode(self, sentences: Sequence[str], lang: str, pooling: str = "mean", batch_size: int = 64) -> np.ndarray:
        """(n, dim) float32 means of piece vectors; a sentence without known pieces gets zeros."""
        if pooling != "mean":
            raise EvaluationError(f"the bag-of-subwords reference has only pooling='mean', not '{pooling}'")
        if lang not in self._sp:
            raise EvaluationError(f"the bag-of-subwords reference has no '{lang}' (it has {self.languages})")
        table = self._vectors[lang]
        out = np.zeros((len(sentences), table.shape[1]), dtype=np.float32)
        for i, ids in enumerate(self._sp[lang].encode(list(sentences))):
            if ids:
                out[i] = table[ids].mean(axis=0)
        return out


class FunctionEmbedder:
    """Any encoder as the protocol: `mean_fn(sentences, lang) -> (n, d)`, optional `heads_fn -> (n, k, d)`.

    >>> emb = FunctionEmbedder(lambda s, lang: st_model.encode(list(s)), ["en", "de"])
    """

    def __init__(self, mean_fn: Callable[[Sequence[str], str], np.ndarray], languages: Sequence[str],
                 heads_fn: Callable[[Sequence[str], str], np.ndarray] | None = None):
        self._mean, self._heads = mean_fn, heads_fn
        self.languages = list(languages)
        self.supports_heads = heads_fn is not None

    def encode(self, sentences: Sequence[str], lang: str, pooling: str = "mean", batch_size: int = 64) -> np.ndarray:
        if lang not in self.languages:
            raise EvaluationError(f"this embedder has no '{lang}' (it has {self.languages})")
        if pooling == "mean":
            return np.asarray(self._mean(sentences, lang), dtype=np.float32)
        if pooling == "heads" and self._heads is not None:
            return np.asarray(self._heads(sentences, lang), dtype=np.float32)
        raise EvaluationError(f"this embedder has no pooling='{pooling}'")


def reference_embedders(data_root: Path, *, languages: Sequence[str] = MULTI30K_LANGS, cache_dir: Path | None = None,
                        max_lines: int | None = None, seed: int = 0) -> dict[str, BagOfSubwords]:
    """The suite's own reference points by name, trained on Multi30k (or loaded from `cache_dir`).

    A cached reference is reused only when it was trained on the same data root with the same
    `max_lines` and `seed` and has every language asked for; otherwise it is retrained and saved."""
    bow = None
    if cache_dir is not None and (Path(cache_dir) / "bag_of_subwords.json").is_file():
        bow = BagOfSubwords.load(cache_dir)
        same = (bow.info.get("max_lines") == max_lines and bow.info.get("seed") == seed
                and bow.info.get("data_root") == str(Path(data_root).resolve()))
        if not same or not set(languages) <= set(bow.languages):
            bow = None  # saved with other settings: train afresh
    if bow is None:
        bow = BagOfSubwords.from_multi30k(data_root, languages, max_lines=max_lines, seed=seed)
        if cache_dir is not None:
            bow.save(cache_dir)
    return {"bow-subword": bow}
