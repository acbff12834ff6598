"""Time a model's own decoding in fp32 and in bf16, so inference's `precision: auto` is decided by it.

As in training (`training.precision_probe`), only the model itself tells whether bf16 pays on a
CPU, and only its real search does: on one AMD EPYC with AVX512-BF16 an LSTM bridge model
translated 1.3-1.6x faster in bf16 while a small Transformer did not gain (0.9-1.0x), although
a probe that decoded full batches for a fixed number of steps claimed 1.28x for it. So the probe
runs the shared greedy and beam searches, as translation does (sentences leave the batch when
they end), on a batch of random sources of varied length.
"""
from __future__ import annotations

import torch

from interlingua.data.vocab import BOS, EOS, PAD
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.search import beam_search, greedy_search
from interlingua.precision import autocast, measure_speedup

PROBE_SENTENCES = 64
PROBE_LENGTHS = (6, 26)
"""Source lengths are drawn from this range (the output limit is twice the length + 10, as in translation)."""


def probe_batch(network: TranslationNetwork, source_vocab_size: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str, str]:
    """The probe's sources: PROBE_SENTENCES random ones (ids below `source_vocab_size`), their lengths
    and output limits, on the model's device, and the direction (first encoder, last decoder)."""
    src_lang, tgt_lang = network.encoder_langs[0], network.decoder_langs[-1]
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(*PROBE_LENGTHS, (PROBE_SENTENCES,), generator=gen).sort(descending=True).values
    ids = torch.randint(EOS + 1, max(source_vocab_size, EOS + 2), (PROBE_SENTENCES, int(lengths.max())),
                        generator=gen)
    ids[torch.arange(ids.size(1)).unsqueeze(0) >= lengths.unsqueeze(1)] = PAD
    limits = lengths * 2 + 10
    return ids.to(network.device), lengths.to(network.device), limits.to(network.device), src_lang, tgt_lang


def decode_probe(network: TranslationNetwork, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor, str, str],
                 precision: str) -> None:
    """Translate the `probe_batch` greedily and with beam 5, under `precision`'s autocast."""
    ids, lengths, limits, src_lang, tgt_lang = batch
    with autocast(precision):
        for beam in (1, 5):
            bridged = network.run_encoder(ids, lengths, src_lang)
            decoder, state = network.start_decoding(bridged, tgt_lang)
            if beam == 1:
                greedy_search(decoder, state, limits, BOS)
            else:
                beam_search(decoder, state, limits, beam, 1.0, BOS)


@torch.inference_mode()
def decoding_bf16_speedup(network: TranslationNetwork, source_vocab_size: int, steps: int = 3) -> float:
    """fp32 / bf16 time of translating PROBE_SENTENCES random sources (ids below `source_vocab_size`,
    first encoder, last decoder) greedily and with beam 5."""
    batch = probe_batch(network, source_vocab_size)
    return measure_speedup(lambda precision: decode_probe(network, batch, precision), steps)
