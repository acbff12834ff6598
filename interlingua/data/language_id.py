"""Which language an output is in, for off-target rates (langid.py; its model ships in the PyPI package).

Language identification of short captions is noisy, so the identifier is restricted to the
candidate languages of the evaluation (the model's languages: an output is in one of them or
it is noise), and every off-target rate is reported beside the identifier's accuracy on the
reference sentences of the same language, its ceiling.
"""
from __future__ import annotations

import array
import copy
import functools
import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from langid.langid import LanguageIdentifier, model

from interlingua.atomic_files import atomic_output
from interlingua.cache import cache_dir

log = logging.getLogger(__name__)

LANGUAGES = frozenset({
    "af", "am", "an", "ar", "as", "az", "be", "bg", "bn", "br", "bs", "ca", "cs", "cy", "da", "de", "dz", "el", "en",
    "eo", "es", "et", "eu", "fa", "fi", "fo", "fr", "ga", "gl", "gu", "he", "hi", "hr", "ht", "hu", "hy", "id", "is",
    "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "ku", "ky", "la", "lb", "lo", "lt", "lv", "mg", "mk", "ml", "mn",
    "mr", "ms", "mt", "nb", "ne", "nl", "nn", "no", "oc", "or", "pa", "pl", "ps", "pt", "qu", "ro", "ru", "rw", "se",
    "si", "sk", "sl", "sq", "sr", "sv", "sw", "ta", "te", "th", "tl", "tr", "ug", "uk", "ur", "vi", "vo", "wa", "xh",
    "zh", "zu"
})
"""The 97 languages of langid.py's model (its `nb_classes`, checked against the model by the tests): what
`supported` answers from, since loading the model takes seconds and most runs never identify anything."""


@functools.cache
def _full_identifier() -> LanguageIdentifier:
    """langid.py's model, unpacked once a process. Unpacking takes 2-3 s (bz2 and pickle), so the unpacked
    arrays are kept in the cache folder, named by the model's digest, and read back in a fraction of it."""
    path = cache_dir() / f"langid-{hashlib.sha1(model).hexdigest()[:16]}.npz"
    try:
        return _from_arrays(path)
    except (OSError, ValueError, KeyError, EOFError):  # not there yet, or unreadable: unpack and rewrite it
        pass
    identifier = LanguageIdentifier.from_modelstring(model, norm_probs=False)
    try:
        _write_arrays(identifier, path)
    except OSError as err:  # a read-only home must not stop an evaluation
        log.debug("could not cache langid's model in %s: %s", path, err)
    return identifier


def _write_arrays(identifier: LanguageIdentifier, path: Path) -> None:
    states = sorted(identifier.tk_output)
    outputs = [identifier.tk_output[s] for s in states]
    with atomic_output(path) as f:
        np.savez(f, nb_ptc=identifier.nb_ptc, nb_pc=identifier.nb_pc, nb_classes=np.array(identifier.nb_classes),
                 tk_nextmove=np.frombuffer(identifier.tk_nextmove, dtype=np.uint16),
                 output_states=np.array(states, dtype=np.int64),
                 output_lengths=np.array([len(o) for o in outputs], dtype=np.int64),
                 output_features=np.array([i for o in outputs for i in o], dtype=np.int64))


def _from_arrays(path: Path) -> LanguageIdentifier:
    """The identifier `from_modelstring` builds, from the arrays `_write_arrays` saved (the same types:
    langid indexes `tk_nextmove` and `tk_output` per byte of text, which Python ints and an array.array
    keep fast)."""
    with np.load(path, allow_pickle=False) as z:
        lengths = z["output_lengths"].tolist()
        ends = np.cumsum(lengths).tolist()
        features = z["output_features"].tolist()
        tk_output = {state: tuple(features[end - n:end])
                     for state, n, end in zip(z["output_states"].tolist(), lengths, ends)}
        tk_nextmove = array.array("H", z["tk_nextmove"].tobytes())
        nb_ptc, nb_pc = z["nb_ptc"], z["nb_pc"]
        classes = z["nb_classes"].tolist()
    return LanguageIdentifier(nb_ptc, nb_pc, nb_ptc.shape[0], classes, tk_nextmove, tk_output, norm_probs=False)


@functools.lru_cache(maxsize=8)
def _identifier(candidates: tuple[str, ...]) -> LanguageIdentifier:
    full = _full_identifier()
    ident = copy.copy(full)  # set_languages trims from the full model it keeps, so the copies share its arrays
    known = set(full.nb_classes)
    unknown = [c for c in candidates if c not in known]
    if unknown:
        raise ValueError(f"langid has no model for {', '.join(unknown)}")
    ident.set_languages(list(candidates))
    return ident


def identify(texts: Sequence[str], candidates: Sequence[str]) -> list[str | None]:
    """The most likely of `candidates` for each text; None for an empty text (it is in no language)."""
    ident = _identifier(tuple(sorted(set(candidates))))
    return [ident.classify(t)[0] if t.strip() else None for t in texts]


def supported(languages: Sequence[str]) -> bool:
    """Whether the identifier knows every one of `languages` (codes such as 'de'), without loading it."""
    return set(languages) <= LANGUAGES


def off_target_rate(texts: Sequence[str], expected: str, candidates: Sequence[str]) -> float:
    """Percentage of `texts` not identified as `expected` (empty outputs count as off-target)."""
    if not texts:
        return float("nan")
    found = identify(texts, candidates)
    return 100.0 * sum(f != expected for f in found) / len(found)
