"""The opening the decoding benches share: the C allocator as the command line sets it, and the options that name
the model and the direction."""
from __future__ import annotations

import argparse


def decoding_parser(doc: str) -> argparse.ArgumentParser:
    """`interlingua.tune_allocator()` (INTERLINGUA_ALLOCATOR=default: malloc left as it is), then a parser described
    by `doc`'s first line with --model (required), --src (en) and --tgt (de)."""
    from interlingua import tune_allocator
    tune_allocator()
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", default="en")
    ap.add_argument("--tgt", default="de")
    return ap
