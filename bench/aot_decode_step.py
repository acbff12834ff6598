"""Would a Transformer decoding step compiled ahead of time (AOTInductor) be faster than the eager one here?

Run: python bench/aot_decode_step.py --model MODEL [--tgt de] [--rows 8,64,320] [--cache 12] [--memory 16]
     [--threads 2] [--calls 300] [--out bench/results/aot_decode_step.jsonl]

`torch.compile` in the decoding loop pays about 0.3 ms of guard checks a call (bench/compiled_decoding.py);
AOTInductor has no guards: the step is exported once (`torch.export`, rows, cache and memory lengths symbolic)
and compiled to a shared library (inductor's `freezing`: weights constant, products packed) that is called
from C++. The step here is the library's eval step written as one function (embedding of the step's token
plus its position encoding, each layer's self-attention over the cache and the new position, cross-attention
over the memory, feed-forward, final norm, output layer), returning the scores and the caches with the new
position joined. Timed per call at each row count on random states of the given lengths against
`Decoder.step_scores` as the library runs it (cache written in place, packed output layer): medians of 5 series
of `--calls` calls, both in one process. One JSON line: compile seconds, per row count both times (ms), the
largest score difference and whether every row's best token is the same.
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _decoding import decoding_parser  # noqa: E402
from _results import append_result  # noqa: E402
from torch.export import Dim  # noqa: E402

from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.data.inputs import tokenize_inputs  # noqa: E402
from interlingua.model_files.load import load_model  # noqa: E402
from interlingua.modules.model import TranslationNetwork  # noqa: E402
from interlingua.modules.packed_linear import pack_output_layers  # noqa: E402
from interlingua.modules.search import translate_ids  # noqa: E402
from interlingua.modules.transformer import (  # noqa: E402
    LayerCache,
    TransformerDecoder,
    TransformerDecoderState,
    _sinusoid_row,
)


class FunctionalStep(torch.nn.Module):
    """`TransformerDecoder.step_scores` for rows all at one position, as a function of tensors only (what
    `torch.export` takes): (prev, position encoding, caches' keys, values, memory keys, values, memory mask) ->
    (scores, keys and values with the new position)."""

    def __init__(self, decoder: TransformerDecoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, prev: torch.Tensor, position: torch.Tensor, self_mask: torch.Tensor, keys: list[torch.Tensor],
                values: list[torch.Tensor], memory_keys: list[torch.Tensor], memory_values: list[torch.Tensor],
                memory_mask: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        d = self.decoder
        x = d.embedding.embed(prev.unsqueeze(1)) * d.embedding.scale + position
        new_keys, new_values = [], []
        for i, layer in enumerate(d.layers):
            attn, cross = layer.self_attn, layer.cross_attn
            h = layer._sub_input(x, 0)
            k, v = attn.keys_values(h)
            k, v = torch.cat([keys[i], k], 2), torch.cat([values[i], v], 2)
            new_keys.append(k)
            new_values.append(v)
            out = F.scaled_dot_product_attention(attn.queries(h), k, v, attn_mask=self_mask)
            b, heads, n, dk = out.shape
            x = layer._residual(x, 0, attn.out_proj(out.transpose(1, 2).reshape(b, n, heads * dk)))
            out = F.scaled_dot_product_attention(cross.queries(layer._sub_input(x, 1)), memory_keys[i],
                                                 memory_values[i], attn_mask=memory_mask)
            x = layer._residual(x, 1, cross.out_proj(out.transpose(1, 2).reshape(b, n, heads * dk)))
            x = layer._residual(x, 2, layer.ff[3](torch.relu(layer.ff[0](layer._sub_input(x, 2)))))
        if d.final_norm is not None:
            x = d.final_norm(x)
        return F.linear(x[:, 0], d.generator.weight, d.generator.bias), new_keys, new_values


class AOTDecoder:
    """A stand-in for `decoder` in the search whose greedy step (`step_scores`) runs `compiled`; beam steps, whose
    hypotheses share their sentence's memory, run the decoder's own eager step."""

    def __init__(self, decoder: TransformerDecoder, compiled: Callable):
        self.inner, self.compiled = decoder, compiled
        self.max_length = decoder.max_length

    def start_state(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.start_state(*args, **kwargs)

    def step(self, prev: torch.Tensor, state: TransformerDecoderState) -> tuple[torch.Tensor, Any]:
        return self.inner.step(prev, state)

    def step_scores(self, prev: torch.Tensor, state: TransformerDecoderState) -> tuple[torch.Tensor, Any]:
        rows = prev.size(0)
        if rows != state.memory_mask.size(0) or not state.caches[0].length:  # beams; the first step (empty caches)
            return self.inner.step_scores(prev, state)
        embedding = self.inner.embedding
        if state.pad is None:
            position = _sinusoid_row(state.position, embedding.dim, prev.device, torch.float32).expand(rows, 1, -1)
            self_mask = torch.ones(rows, 1, 1, state.position + 1, dtype=torch.bool)
        else:
            position = embedding._row_positions(state.position - state.pad, torch.float32)
            self_mask = state.self_mask()
        caches = state.caches
        # the compiled code takes its inputs' strides as they were when exported: contiguous
        scores, keys, values = self.compiled(prev, position.contiguous(), self_mask.contiguous(),
                                             [c.keys.contiguous() for c in caches],
                                             [c.values.contiguous() for c in caches],
                                             [c.memory_keys.contiguous() for c in caches],
                                             [c.memory_values.contiguous() for c in caches],
                                             state.memory_mask.contiguous())
        length = state.position + 1
        new = [LayerCache(k, v, c.memory_keys, c.memory_values, length, [length])
               for k, v, c in zip(keys, values, caches)]
        return scores, TransformerDecoderState(new, state.memory_mask, length, state.language, state.pad)


def with_decoder(network: TranslationNetwork, decoder: AOTDecoder) -> contextlib.AbstractContextManager[None]:
    """`network` decoding every target language with `decoder`."""
    @contextlib.contextmanager
    def use() -> Iterator[None]:
        network.decoder_for = lambda lang: decoder  # type: ignore[method-assign,assignment,return-value]  # a stand-in
        try:
            yield
        finally:
            del network.decoder_for
    return use()


def per_call_ms(fn: Callable[[], object], calls: int) -> float:
    """Median over 5 series of `calls` calls, in ms per call."""
    series = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        series.append((time.perf_counter() - t0) / calls * 1e3)
    return statistics.median(series)


def main() -> None:
    ap = decoding_parser(__doc__ or "")
    ap.add_argument("--rows", default="8,64,320", help="row counts timed (64: a greedy batch; 320: beam 5's)")
    ap.add_argument("--cache", type=int, default=12, help="positions decoded so far")
    ap.add_argument("--memory", type=int, default=16, help="source positions")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--passes", type=int, default=0, help="greedy passes over the test set, each way, alternated")
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "aot_decode_step.jsonl"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    plain, packed = load_model(args.model), load_model(args.model)
    pack_output_layers(packed.network, "auto")
    decoder = plain.network.decoder_for(args.tgt)
    library = packed.network.decoder_for(args.tgt)
    if not isinstance(decoder, TransformerDecoder) or decoder.language_embeddings is not None \
            or decoder.embedding.table is not None or decoder.embedding.proj is not None:
        raise SystemExit("this bench covers the Transformer decoder with sinusoidal positions and no language vector")
    step = FunctionalStep(decoder).eval()
    heads = decoder.layers[0].self_attn.heads
    dk, layers = decoder.dim // heads, len(decoder.layers)
    vocab = decoder.generator.weight.size(0)

    def inputs(rows: int) -> tuple:
        g = torch.Generator().manual_seed(rows)

        def states(n: int) -> list[torch.Tensor]:
            return [torch.randn(rows, heads, n, dk, generator=g) for _ in range(layers)]
        return (torch.randint(4, vocab, (rows,), generator=g), torch.randn(rows, 1, decoder.dim, generator=g),
                torch.ones(rows, 1, 1, args.cache + 1, dtype=torch.bool),
                states(args.cache), states(args.cache), states(args.memory), states(args.memory),
                torch.ones(rows, 1, 1, args.memory, dtype=torch.bool))

    rows_dim, cache_dim, memory_dim = (Dim("rows", min=2, max=4096), Dim("cache", min=1, max=1024),
                                       Dim("memory", min=2, max=1024))
    shapes = ({0: rows_dim}, {0: rows_dim}, {0: rows_dim, 3: cache_dim + 1},
              [{0: rows_dim, 2: cache_dim}] * layers, [{0: rows_dim, 2: cache_dim}] * layers,
              [{0: rows_dim, 2: memory_dim}] * layers, [{0: rows_dim, 2: memory_dim}] * layers,
              {0: rows_dim, 3: memory_dim})
    t0 = time.perf_counter()
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        exported = torch.export.export(step, inputs(64), dynamic_shapes=shapes)
        package = torch._inductor.aoti_compile_and_package(exported, package_path=f"{tmp}/step.pt2",
                                                           inductor_configs={"freezing": True})
        compiled = torch._inductor.aoti_load_package(package)
    compile_s = time.perf_counter() - t0
    results = {}
    with torch.inference_mode():
        for rows in [int(r) for r in args.rows.split(",") if r]:
            x = inputs(rows)
            prev, _, _, keys, values, memory_keys, memory_values, mask = x
            room = [(torch.cat([k, k.new_zeros(rows, heads, 8, dk)], 2),
                     torch.cat([v, v.new_zeros(rows, heads, 8, dk)], 2)) for k, v in zip(keys, values)]

            def library_step(prev: torch.Tensor = prev, room: list = room, memory_keys: list = memory_keys,
                             memory_values: list = memory_values, mask: torch.Tensor = mask) -> object:
                caches = [LayerCache(kb, vb, mk, mv, args.cache, [args.cache])
                          for (kb, vb), mk, mv in zip(room, memory_keys, memory_values)]
                return library.step_scores(prev, TransformerDecoderState(caches, mask, args.cache))

            eager_scores, aot_scores = step(*x)[0], compiled(*x)[0]
            results[str(rows)] = {
                "library_ms": round(per_call_ms(library_step, args.calls), 4),
                "aot_ms": round(per_call_ms(lambda x=x: compiled(*x), args.calls), 4),
                "max_score_difference": float((eager_scores - aot_scores).abs().max()),
                "same_best_token": bool((eager_scores.argmax(1) == aot_scores.argmax(1)).all())}
    record: dict[str, Any] = {"bench": "aot_decode_step", "model": args.model, "threads": args.threads,
                              "cache": args.cache, "memory": args.memory, "compile_s": round(compile_s, 1),
                              "rows": results, "torch": torch.__version__}
    if args.passes:
        src = read_lines(Path(args.data) / f"test_2016_flickr.{args.src}.gz")[:args.sentences]
        seqs = tokenize_inputs(src, packed.vocabs[args.src], packed.config.preprocess)

        def run(context: contextlib.AbstractContextManager[None]) -> tuple[float, list[str]]:
            t0 = time.perf_counter()
            with context:
                out = translate_ids(packed.network, packed.vocabs, seqs, args.src, args.tgt,
                                    batch_size=args.batch_size, beam=1)
            return time.perf_counter() - t0, out

        reference = run(contextlib.nullcontext())[1]
        seconds: dict[str, list[float]] = {"library": [], "aot": []}
        same = 0
        for _ in range(args.passes):
            seconds["library"].append(round(run(contextlib.nullcontext())[0], 3))
            took, out = run(with_decoder(packed.network, AOTDecoder(library, compiled)))
            seconds["aot"].append(round(took, 3))
            same = sum(a == b for a, b in zip(reference, out))
        speedup = statistics.median(seconds["library"]) / statistics.median(seconds["aot"])
        record["greedy"] = {"sentences": len(seqs), "seconds": seconds, "same_as_library": same,
                            "speedup": round(speedup, 3)}
    append_result(args.out, record)


if __name__ == "__main__":
    main()
