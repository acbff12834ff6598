"""Does a decoding step compiled with torch.compile (inductor) translate faster than the eager one here?

Run: python bench/compiled_decoding.py --model MODEL [--src en --tgt de] [--sentences 1000] [--beams 1,5]
     [--threads 2] [--rounds 3] [--out bench/results/compiled_decoding.jsonl]

The decoder's own `step` (the Transformer's: embedding, layers over the key/value cache, output layer,
log-softmax) is compiled with `dynamic=True` (rows, cache and memory lengths as symbols) and inductor's
`freezing` (the weights constants of the graph, linear layers packed), and searched exactly as the eager
step is (`modules.search`). Three networks from the same file are timed in one process, interleaved, each
pass the whole test set: `eager` as `interlingua.load` runs it (the output layer packed where measured
faster, `modules.packed_linear`), `eager_unpacked` (nn.Linear throughout: what the compiled step starts
from), and `compiled`; with `--unsafe-guards` also `compiled` with torch.compile's guards skipped
(`set_stance(skip_guard_eval_unsafe=True)`, how much of the step the guard checks cost). One JSON line per
beam: each variant's pass times (s), the first compiled pass (compilation included), graphs compiled, and
how many translations equal the eager ones (a variant that stopped with an error: `failed`).
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from _decoding import decoding_parser  # noqa: E402
from _results import append_result  # noqa: E402

from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.data.inputs import tokenize_inputs  # noqa: E402
from interlingua.model_files.load import load_model  # noqa: E402
from interlingua.model_files.loaded import LoadedModel  # noqa: E402
from interlingua.modules.base import Decoder  # noqa: E402
from interlingua.modules.model import TranslationNetwork  # noqa: E402
from interlingua.modules.packed_linear import pack_output_layers  # noqa: E402
from interlingua.modules.search import translate_ids  # noqa: E402


class CompiledStep(torch.nn.Module):
    """A decoder with its `step` compiled; everything else is the decoder's."""

    def __init__(self, decoder: Decoder):
        super().__init__()
        self.inner, self.graphs = decoder, 0
        self.max_length = decoder.max_length
        self.compiled = torch.compile(decoder.step, dynamic=True, backend=self._backend)

    def _backend(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        from torch._inductor.compile_fx import compile_fx
        self.graphs += 1
        return compile_fx(gm, example_inputs, config_patches={"freezing": True})

    def start_state(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.start_state(*args, **kwargs)

    def step(self, prev: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        return self.compiled(prev, state)


Context = Callable[[], contextlib.AbstractContextManager]


def with_decoder(network: TranslationNetwork, decoder: Decoder | CompiledStep, unsafe: bool = False) -> Context:
    """A context in which `network` decodes every target language with `decoder` (`unsafe`: with torch.compile's
    guard checks skipped)."""
    @contextlib.contextmanager
    def use() -> Iterator[None]:
        network.decoder_for = lambda lang: decoder  # type: ignore[method-assign,assignment,return-value]  # a stand-in
        stance = torch.compiler.set_stance(skip_guard_eval_unsafe=True) if unsafe else contextlib.nullcontext()
        try:
            with stance:
                yield
        finally:
            del network.decoder_for
    return use


def time_beam(args: argparse.Namespace, packed: LoadedModel, plain: LoadedModel, seqs: list, beam: int) -> dict:
    """One JSON record: every variant timed `args.rounds` times, interleaved, at this beam size."""
    compiled = CompiledStep(plain.network.decoder_for(args.tgt))
    variants: dict[str, tuple[TranslationNetwork, Context]] = {
        "eager": (packed.network, contextlib.nullcontext),
        "eager_unpacked": (plain.network, contextlib.nullcontext),
        "compiled": (plain.network, with_decoder(plain.network, compiled))}
    if args.unsafe_guards:
        variants["compiled_unsafe_guards"] = (plain.network, with_decoder(plain.network, compiled, unsafe=True))

    def run(name: str) -> tuple[float, list[str]]:
        network, context = variants[name]
        t0 = time.perf_counter()
        with context():
            out = translate_ids(network, packed.vocabs, seqs, args.src, args.tgt, batch_size=args.batch_size,
                                beam=beam, max_len_cap=4 * packed.config.preprocess.max_len)
        return time.perf_counter() - t0, out

    _, reference = run("eager")
    first, _ = run("compiled")
    times: dict[str, list[float]] = {name: [] for name in variants}
    same: dict[str, int] = {}
    failed: dict[str, str] = {}
    for _ in range(args.rounds):
        for name in [n for n in variants if n not in failed]:
            try:
                seconds, out = run(name)
            except RuntimeError as err:  # skipped guards refuse a shape the warm-up pass did not compile
                failed[name] = str(err).splitlines()[0][:200]
                continue
            times[name].append(round(seconds, 3))
            same[name] = sum(a == b for a, b in zip(reference, out))
    best = {name: min(t) for name, t in times.items() if t}
    return {"bench": "compiled_decoding", "model": args.model, "direction": f"{args.src}-{args.tgt}", "beam": beam,
            "sentences": len(seqs), "threads": args.threads, "batch_size": args.batch_size, "seconds": times,
            "first_compiled_pass_s": round(first, 1), "graphs": compiled.graphs, "same_as_eager": same,
            "failed": failed, "speedup_vs_eager": {name: round(best["eager"] / b, 3) for name, b in best.items()}}


def main() -> None:
    ap = decoding_parser(__doc__)
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--beams", default="1,5")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--unsafe-guards", action="store_true")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch._dynamo.config.recompile_limit = 64  # every shape compiled: none falls back to eager at the default 8
    src = read_lines(Path(args.data) / f"test_2016_flickr.{args.src}.gz")[:args.sentences]
    packed, plain = load_model(args.model), load_model(args.model)
    pack_output_layers(packed.network, "auto")
    seqs = tokenize_inputs(src, packed.vocabs[args.src], packed.config.preprocess)
    for beam in [int(b) for b in args.beams.split(",")]:
        append_result(args.out, time_beam(args, packed, plain, seqs, beam))


if __name__ == "__main__":
    main()
