"""Download SentEval's ten probing data sets (Conneau et al., 2018) from the public SentEval repository.

The files (`split<TAB>label<TAB>sentence`, 100k/10k/10k lines each) are what the papers'
probing tables used; `interlingua.evaluation.sentence` reads them from the folder given.
Each file is fetched to a temporary name and moved into place, so an interrupted download
never leaves a half file that looks complete.
"""
from __future__ import annotations

from pathlib import Path

from interlingua.data.download import fetch

SENTEVAL_PROBING_URL = "https://raw.githubusercontent.com/facebookresearch/SentEval/main/data/probing/{name}"
SENTEVAL_PROBING_FILES = (
    "sentence_length.txt", "word_content.txt", "bigram_shift.txt", "tree_depth.txt", "top_constituents.txt",
    "past_present.txt", "subj_number.txt", "obj_number.txt", "odd_man_out.txt", "coordination_inversion.txt",
)


def download_senteval_probing(dest: Path, *, overwrite: bool = False, timeout: float = 60.0) -> list[Path]:
    """Fetch the ten SentEval probing files into `dest` over HTTPS; files already there are kept.

    Returns the paths of all ten files. Raises `DataError` naming the file and the reason
    when one cannot be fetched (for example without internet access)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in SENTEVAL_PROBING_FILES:
        path = dest / name
        if overwrite or not path.is_file() or path.stat().st_size == 0:
            fetch(SENTEVAL_PROBING_URL.format(name=name), path, timeout=timeout,
                  hint=f"offline? fetch the SentEval probing files elsewhere and put them in {dest}")
        paths.append(path)
    return paths
