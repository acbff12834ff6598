"""Which language an output is in, for off-target rates (langid.py; its model ships in the PyPI package).

Language identification of short captions is noisy, so the identifier is restricted to the
candidate languages of the evaluation (the model's languages: an output is in one of them or
it is noise), and every off-target rate is reported beside the identifier's accuracy on the
reference sentences of the same language, its ceiling.
"""
from __future__ import annotations

import copy
import functools
from collections.abc import Sequence

from langid.langid import LanguageIdentifier, model

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
    """langid.py's model, unpacked once a process: that takes seconds (bz2 and pickle), restricting it none."""
    return LanguageIdentifier.from_modelstring(model, norm_probs=False)


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
