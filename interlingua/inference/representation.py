"""Text -> interlingua -> any language: what the decoders read for a list of sentences, kept between
the encoder and the search (`Model.represent`, `Model.generate`).

Translating one text into several languages costs one encoding instead of one per target, and a
caller can keep, slice and decode the representation as often as it likes. `generate` puts each
batch back together exactly as `translate_ids` ran it (same length-sorted batches, same padding:
the memory's padding is zero, as the encoders leave it), so generating from a representation gives
the very bytes a translation does.

`generate` checks what it is given before any search (`check_representation`): a tensor or array
where a representation goes, memory of another width, dtype or device, or NaN in it would
otherwise end in a shape error deep in a decoder or in empty text. A representation carries the
fingerprint of the weights that made it, since another model's memory of the same width decodes
without any error into nonsense.
"""
from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from tqdm import tqdm

from interlingua.data.inputs import length_sorted_groups
from interlingua.data.shortlist import DirectionTable
from interlingua.data.vocab import Vocab
from interlingua.errors import ArgumentError, ArgumentTypeError, TargetMismatchError
from interlingua.modules.base import BridgeOutput
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.search import batches_total, decode_batch, decode_merging_tails, encoded_batches
from interlingua.runtime import torch_threads


@dataclass(frozen=True, eq=False, repr=False)  # tensors: no element-wise ==, no pages of numbers in a repr
class Representation:
    """Per input sentence, in the order of the inputs: the memory the decoders attend to (the
    attention bridge's M (k, d), the encoder states H (n, d) without a bridge, NTDV's memory) and its
    mask, on the model's device. An empty text has an empty memory (0 rows) and translates to "".

    Light to keep: each row is a view of its encoder batch's output (no copy; a slice keeps those
    batches alive). Index or slice it (`rep[3]`, `rep[2:5]`, `rep[[0, 4]]`) for a representation of
    those sentences."""

    memory: tuple[torch.Tensor, ...]
    """(m_i, d) per sentence, trimmed to its last attendable row."""
    mask: tuple[torch.Tensor, ...]
    """(m_i,) bool per sentence: True where the decoder may attend."""
    lengths: tuple[int, ...]
    """Each source's length as the encoder read it (a <2xx> prefix included; 0: empty): the base of the
    output limit, so that a sentence's translation never depends on what it is decoded with."""
    src: str
    """The language the texts were read in."""
    tgt: str | None
    """The one target this representation can be written in, for a model that puts the target's tag
    before the source (`model.tag_position: source_prefix`); None: any target."""
    source_ids: tuple[np.ndarray, ...] = ()
    """Each text's subword ids (no language tag), where known: what a shortlist picks a sentence's target
    candidates from; empty where the representation was put together without them."""
    fingerprint: str = ""
    """The `weights_fingerprint` of the model that made it: `generate` writes out only representations of
    its own weights (the same weights loaded again included)."""

    def __len__(self) -> int:
        return len(self.memory)

    def __repr__(self) -> str:
        rows = [m.shape[0] for m in self.memory if m.shape[0]]
        size = (f"{min(rows)}" if min(rows) == max(rows) else f"{min(rows)}-{max(rows)}") if rows else "0"
        width = self.memory[0].shape[-1] if self.memory else 0
        return f"Representation({len(self)} texts, src={self.src!r}, tgt={self.tgt!r}, memory {size} x {width})"

    def __getitem__(self, index: int | slice | Sequence[int]) -> Representation:
        if isinstance(index, slice):
            picked = list(range(len(self)))[index]
        elif isinstance(index, (int, np.integer)):
            picked = [list(range(len(self)))[index]]  # negative indices and IndexError as a list has them
        else:
            picked = [int(i) for i in index]
        return Representation(tuple(self.memory[i] for i in picked), tuple(self.mask[i] for i in picked),
                              tuple(self.lengths[i] for i in picked), self.src, self.tgt,
                              tuple(self.source_ids[i] for i in picked) if self.source_ids else (), self.fingerprint)


def represent_ids(network: TranslationNetwork, vocabs: dict[str, Vocab], seqs: Sequence[np.ndarray], src: str,
                  tgt: str | None, batch_size: int, fingerprint: str = "") -> Representation:
    """The encode half of `translate_ids`, kept: the memory of every batch split into its sentences.
    `tgt` is only read by a `source_prefix` model (whose encoding it changes); pass None otherwise.
    `fingerprint`: the model's `weights_fingerprint`, which the representation carries."""
    network.eval()
    memory: list[torch.Tensor | None] = [None] * len(seqs)
    mask: list[torch.Tensor | None] = [None] * len(seqs)
    lengths = [0] * len(seqs)
    for idx, batch_lengths, bridged in encoded_batches(network, vocabs, seqs, src, tgt or src, batch_size):
        rows = _attended_rows(bridged.memory_mask)
        for row, i in enumerate(idx):
            memory[i] = bridged.memory[row, :rows[row]]
            mask[i] = bridged.memory_mask[row, :rows[row]]
            lengths[i] = int(batch_lengths[row])
    empty_memory, empty_mask = _empty_rows(network, next((m for m in memory if m is not None), None))
    return Representation(tuple(empty_memory if m is None else m for m in memory),
                          tuple(empty_mask if m is None else m for m in mask), tuple(lengths), src, tgt,
                          tuple(np.asarray(s) for s in seqs), fingerprint)


def weights_fingerprint(network: torch.nn.Module) -> str:
    """SHA-256 (hex) of a model's weights: names, dtypes, shapes and values. The same for the same weights
    however they were loaded (a checkpoint or its model folder, twice), different for any other model."""
    digest = hashlib.sha256()
    for name, tensor in network.state_dict().items():
        t = tensor.detach()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)};".encode())
        if t.numel():
            digest.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_representation(rep: object, network: TranslationNetwork, fingerprint: str,
                         dtypes: Sequence[torch.dtype]) -> Representation:
    """`rep` as `generate` may write it out with `network` (whose `weights_fingerprint` is `fingerprint`, and
    whose decoders read memory of `dtypes` on the model's device), or the one error that says what is wrong:
    `ArgumentTypeError` for anything but a `Representation`, `ArgumentError` naming the text for another
    model's representation, memory of another width, dtype or device, a mask that does not fit it, NaN or
    infinite memory."""
    if not isinstance(rep, Representation):
        got = "None" if rep is None else type(rep).__name__
        raise ArgumentTypeError(f"representation: expected a Representation (from Model.represent), got {got}")
    if rep.fingerprint != fingerprint:
        raise ArgumentError("representation: it was not made by this model's represent (it carries no model "
                            "fingerprint)" if not rep.fingerprint else "representation: it was made by another "
                            "model (other weights): write it out with the model whose represent made it")
    if not len(rep.mask) == len(rep.lengths) == len(rep.memory):
        raise ArgumentError(f"representation: {len(rep.memory)} memories, {len(rep.mask)} masks and "
                            f"{len(rep.lengths)} lengths: one of each per text")
    width, device = network.bridge.output_dim, network.device
    for i, (memory, mask) in enumerate(zip(rep.memory, rep.mask)):
        where = f"representation: the memory of text {i}"
        if not isinstance(memory, torch.Tensor) or memory.dim() != 2:
            raise ArgumentError(f"{where} is not a (rows, width) tensor: "
                                f"{tuple(memory.shape) if isinstance(memory, torch.Tensor) else type(memory).__name__}")
        if memory.size(1) != width:
            raise ArgumentError(f"{where} is {memory.size(1)} wide; this model's decoders read memory {width} wide")
        if memory.dtype not in dtypes:
            raise ArgumentError(f"{where} is {_dtype(memory.dtype)}; this model reads "
                                f"{' or '.join(_dtype(d) for d in dtypes)}")
        if memory.device != device:
            raise ArgumentError(f"{where} is on {memory.device}; the model is on {device}")
        if (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != (memory.size(0),)
                or mask.device != device):
            raise ArgumentError(f"representation: the mask of text {i} is not a bool vector with one value per row "
                                f"of its memory ({memory.size(0)}), on {device}")
    finite = [torch.isfinite(m).all() for m in rep.memory if m.numel()]
    if finite and not bool(torch.stack(finite).all()):  # one device sync for all texts
        bad = next(i for i, m in enumerate(rep.memory) if m.numel() and not bool(torch.isfinite(m).all()))
        raise ArgumentError(f"representation: the memory of text {bad} holds NaN or infinite values")
    return rep


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _attended_rows(mask: torch.Tensor) -> list[int]:
    """Per sentence of a batch, the rows of memory up to its last attendable one (what it keeps)."""
    positions = torch.arange(1, mask.size(1) + 1, device=mask.device)
    return (mask * positions).amax(dim=1).tolist() if mask.size(1) else [0] * mask.size(0)


def _empty_rows(network: TranslationNetwork, like: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """A memory and mask with no rows, for the empty texts (like the others' dtype where there are any)."""
    if like is not None:
        return like.new_zeros((0, like.size(-1))), torch.zeros(0, dtype=torch.bool, device=like.device)
    device = network.device
    return (torch.zeros((0, network.bridge.output_dim), device=device),
            torch.zeros(0, dtype=torch.bool, device=device))


def generate_text(network: TranslationNetwork, vocabs: dict[str, Vocab], rep: Representation, tgt: str, *,
                  batch_size: int, beam: int = 1, length_penalty: float = 1.0, max_len: int | None = None,
                  max_len_cap: int = 100, beam_stop: str = "all", progress: bool = False,
                  shortlist: DirectionTable | None = None, workers: int = 1, no_repeat_ngram: int = 0,
                  context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> list[str]:
    """The decode half of `translate_ids` over a kept representation: the sentences in the same
    length-sorted batches, each batch's memory padded back as the encoder gave it. A `shortlist` needs
    the representation's `source_ids`. Without a shortlist the tails of batches are decoded together
    (`decode_merging_tails`), and `workers` > 1 splits the batches into that many streams decoded side by side
    (`in_threads`), each under `context()` (the caller's autocast); with a shortlist, `workers` batches at once.
    The output is the same either way, since no sentence's depends on its batch. `no_repeat_ngram` n > 0: no
    n-gram twice in an output (`modules.ngram_blocking`)."""
    if shortlist is not None and len(rep.source_ids) != len(rep):
        raise ValueError("this representation has no source ids, which a shortlist needs: make it with "
                         "Model.represent")
    if rep.tgt is not None and rep.tgt != tgt:
        raise TargetMismatchError(
            f"this representation was encoded for target '{rep.tgt}': the model puts the target's tag before the "
            f"source (model.tag_position: source_prefix), so it cannot be written in '{tgt}'; "
            f"call represent(..., tgt='{tgt}') for that target")
    network.eval()
    out = [""] * len(rep)

    def decode(idx: list[int]) -> tuple[list[int], list[str]]:
        bridged, lengths = _batch(rep, idx)
        candidates = None if shortlist is None else [shortlist.candidates(rep.source_ids[i]) for i in idx]
        return idx, decode_batch(network, vocabs, bridged, lengths, tgt, beam=beam, length_penalty=length_penalty,
                                 max_len=max_len, max_len_cap=max_len_cap, beam_stop=beam_stop, candidates=candidates,
                                 no_repeat_ngram=no_repeat_ngram)

    groups = list(length_sorted_groups(rep.lengths, batch_size))
    if shortlist is None:  # the tails of batches decoded together; `workers` streams of batches side by side
        bar = tqdm(total=sum(1 for n in rep.lengths if n), desc=f"{rep.src}->{tgt}", unit="sent",
                   disable=not progress, leave=False)

        def decode_stream(stream: list[list[int]]) -> list[tuple[int, str]]:
            done = []
            for key, text in decode_merging_tails(network, vocabs, _batches(rep, stream), tgt, capacity=batch_size,
                                                  beam=beam, length_penalty=length_penalty, max_len=max_len,
                                                  max_len_cap=max_len_cap, beam_stop=beam_stop,
                                                  no_repeat_ngram=no_repeat_ngram):
                done.append((key, text))
                bar.update()
            return done

        streams = [groups[i::workers] for i in range(workers)]  # longest first: alike in length and number
        with bar:
            for pairs in (map(decode_stream, streams) if workers <= 1
                          else in_threads(decode_stream, streams, workers, context)):
                for key, text in pairs:
                    out[key] = text
        return out
    decoded = map(decode, groups) if workers <= 1 else in_threads(decode, groups, workers, context)
    for idx, texts in tqdm(decoded, total=batches_total(rep.lengths, batch_size), desc=f"{rep.src}->{tgt}",
                           unit="batch", disable=not progress, leave=False):
        for i, text in zip(idx, texts):
            out[i] = text
    return out


Item = TypeVar("Item")
Result = TypeVar("Result")


def in_threads(fn: Callable[[Item], Result], items: Iterable[Item], workers: int,
               context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> Iterator[Result]:
    """`map(fn, items)` in `workers` threads, results in order. Why threads: a decoding step is many small
    operators, most of them too small to split over cores, and PyTorch lets go of the interpreter inside each,
    so batches side by side keep the cores busier than one batch's operators split over them (on 2 cores,
    1.14-1.3x in sentences/s, greedy and beam 5). The intra-op threads are shared out among the workers
    while it runs (`torch.set_num_threads` is process-wide: other work in the process sees it too), and each
    thread runs under inference mode and `context()`, which are per thread in PyTorch."""
    def run(item: Item) -> Result:
        with torch.inference_mode(), context():
            return fn(item)

    with torch_threads(max(1, torch.get_num_threads() // workers)), \
            ThreadPoolExecutor(workers, thread_name_prefix="interlingua-decode") as pool:
        yield from pool.map(run, items)


def _batches(rep: Representation,
             groups: Iterable[list[int]]) -> Iterator[tuple[list[int], torch.Tensor, BridgeOutput]]:
    """(keys, source lengths, memory) of each group of sentences, as `encoded_batches` gives a batch."""
    for idx in groups:
        bridged, lengths = _batch(rep, idx)
        yield idx, lengths, bridged


def _batch(rep: Representation, idx: list[int]) -> tuple[BridgeOutput, torch.Tensor]:
    """The sentences `idx` as one decoder batch: memory and mask padded (zeros, False) to the longest,
    and the source lengths (on the CPU, as the encoder's batches have them)."""
    memory = pad_sequence([rep.memory[i] for i in idx], batch_first=True)
    mask = pad_sequence([rep.mask[i] for i in idx], batch_first=True, padding_value=False)
    no_penalty = torch.zeros(len(idx), dtype=torch.float32, device=memory.device)
    lengths = torch.tensor([rep.lengths[i] for i in idx], dtype=torch.long)
    return BridgeOutput(memory, mask, None, no_penalty), lengths
