"""Where int8 pays on this CPU: linear layers, the LSTM decoder's step, the BiLSTM encoder, a whole model.

Run: python bench/int8_linear.py [--sections linear,lstm_decoder,lstm_encoder,plan] [--threads 2]
         [--out bench/results/int8_linear.jsonl]
     python bench/int8_linear.py --sections model --model demo_run/model/best.pt --src en --tgt de
Sections:
  linear        nn.Linear (fp32) against `Int8Linear` with each int8 kernel that works here (oneDNN's
                qlinear, torch._int_mm), per call, over (rows, in, out) shapes of the models here:
                the numbers behind `interlingua.modules.int8.MIN_INT8_WEIGHTS`; and `peer_dynamic`,
                the layer as OpenNMT-py's `-int8` runs it (PyTorch's dynamic quantization, fbgemm).
  lstm_decoder  one search step of the LSTM decoder's recurrence for a batch: nn.LSTM on (batch, 1, E),
                its `LinearLSTM` form in fp32, and that form with int8 gates (one product over [x, h]);
                `peer_dynamic`: nn.LSTM dynamically quantized, as OpenNMT-py's `-int8` runs it.
  lstm_encoder  one direction of the BiLSTM encoder over a (batch, T, in) batch: nn.LSTM's fused fp32
                kernel against the split `LinearLSTM` (all time steps' input projections in one product,
                then a recurrent loop), fp32 and int8: `ENCODER_LSTM_INT8`.
  plan          the library's own measurement (`interlingua.modules.int8.time_kernels`, run afresh, not
                cached) at --model's layer shapes, else at those of `linear`: each kernel's time against
                fp32's at `MEASURE_ROWS` rows, the kernel each shape gets, how long measuring took, and
                the one-line refusal `precision: int8` gives where no shape gets one.
  model         a checkpoint's translation of the first --sentences test_2016_flickr lines, batch 64, greedy
                and beam 5, fp32 against int8 (`interlingua.load(..., precision="int8")`), loaded once each
                in this process, passes alternating; with --min-weights, int8 with those thresholds too.
                A variant the library refuses, or whose first batch takes over SKIP_FACTOR (10) times
                fp32's (a pass would too), gets a line saying so and is not timed.
Times are per call in microseconds (seconds for `model`): the minimum over --reps interleaved rounds
(each round times every variant once, a block of calls each), which resists the load other processes
put on the machine; medians are recorded beside them. One JSON line per measurement is printed and
appended to --out with the date, the machine, the CPU model, torch and torchao versions, the thread
count, the 1-minute load average when the run started (other processes skew such timings: compare
lines taken on a quiet machine) and the command.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from _results import append_result  # noqa: E402

from interlingua.modules.int8 import (  # noqa: E402
    KERNELS,
    Int8Linear,
    Int8Plan,
    LinearLSTM,
    kernel_works,
    layer_shapes,
    time_kernels,
    working_kernels,
)
from interlingua.precision import cpu_flags, cpu_model  # noqa: E402

LINEAR_SHAPES = [  # rows x in x out: decoder steps (64 greedy, 320 = 64 x beam 5), encoders (1280 = 64 x 20)
    (5, 128, 512), (64, 128, 128), (64, 128, 256), (64, 128, 512), (64, 512, 128), (64, 256, 256),
    (64, 256, 512), (64, 512, 256), (64, 256, 1024), (64, 512, 1024), (64, 256, 2000), (64, 128, 8000),
    (64, 512, 2048), (64, 512, 8000), (64, 1024, 512), (64, 1024, 2048),
    (320, 128, 128), (320, 128, 512), (320, 512, 128), (320, 256, 512), (320, 512, 256), (320, 512, 1024),
    (320, 256, 2000), (320, 128, 8000), (320, 512, 2048), (320, 512, 8000), (320, 1024, 512), (320, 1024, 2048),
    (1280, 128, 128), (1280, 128, 512), (1280, 512, 128), (1280, 256, 512), (1280, 256, 1024),
]
DECODER_SIZES = [(64, 256, 256, 1), (320, 256, 256, 1), (64, 256, 256, 2), (320, 256, 256, 2), (64, 512, 512, 2),
                 (320, 512, 512, 2)]
"""batch, embed, hidden, layers."""
ENCODER_SIZES = [(64, 20, 256, 128), (64, 20, 512, 256), (1, 12, 256, 128)]
"""batch, time steps, input size, hidden size per direction (demo: 256 -> 2 x 128; papers: 512 -> 2 x 256)."""
SKIP_FACTOR = 10
"""A variant whose first calls (`model`: its first batch) take over this many times the baseline's (fp32,
nn.LSTM) is not timed further, and its line says so."""


def timed(variants: dict[str, Callable[[], object]], reps: int, calls: int) -> dict[str, dict]:
    """Microseconds per call of each variant: min and median over `reps` interleaved rounds of `calls` calls.
    The first variant is the baseline: one whose first two warm-up calls each take over SKIP_FACTOR times the
    baseline's is not timed further ({"skipped": why}): its rounds would take minutes where a kernel is that slow."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    skipped: dict[str, dict] = {}
    base = next(iter(variants))
    with torch.inference_mode():
        first: dict[str, float] = {}
        for name, fn in variants.items():
            warm = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                warm.append(time.perf_counter() - t0)
                if name != base and len(warm) == 2 and min(warm) > SKIP_FACTOR * first[base]:
                    break  # two calls said enough
            first[name] = min(warm)
            if name != base and first[name] > SKIP_FACTOR * first[base]:
                skipped[name] = {"skipped": f"its warm-up calls took {first[name] / first[base]:,.0f}x {base}'s "
                                            f"({first[name] * 1e6:,.0f} us against {first[base] * 1e6:,.1f} us)"}
                del times[name]
        for _ in range(reps):
            for name in times:
                fn = variants[name]
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                times[name].append((time.perf_counter() - t0) / calls * 1e6)
    return {**{name: {"min_us": round(min(t), 1), "median_us": round(statistics.median(t), 1)}
               for name, t in times.items()}, **skipped}


def speedups(result: dict[str, dict], base: str) -> dict[str, float]:
    return {name: round(result[base]["min_us"] / r["min_us"], 2) for name, r in result.items()
            if name != base and "min_us" in r}


def kernels() -> list[str]:
    return [k for k in KERNELS if kernel_works(k)]


def peer_dynamic(module: torch.nn.Module) -> torch.nn.Module:
    """`module` as OpenNMT-py's `-int8` runs it: PyTorch's dynamic quantization (fbgemm's int8 products with
    prepacked per-tensor weights, activations quantized per call; for an LSTM the fused quantized LSTM op)."""
    with warnings.catch_warnings():  # torch 2.13 warns that its quantized tensors are deprecated
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(module), {type(module)},
                                                      dtype=torch.qint8)[0]


def bench_linear(args: argparse.Namespace, record: Callable[[dict], None]) -> None:
    for rows, n_in, n_out in LINEAR_SHAPES:
        torch.manual_seed(0)
        lin = torch.nn.Linear(n_in, n_out).eval()
        x = torch.randn(rows, n_in)
        variants: dict[str, Callable[[], object]] = {"fp32": partial(lin, x)}
        for k in kernels():
            q = Int8Linear.from_linear(lin, k)
            variants[f"int8_{k}"] = partial(q, x)
        variants["peer_dynamic"] = partial(peer_dynamic(lin), x)
        result = timed(variants, args.reps, max(3, int(20000 / (30 + rows * n_in * n_out / 1e4))))  # ~20 ms blocks
        record({"section": "linear", "rows": rows, "in": n_in, "out": n_out, "weights": n_in * n_out,
                "times": result, "speedup_vs_fp32": speedups(result, "fp32")})


def bench_lstm_decoder(args: argparse.Namespace, record: Callable[[dict], None]) -> None:
    for batch, embed, hidden, layers in DECODER_SIZES:
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(embed, hidden, num_layers=layers, batch_first=True).eval()
        x = torch.randn(batch, 1, embed)
        state = (torch.randn(layers, batch, hidden), torch.randn(layers, batch, hidden))
        linear = LinearLSTM.from_lstm(lstm, fused=True)
        variants: dict[str, Callable[[], object]] = {"nn.LSTM": partial(lstm, x, state),
                                                     "linear_fp32": partial(linear, x, state)}
        for k in kernels():
            q = LinearLSTM.from_lstm(lstm, fused=True)
            assert q.gates is not None
            for i, g in enumerate(q.gates):
                q.gates[i] = Int8Linear.from_linear(g, k)  # type: ignore[arg-type]
            variants[f"linear_int8_{k}"] = partial(q, x, state)
            s = LinearLSTM.from_lstm(lstm, fused=False)
            assert s.ih is not None and s.hh is not None
            for stack in (s.ih, s.hh):
                for i, g in enumerate(stack):
                    stack[i] = Int8Linear.from_linear(g, k)  # type: ignore[arg-type]
            variants[f"split_int8_{k}"] = partial(s, x, state)
        variants["peer_dynamic"] = partial(peer_dynamic(lstm), x, state)
        result = timed(variants, args.reps, 50)
        with torch.inference_mode():
            ref, _ = lstm(x, state)
            errors = {name: round(float((fn()[0] - ref).abs().max()), 6)  # type: ignore[index]
                      for name, fn in variants.items() if name != "nn.LSTM"}
        record({"section": "lstm_decoder", "batch": batch, "embed": embed, "hidden": hidden, "layers": layers,
                "times": result, "speedup_vs_nn_lstm": speedups(result, "nn.LSTM"), "max_abs_error": errors})


def bench_lstm_encoder(args: argparse.Namespace, record: Callable[[dict], None]) -> None:
    for batch, steps, n_in, hidden in ENCODER_SIZES:
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(n_in, hidden, batch_first=True).eval()
        x = torch.randn(batch, steps, n_in)
        split = LinearLSTM.from_lstm(lstm, fused=False)
        variants: dict[str, Callable[[], object]] = {"nn.LSTM": partial(lstm, x), "split_fp32": partial(split, x)}
        for k in kernels():
            for which in ("ih", "ih_hh"):
                q = LinearLSTM.from_lstm(lstm, fused=False)
                assert q.ih is not None and q.hh is not None
                q.ih[0] = Int8Linear.from_linear(q.ih[0], k)  # type: ignore[arg-type]
                if which == "ih_hh":
                    q.hh[0] = Int8Linear.from_linear(q.hh[0], k)  # type: ignore[arg-type]
                variants[f"split_int8_{which}_{k}"] = partial(q, x)
        result = timed(variants, args.reps, 10)
        record({"section": "lstm_encoder", "batch": batch, "steps": steps, "in": n_in, "hidden": hidden,
                "times": result, "speedup_vs_nn_lstm": speedups(result, "nn.LSTM")})


def bench_plan(args: argparse.Namespace, record: Callable[[dict], None]) -> None:
    from interlingua.model_files.load import load_model
    from interlingua.modules import int8
    if args.model:
        shapes = layer_shapes(load_model(args.model, "cpu").network)
    else:
        shapes = {(n_in, n_out) for _, n_in, n_out in LINEAR_SHAPES}
    kernels = working_kernels()
    t0 = time.perf_counter()
    times = time_kernels(shapes, kernels)
    took = time.perf_counter() - t0
    plan = Int8Plan.from_times(times)
    record({"section": "plan", "model": str(args.model) if args.model else None, "rows": list(int8.MEASURE_ROWS),
            "kernels_tried": kernels, "took_s": round(took, 2), "seconds": times.seconds, "given_up": times.given_up,
            "speedup_vs_fp32": {label: {k: round((row["fp32"] or 0) / v, 2) for k, v in row.items()
                                        if k != "fp32" and v}
                                for label, row in times.seconds.items()},
            "kernel": plan.kernels, "refusal": plan.refusal()})


def bench_model(args: argparse.Namespace, record: Callable[[dict], None]) -> None:
    import interlingua
    from interlingua.data.corpus import read_lines
    from interlingua.errors import InterlinguaError
    from interlingua.model_files.load import load_model
    from interlingua.modules import int8
    from interlingua.training.validation import corpus_scores
    if not args.model:
        raise SystemExit("--sections model needs --model")
    data = ROOT / "data" / "multi30k"
    sources = read_lines(data / f"test_2016_flickr.{args.src}.gz")[:args.sentences]
    refs = read_lines(data / f"test_2016_flickr.{args.tgt}.gz")[:args.sentences]
    models = {"fp32": interlingua.load(args.model, "cpu", "fp32")}
    default = int8.MIN_INT8_WEIGHTS
    skipped: dict[str, str] = {}
    kernels: dict[str, list[str]] = {}  # of each int8 layer, per variant
    for threshold in [default] + [t for t in args.min_weights if t != default]:
        int8.MIN_INT8_WEIGHTS = threshold
        loaded = load_model(args.model, "cpu")
        try:
            models[f"int8>={threshold}"] = interlingua.Model(loaded, "int8")  # quantizes loaded.network in place
        except InterlinguaError as err:
            skipped[f"int8>={threshold}"] = f"refused: {err}"
            continue
        kernels[f"int8>={threshold}"] = [m.kernel for m in loaded.network.modules() if isinstance(m, Int8Linear)]
    int8.MIN_INT8_WEIGHTS = default
    first: dict[str, float] = {}
    for name, model in models.items():  # one batch each: a variant 10x slower than fp32 is not timed
        t0 = time.perf_counter()
        model.translate(sources[:64], args.src, args.tgt, beam=5, batch_size=64)
        first[name] = time.perf_counter() - t0
        if name != "fp32" and first[name] > SKIP_FACTOR * first["fp32"]:
            skipped[name] = (f"its first batch (64 sentences, beam 5) took {first[name]:.2f} s, "
                             f"{first[name] / first['fp32']:.0f}x fp32's {first['fp32']:.2f} s")
    for name, why in skipped.items():
        models.pop(name, None)
        record({"section": "model", "model": str(args.model), "direction": f"{args.src}-{args.tgt}",
                "variant": name, "skipped": why})
    for beam in (1, 5):
        times: dict[str, list[float]] = {name: [] for name in models}
        outputs: dict[str, list[str]] = {}
        for _ in range(args.model_reps + 1):
            for name, model in models.items():
                t0 = time.perf_counter()
                outputs[name] = model.translate(sources, args.src, args.tgt, beam=beam, batch_size=64)
                times[name].append(time.perf_counter() - t0)
        result = {name: {"min_s": round(min(t[1:]), 3), "median_s": round(statistics.median(t[1:]), 3)}
                  for name, t in times.items()}
        same = {name: round(sum(a == b for a, b in zip(out, outputs["fp32"])) / len(sources), 3)
                for name, out in outputs.items() if name != "fp32"}
        bleu = {name: round(corpus_scores(out, refs)[0], 2) for name, out in outputs.items()}
        record({"section": "model", "model": str(args.model), "direction": f"{args.src}-{args.tgt}",
                "sentences": len(sources), "beam": beam, "batch_size": 64, "seconds": result,
                "speedup_vs_fp32": {name: round(result["fp32"]["min_s"] / r["min_s"], 2)
                                    for name, r in result.items() if name != "fp32"},
                "bleu": bleu, "same_output_as_fp32": same,
                "int8_linears": {name: len(kernels[name]) for name in models if name != "fp32"},
                "int8_kernels": {name: sorted(set(kernels[name])) for name in models if name != "fp32"}})


SECTIONS = {"linear": bench_linear, "lstm_decoder": bench_lstm_decoder, "lstm_encoder": bench_lstm_encoder,
            "plan": bench_plan, "model": bench_model}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="linear,lstm_decoder,lstm_encoder")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=10, help="interleaved rounds of the micro benchmarks")
    parser.add_argument("--model", type=Path)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--model-reps", type=int, default=3, help="timed translation passes per variant")
    parser.add_argument("--min-weights", type=lambda s: [int(x) for x in s.split(",")], default=[],
                        help="comma-separated extra int8 thresholds for --sections model")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "int8_linear.jsonl")
    args = parser.parse_args()
    from interlingua import tune_allocator
    tune_allocator()  # as the command line does (INTERLINGUA_ALLOCATOR=default: malloc left as it is)
    torch.set_num_threads(args.threads)
    common = {"cpu": cpu_model(), "int8_flags": sorted(f for f in cpu_flags() if "vnni" in f or f == "amx_int8"),
              "torch": torch.__version__, "torchao": importlib.metadata.version("torchao"), "threads": args.threads,
              "load_average_1min": round(os.getloadavg()[0], 2)}  # what else the machine was doing
    for name in args.sections.split(","):
        SECTIONS[name](args, lambda r: append_result(args.out, {**r, **common}))


if __name__ == "__main__":
    main()
