"""Download the sentence-vector evaluation data (SentEval downstream tasks, XNLI dev) with SHA-256 checks.

The files come from public GitHub repositories pinned to one commit, so every byte is known
in advance (`checksums/*.sha256`). The layout is the one `interlingua evaluate --data-root`
reads: `<root>/senteval_downstream/...` and `<root>/xnli/dev-<lang>.tsv`.
"""
from __future__ import annotations

import gzip
import hashlib
from importlib import resources
from pathlib import Path

from interlingua.data.download import install_files, sha256_of

# SentEval's get_transfer_data.bash output, vendored byte for byte in this repository.
SENTEVAL_URL = ("https://raw.githubusercontent.com/yan-soares/research_embeddings_fine_tuning/"
                "045c5e94572a60c6bd7173e152c897f6b694c5a8/data/downstream/{path}")
# XTREME's per-language split of XNLI 1.0 (dev), before the files became Git-LFS pointers.
XNLI_URL = ("https://raw.githubusercontent.com/wuhjie/few_shots_that_matters_wu/"
            "6bfe6324e428ec21a777b5543cd8e50ec82dcb3c/data/xnli/{name}")


def read_checksums(name: str) -> dict[str, str]:
    """{relative path: SHA-256} from the package's `checksums/<name>.sha256` (sha256sum format)."""
    text = resources.files("interlingua.data").joinpath("checksums").joinpath(f"{name}.sha256").read_text()
    return {path: digest for digest, path in (line.split(maxsplit=1) for line in text.splitlines() if line.strip())}


def content_sha256(path: Path) -> str:
    """SHA-256 of the file's content, decompressed when it is gzipped (gzip headers carry dates)."""
    if path.suffix != ".gz":
        return sha256_of(path)
    return hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()


def senteval_upstream_path(name: str) -> str:
    """Where a file of our layout lives in SentEval's downstream folder."""
    if name.startswith("STSBenchmark/original/"):
        return "STS/STSBenchmark/stsbenchmark/" + name.removeprefix("STSBenchmark/original/")
    if name.startswith("STSBenchmark/"):
        return "STS/" + name
    return name.removesuffix(".gz")


def _gzip_if_named(name: str, data: bytes) -> bytes:
    return gzip.compress(data, mtime=0) if name.endswith(".gz") else data


def get_senteval_downstream(dest: str | Path, source_dir: str | Path | None = None) -> Path:
    """SentEval's downstream tasks (MR, CR, SUBJ, MPQA, TREC, SST-2, STS12-16, STS-B, SICK) into `dest`."""
    dest = Path(dest)
    install_files(dest, read_checksums("senteval_downstream"), source_dir=source_dir, desc="senteval",
                  url_for=lambda name: SENTEVAL_URL.format(path=senteval_upstream_path(name)),
                  digest=content_sha256, convert=_gzip_if_named)
    return dest


def get_xnli_dev(dest: str | Path, source_dir: str | Path | None = None) -> Path:
    """XNLI 1.0 dev in en, de, fr, es (`premise<TAB>hypothesis<TAB>label`, LF line ends) into `dest`."""
    dest = Path(dest)
    install_files(dest, read_checksums("xnli"), source_dir=source_dir, desc="xnli",
                  url_for=lambda name: XNLI_URL.format(name=name),
                  convert=lambda name, data: data.replace(b"\r\n", b"\n"))
    return dest
