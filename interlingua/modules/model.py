"""The whole model: encoder[src_lang] -> shared bridge -> decoder[tgt_lang].

Language-specific modules live in ModuleDicts keyed by language code; with `shared: true`
one encoder and one decoder (key "shared") serve every language and the source carries a
target-language tag (Johnson et al.), the same picture with one module on each side.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from interlingua.config import ModelConfig
from interlingua.data.vocab import PAD
from interlingua.errors import LanguageError
from interlingua.modules.bridges import AttentionBridge, BridgeOutput, NoBridge
from interlingua.modules.decoders import DecoderState, LSTMDecoder
from interlingua.modules.encoders import BiLSTMEncoder

SHARED = "shared"


@dataclass
class LossOutput:
    loss: torch.Tensor
    """What backward() sees: mean token cross-entropy + lambda * mean penalty."""
    nll_sum: float
    n_tokens: int
    penalty: float
    """Mean ||A A^T - I||_F^2 per sentence of the batch."""


class TranslationModel(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_sizes: dict[str, int], encoder_langs: list[str], decoder_langs: list[str]):
        super().__init__()
        self.cfg = cfg
        self.encoder_langs, self.decoder_langs = sorted(encoder_langs), sorted(decoder_langs)
        d_h = cfg.encoder.hidden
        enc_keys = [SHARED] if cfg.shared else self.encoder_langs
        dec_keys = [SHARED] if cfg.shared else self.decoder_langs
        size = (lambda key: next(iter(vocab_sizes.values()))) if cfg.shared else vocab_sizes.__getitem__
        self.encoders = nn.ModuleDict({
            k: BiLSTMEncoder(size(k), cfg.embed_dim, d_h, cfg.encoder.layers, cfg.dropout) for k in enc_keys})
        self.bridge = AttentionBridge(d_h, cfg.bridge.hidden, cfg.bridge.heads) if cfg.bridge.type == "attention" else NoBridge()
        self.decoders = nn.ModuleDict({
            k: LSTMDecoder(size(k), cfg.embed_dim, cfg.decoder.hidden, cfg.decoder.layers, d_h,
                           cfg.dropout, cfg.decoder.input_feed) for k in dec_keys})
        if cfg.param_init:
            self.reset_uniform(cfg.param_init)

    def reset_uniform(self, scale: float) -> None:
        """Every weight uniform in [-scale, scale]; embedding rows of padding stay zero."""
        for param in self.parameters():
            nn.init.uniform_(param, -scale, scale)
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()

    @property
    def has_bridge(self) -> bool:
        return isinstance(self.bridge, AttentionBridge)

    def encoder_for(self, lang: str) -> BiLSTMEncoder:
        if lang not in self.encoder_langs:
            raise LanguageError(f"the model has no encoder for '{lang}' (source languages: {', '.join(self.encoder_langs)})")
        return self.encoders[SHARED if self.cfg.shared else lang]

    def decoder_for(self, lang: str) -> LSTMDecoder:
        if lang not in self.decoder_langs:
            raise LanguageError(f"the model has no decoder for '{lang}' (target languages: {', '.join(self.decoder_langs)})")
        return self.decoders[SHARED if self.cfg.shared else lang]

    def encode(self, src: torch.Tensor, lengths: torch.Tensor, src_lang: str) -> BridgeOutput:
        states, mask = self.encoder_for(src_lang)(src, lengths)
        return self.bridge(states, mask)

    def start_decoding(self, bridged: BridgeOutput, tgt_lang: str) -> DecoderState:
        return self.decoder_for(tgt_lang).start(bridged.memory, bridged.memory_mask)

    def loss(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
             src_lang: str, tgt_lang: str, penalty_weight: float = 0.0, label_smoothing: float = 0.0,
             softmax_sample: int = 0) -> LossOutput:
        """Teacher-forced loss of one batch; logits are computed only at real target positions.

        With `softmax_sample` > 0 (training only) the softmax runs over the batch's own target
        types plus that many uniformly drawn ones (target-vocabulary sampling, Jean et al. 2015),
        not over the whole vocabulary: the generator is ~35% of a step's arithmetic at 8k types."""
        bridged = self.encode(src, src_lengths, src_lang)
        decoder = self.decoder_for(tgt_lang)
        att, _ = decoder(tgt_in, decoder.start(bridged.memory, bridged.memory_mask))
        real = tgt_out != PAD
        gold = tgt_out[real]
        if softmax_sample > 0 and self.training:
            logits, gold = _sampled_logits(decoder.generator, att[real], gold, softmax_sample)
        else:
            logits = decoder.generator(att[real]).float()
        nll_sum = F.cross_entropy(logits, gold, reduction="sum")
        n = int(real.sum())
        if label_smoothing > 0:
            train_loss = F.cross_entropy(logits, gold, label_smoothing=label_smoothing)
        else:
            train_loss = nll_sum / max(n, 1)
        per_sentence = bridged.penalty.float()
        penalty = per_sentence.mean()
        if penalty_weight > 0 and bridged.attention is not None:
            # The papers add lambda * ||AA^T - I||^2 per sentence to the sentence's summed
            # cross-entropy; dividing both sums by the batch's target tokens keeps that ratio
            # (a per-sentence mean added to a per-token mean would weigh the penalty ~14x more).
            train_loss = train_loss + penalty_weight * per_sentence.sum() / max(n, 1)
        return LossOutput(train_loss, float(nll_sum.detach()), n, float(penalty.detach()))


def _sampled_logits(generator: nn.Linear, states: torch.Tensor, gold: torch.Tensor,
                    extra: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits over the gold types of the batch plus `extra` uniform draws (the RNG is the
    trainer's, so a resumed run draws the same), and the gold ids renumbered into that set."""
    drawn = torch.randint(generator.out_features, (extra,), device=gold.device)
    candidates = torch.unique(torch.cat([gold, drawn]))  # sorted
    logits = F.linear(states, generator.weight[candidates], generator.bias[candidates]).float()
    return logits, torch.searchsorted(candidates, gold)
