"""The documentation: the quickstart runs as written, the README stays a front page, every relative link resolves.

The site itself (`mkdocs build --strict`, broken links and references fail it) is built by scripts/test.sh."""
from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
QUICKSTART = DOCS / "guide" / "quickstart.md"
README_MAX_LINES = 150

# Pages people read: the README, the guide, the reference, the results index and the figures page.
PAGES = sorted({README, DOCS / "index.md", DOCS / "TESTING.md", DOCS / "results" / "index.md",
                DOCS / "results" / "speed.md", *DOCS.glob("guide/*.md"), *DOCS.glob("reference/*.md")})

# What makes the quickstart's model tiny and its training a few steps long (it is written for ten minutes).
TINY = ("--set preprocess.vocab_size=400 --set preprocess.max_train_sentences=200 "
        "--set preprocess.max_valid_sentences=20 --set model.embed_dim=32 --set model.encoder.hidden=32 "
        "--set model.decoder.hidden=32 "
        "--set model.bridge.hidden=32 --set model.bridge.heads=4 --set train.max_steps=20 --set train.valid_every=20 "
        "--set train.batch_size=20 --set train.precision=fp32 --set train.threads=1")

FENCE = re.compile(r"^```(\S*)\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def code_blocks(path: Path) -> list[tuple[str, str]]:
    """(language, code) of every fenced block of a Markdown file, in order."""
    blocks: list[tuple[str, str]] = []
    lang: str | None = None
    lines: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = FENCE.match(line)
        if lang is None and match:
            lang, lines = match.group(1), []
        elif lang is not None and line.strip() == "```":
            blocks.append((lang, "\n".join(lines) + "\n"))
            lang = None
        elif lang is not None:
            lines.append(line)
    assert lang is None, f"{path}: a code block is not closed"
    return blocks


def relative_links(path: Path) -> list[str]:
    """Link targets of a Markdown file that point into the repository (no URL, no anchor of the page itself);
    links inside code blocks and code spans are not links."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_readme_is_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"
    text = "\n".join(lines)
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):  # CI runs the second one
        assert command in text, f"README.md lost its command {command!r}"
        assert (REPO / command.split()[1]).is_file()
    assert [lang for lang, _ in code_blocks(README)].count("python") == 1, "README.md: one Python example"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    assert page.is_file(), f"{page} is missing"
    broken = [t for t in relative_links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert not broken, f"{page.relative_to(REPO)}: links to missing files: {broken}"


def test_every_guide_page_is_linked():
    """A guide page nobody links to is a page nobody finds: the README or the site's home links each one."""
    linked = {(p.parent / t.split("#")[0]).resolve() for p in (README, DOCS / "index.md") for t in relative_links(p)}
    pages = [*DOCS.glob("guide/*.md"), *DOCS.glob("reference/*.md")]
    assert pages
    unlinked = [str(p.relative_to(REPO)) for p in pages if p.resolve() not in linked]
    assert not unlinked, f"pages linked from neither README.md nor docs/index.md: {unlinked}"


def test_quickstart_runs_as_written(multi30k_corpus, tmp_path, monkeypatch, capsys):
    """Every bash block of the quickstart in a shell, every python block in Python, in order, in an empty folder;
    then the README's Python example against the model it trained. Multi30k is put where the page's download
    writes it (the download keeps files whose SHA-256 is right, so nothing is fetched), and `interlingua train`
    gets the TINY overrides."""
    blocks = code_blocks(QUICKSTART)
    assert [lang for lang, _ in blocks].count("bash") >= 3 and any(lang == "python" for lang, _ in blocks)
    shutil.copytree(multi30k_corpus.parent, tmp_path / "data" / "multi30k")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "OMP_NUM_THREADS": "1"}
    monkeypatch.chdir(tmp_path)
    trained = False
    for i, (lang, code) in enumerate(blocks):
        if lang == "bash":
            code, n = re.subn(r"^(interlingua train \S+)", rf"\1 {TINY}", code, flags=re.M)
            trained = trained or n > 0
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"quickstart block {i} failed:\n{code}\n{done.stdout}\n{done.stderr}"
        elif lang == "python":
            exec(compile(code, f"{QUICKSTART.name} block {i}", "exec"), {"__name__": "__quickstart__"})
    assert trained, "the quickstart has no `interlingua train` command"
    assert (tmp_path / "runs" / "quickstart" / "best.pt").is_file()
    printed = capsys.readouterr().out
    assert "('de', 'fr')" in printed, printed  # the zero-shot directions, as the page says
    for lang, code in code_blocks(README):
        if lang == "python":
            exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})


def test_own_data_steps_make_a_corpus_and_a_config(multi30k_corpus, tmp_path):
    """The shell steps of "Training on your own data" (a TSV split into files, the corpus YAML, the run's YAML),
    run as written on a TSV of Multi30k pairs; the corpus and the config they write then load and validate."""
    from interlingua.config import load_config
    from interlingua.data.corpus import load_corpus, read_group

    page = DOCS / "guide" / "own-data.md"
    root = multi30k_corpus.parent
    en, de = (gzip.decompress((root / f"train.{lang}.gz").read_bytes()).decode().splitlines()[:1500]
              for lang in ("en", "de"))
    (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in zip(en, de)), encoding="utf-8")
    shell = [code for lang, code in code_blocks(page) if lang == "bash" and "interlingua " not in code]
    assert len(shell) >= 3
    for code in shell:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, f"{page.name}:\n{code}\n{done.stdout}\n{done.stderr}"
    cfg = load_config(tmp_path / "mydata.yaml")
    corpus = load_corpus(cfg.corpus)
    assert corpus.languages == ["en", "de"] and sorted(corpus.splits) == ["train", "val"]
    train = read_group(corpus.groups("train")[0])
    assert train["en"][0] == en[1000] and train["de"][-1] == de[-1] and len(train["en"]) == 500
