"""The whole model: encoder[src_lang] -> shared bridge -> decoder[tgt_lang].

Language-specific modules live in ModuleDicts keyed by language code; with `shared: true`
one encoder and one decoder (key "shared") serve every language and the source carries a
target-language tag (Johnson et al.), the same picture with one module on each side.
Each slot is built by its registry from the config's `type` (`interlingua.modules.registry`),
so the model knows its parts only through the `Encoder`, `Bridge` and `Decoder` interfaces.

`model(batch, ...)` is the training entry (it returns the loss terms, so a wrapper such as
DistributedDataParallel can wrap the model); `loss(...)` is the same on plain tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from interlingua.config import AgreementConfig, ModelConfig
from interlingua.data.batching import Batch
from interlingua.data.vocab import EOS, PAD, Vocab, vocab_offsets
from interlingua.errors import ConfigError, LanguageError
from interlingua.modules.agreement import agreement_losses
from interlingua.modules.base import BridgeOutput, Decoder, Encoder, masked_mean
from interlingua.modules.linear import linear
from interlingua.modules.outputs import OutputRows, RestrictedDecoder
from interlingua.modules.registry import BRIDGES, DECODERS, ENCODERS

SHARED = "shared"


@dataclass
class LossOutput:
    """The loss terms of one batch. The logged ones are kept as tensors and read out as numbers where they
    are asked for (`nll_sum`, ...), so that a compiled training step (`train.compile`) traces the whole loss
    as one graph and returns them from it."""

    loss: torch.Tensor
    """What backward() sees: (summed token cross-entropy + lambda * summed per-sentence penalty) / target tokens."""
    nll: torch.Tensor
    """The summed token cross-entropy (detached)."""
    tokens: torch.Tensor
    """The target tokens (an integer tensor)."""
    mean_penalty: torch.Tensor
    """Mean ||A A^T - I||_F^2 per sentence of the batch (detached)."""
    agreement_loss: torch.Tensor | None = None
    """Sum over the batch's sentences of the agreement loss (`train.agreement`), unweighted (detached); None: off."""
    agreement_sentences: int = 0
    """Sentences the agreement loss was computed for (0: off, or a copy direction)."""

    @property
    def nll_sum(self) -> float:
        return float(self.nll)

    @property
    def n_tokens(self) -> int:
        return int(self.tokens)

    @property
    def penalty(self) -> float:
        return float(self.mean_penalty)

    @property
    def agreement(self) -> float:
        return 0.0 if self.agreement_loss is None else float(self.agreement_loss)


class TranslationNetwork(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_sizes: dict[str, int], encoder_langs: list[str],
                 decoder_langs: list[str]):
        super().__init__()
        self.cfg = cfg
        self.encoder_langs, self.decoder_langs = sorted(encoder_langs), sorted(decoder_langs)
        enc_keys = [SHARED] if cfg.shared else self.encoder_langs
        dec_keys = [SHARED] if cfg.shared else self.decoder_langs
        # shared: one id space; a language added later (`interlingua extend`) ends past the others
        size = (lambda key: max(vocab_sizes.values())) if cfg.shared else vocab_sizes.__getitem__
        self.encoders = nn.ModuleDict({
            k: ENCODERS.build(cfg.encoder, vocab_size=size(k), embed_dim=cfg.embed_dim, dropout=cfg.dropout)
            for k in enc_keys})
        d_h = self.encoders[enc_keys[0]].output_dim
        self.bridge = BRIDGES.build(cfg.bridge, input_dim=d_h, languages=self.encoder_langs)
        self.decoders = nn.ModuleDict({
            k: DECODERS.build(cfg.decoder, vocab_size=size(k), embed_dim=cfg.embed_dim,
                              memory_dim=self.bridge.output_dim, dropout=cfg.dropout,
                              languages=self.decoder_langs if k == SHARED else [k])
            for k in dec_keys})
        if cfg.param_init:
            self.reset_uniform(cfg.param_init)
        self.translation_frozen = False
        """True once `freeze_translation` has run: only the bridge trains."""
        self.output_rows: dict[str, OutputRows] = {}
        """Target language -> the ids it may produce; empty (no restriction) unless a language was
        added to the trained shared model (`restrict_outputs`, `interlingua.modules.outputs`)."""

    def freeze_translation(self) -> None:
        """Keep every encoder and decoder parameter as it is, to train the bridge alone on top of a
        trained translation model (paper 003's NTDV layers): no gradients for them, and their modules
        stay in eval mode (no dropout) whatever `train()` is asked."""
        for part in (self.encoders, self.decoders):
            part.requires_grad_(False)
        self.translation_frozen = True
        self.train(self.training)

    def train(self, mode: bool = True) -> TranslationNetwork:
        super().train(mode)
        if self.translation_frozen:
            self.encoders.eval()
            self.decoders.eval()
        return self

    def restrict_outputs(self, ranges: dict[str, list[tuple[int, int]]]) -> None:
        """Let each target language produce only its vocabulary's ids ([start, end) ranges, e.g.
        `Vocab.id_ranges()`), in training and in search; languages whose ranges cover the whole
        output layer stay unrestricted."""
        self.output_rows = {}
        for lang, r in ranges.items():
            rows = OutputRows(r)
            if lang in self.decoder_langs and rows.prefix != self.decoder_for(lang).generator.out_features:
                self.output_rows[lang] = rows

    def restrict_to_vocabs(self, vocabs: dict[str, Vocab]) -> None:
        """Each target language produces only its own vocabulary's ids (only where a language was added)."""
        if vocab_offsets(vocabs):
            self.restrict_outputs({lang: v.id_ranges() for lang, v in vocabs.items()})

    def reset_uniform(self, scale: float) -> None:
        """Every weight uniform in [-scale, scale]; embedding rows of padding stay zero."""
        for param in self.parameters():
            nn.init.uniform_(param, -scale, scale)
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()

    @property
    def device(self) -> torch.device:
        """Where the weights are (and where inputs must go)."""
        return next(self.parameters()).device

    @property
    def has_bridge(self) -> bool:
        """Whether the bridge attends over the source (has an attention A to show)."""
        return self.bridge.attention_available

    def encoder_for(self, lang: str) -> Encoder:
        if lang not in self.encoder_langs:
            raise LanguageError(f"the model has no encoder for '{lang}' "
                                f"(source languages: {', '.join(self.encoder_langs)})")
        return cast(Encoder, self.encoders[SHARED if self.cfg.shared else lang])  # ModuleDict items are Modules

    def decoder_for(self, lang: str) -> Decoder:
        if lang not in self.decoder_langs:
            raise LanguageError(f"the model has no decoder for '{lang}' "
                                f"(target languages: {', '.join(self.decoder_langs)})")
        return cast(Decoder, self.decoders[SHARED if self.cfg.shared else lang])

    def run_encoder(self, src: torch.Tensor, lengths: torch.Tensor, src_lang: str) -> BridgeOutput:
        """The source language's encoder, then the bridge: ids (batch, n) -> `BridgeOutput`."""
        states, mask = self.encoder_for(src_lang)(src, lengths)
        return self.bridge(states, mask, src_lang)

    def start_decoding(self, bridged: BridgeOutput, tgt_lang: str) -> tuple[Decoder, Any]:
        """The target language's decoder and its start state for `bridged` (what the search takes); where
        the language's outputs are restricted, the decoder comes wrapped so its steps stay within them."""
        decoder = self.decoder_for(tgt_lang)
        state = decoder.start_state(bridged.memory, bridged.memory_mask, language=tgt_lang)
        rows = self.output_rows.get(tgt_lang)
        return (decoder if rows is None else RestrictedDecoder(decoder, rows)), state

    def forward(self, batch: Batch, penalty_weight: float = 0.0, label_smoothing: float = 0.0,
                softmax_sample: int = 0, agreement: AgreementConfig | None = None,
                agreement_weight: torch.Tensor | None = None) -> LossOutput:
        """The training entry: the loss terms of one batch (see `loss`), on the model's device."""
        batch = batch.to(self.device)
        return self.loss(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, batch.src_lang, batch.tgt_lang,
                         penalty_weight, label_smoothing, softmax_sample, agreement,
                         reverse_prefix=batch.reverse_prefix, filler=batch.filler, agreement_weight=agreement_weight,
                         soft_targets=batch.soft_targets)

    @torch.no_grad()
    def target_distributions(self, batch: Batch) -> torch.Tensor:
        """The model's next-subword distribution at each real target position of `batch`, teacher-forced on
        its target (row-major over `tgt_out != PAD`, over the target language's output types as the loss
        sees them): what word-level distillation trains another direction towards."""
        batch = batch.to(self.device)
        bridged, _ = self._encode(batch.src, batch.src_lengths, batch.src_lang, None)
        logits, _ = self._output_logits(bridged, batch.tgt_in, batch.tgt_out, batch.tgt_lang, 0)
        return F.softmax(logits, dim=-1)

    def loss(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
             src_lang: str, tgt_lang: str, penalty_weight: float = 0.0, label_smoothing: float = 0.0,
             softmax_sample: int = 0, agreement: AgreementConfig | None = None, reverse_prefix: int | None = None,
             filler: bool = False, agreement_weight: torch.Tensor | None = None,
             soft_targets: torch.Tensor | None = None) -> LossOutput:
        """Teacher-forced loss of one batch; logits are computed only at real target positions.

        With `softmax_sample` > 0 (training only) the softmax runs over the batch's own target
        types plus that many uniformly drawn ones (target-vocabulary sampling, Jean et al. 2015),
        not over the whole vocabulary: the generator is ~35% of a step's arithmetic at 8k types.

        With `agreement` on (weight > 0) and a cross-lingual batch, the targets are also encoded as
        sources (with `reverse_prefix`, the tag a shared model's source would carry for tgt->src) and
        their vectors pulled towards the sources' (`interlingua.modules.agreement`); `filler`: this
        batch only stands in for a process without sentences and gives contrastive no negatives;
        `agreement_weight`: the term's weight as a tensor, in place of `agreement.weight` (a compiled step's,
        `training.compiled`: a weight that changes every step, as in a ramp, is then no new graph each step).

        With `soft_targets` (one distribution per real target position, `target_distributions` of a teacher)
        the training term is the cross-entropy against them, over the whole output (no label smoothing: they
        are smooth already; no sampled softmax); the logged NLL is still that of `tgt_out`."""
        use_agreement = agreement is not None and agreement.weight > 0 and src_lang != tgt_lang
        layer = agreement.layer if use_agreement and agreement is not None else None
        bridged, layers = self._encode(src, src_lengths, src_lang, layer)
        logits, gold = self._output_logits(bridged, tgt_in, tgt_out, tgt_lang,
                                           softmax_sample if soft_targets is None and self.training else 0)
        # One log-softmax for the logged NLL and the training loss (over 8k types it is ~10% of a
        # Transformer step); label smoothing as F.cross_entropy defines it: (1 - eps) * NLL +
        # eps * mean over the types of -log p, averaged over the target tokens.
        log_probs = F.log_softmax(logits, dim=-1)
        nll_sum = F.nll_loss(log_probs, gold, reduction="sum")
        n = (tgt_out != PAD).sum()  # a tensor, as every logged term (see LossOutput)
        tokens = n.clamp(min=1)
        if soft_targets is not None:
            train_loss = -(soft_targets.to(log_probs.dtype) * log_probs).sum() / tokens
        elif label_smoothing > 0:
            smooth_sum = -log_probs.mean(dim=-1).sum()
            train_loss = ((1 - label_smoothing) * nll_sum + label_smoothing * smooth_sum) / tokens
        else:
            train_loss = nll_sum / tokens
        per_sentence = bridged.penalty.float()
        penalty = per_sentence.mean()
        if penalty_weight > 0 and bridged.attention is not None:
            # The papers add lambda * ||AA^T - I||^2 per sentence to the sentence's summed
            # cross-entropy; dividing both sums by the batch's target tokens keeps that ratio
            # (a per-sentence mean added to a per-token mean would weigh the penalty ~14x more).
            train_loss = train_loss + penalty_weight * per_sentence.sum() / tokens
        agreement_sum, agreed = None, 0
        if use_agreement:
            assert agreement is not None
            src_vec, rows, scale = self._agreement_vector(bridged, layers, agreement), tgt_out, 1.0
            if agreement.sentences is not None and agreement.sentences < len(tgt_out):  # a share of the batch
                rows, src_vec = tgt_out[:agreement.sentences], src_vec[:agreement.sentences]
                scale = len(tgt_out) / agreement.sentences  # counted for the whole batch
            tgt_vec = self._target_agreement_vector(rows, tgt_lang, reverse_prefix, agreement)
            if filler:  # a stand-in batch: no rows of its own (the gather still runs on every process)
                src_vec, tgt_vec = src_vec[:0], tgt_vec[:0]
            losses = agreement_losses(src_vec, tgt_vec, agreement.loss, agreement.temperature,
                                      negatives=agreement.negatives)
            weight = agreement.weight if agreement_weight is None else agreement_weight
            train_loss = train_loss + weight * scale * losses.sum() / tokens
            agreement_sum, agreed = losses.detach().sum(), len(losses)
        return LossOutput(train_loss, nll_sum.detach(), n, penalty.detach(), agreement_sum, agreed)

    def _output_logits(self, bridged: BridgeOutput, tgt_in: torch.Tensor, tgt_out: torch.Tensor, tgt_lang: str,
                       softmax_sample: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Float logits at the real target positions of a teacher-forced decoder pass, and the gold ids
        numbered as their columns (over the language's own ids where its outputs are restricted, over the
        gold types plus `softmax_sample` drawn ones where that is > 0)."""
        decoder = self.decoder_for(tgt_lang)
        att, _ = decoder(tgt_in, decoder.start_state(bridged.memory, bridged.memory_mask, language=tgt_lang))
        real = tgt_out != PAD
        gold = tgt_out[real]
        rows = self.output_rows.get(tgt_lang)
        if softmax_sample > 0:
            return _sampled_logits(decoder.generator, att[real], gold, softmax_sample, rows)
        if rows is not None:  # the target language's own ids only (see interlingua.modules.outputs)
            return rows.logits(decoder.generator, att[real]).float(), rows.renumber(gold)
        return decoder.generator(att[real]).float(), gold

    # -- agreement (train.agreement) -----------------------------------------------------------
    def _encode(self, ids: torch.Tensor, lengths: torch.Tensor, lang: str, layer: int | None
                ) -> tuple[BridgeOutput, tuple[list[torch.Tensor], torch.Tensor] | None]:
        """`run_encoder`, and with `layer` also every encoder layer's states and the mask (the
        agreement term then pools one of them); the bridge output is the same either way."""
        if layer is None:
            return self.run_encoder(ids, lengths, lang), None
        layers = self.encoder_for(lang).layer_states(ids, lengths)
        return self.bridge(layers[0][-1], layers[1], lang), layers

    def check_agreement(self, agreement: AgreementConfig, directions: list[tuple[str, str]]) -> None:
        """Fail before training where `agreement` cannot be computed for this model and these directions."""
        if agreement.weight <= 0:
            return
        targets = sorted({t for s, t in directions if s != t and t not in self.encoder_langs})
        if targets:
            raise ConfigError(f"train.agreement encodes each target sentence with its language's encoder, but these "
                              f"target languages have none (they are never a source): {', '.join(targets)}")
        if agreement.pooling == "heads" and (self.bridge.heads is None or agreement.layer is not None):
            raise ConfigError("train.agreement.pooling: heads needs a bridge with a fixed number of heads (attention, "
                              f"ntdv) and no agreement.layer; this model's bridge is '{self.bridge.kind}'")
        if agreement.layer is not None:
            enc = cast(Encoder, self.encoders[next(iter(self.encoders))])
            n_layers = len(enc.layer_states(torch.zeros(1, 1, dtype=torch.long, device=self.device),
                                            torch.ones(1, dtype=torch.long, device=self.device))[0]) - 1
            if agreement.layer > n_layers:
                raise ConfigError(f"train.agreement.layer {agreement.layer} "
                                  f"is beyond the encoder's last layer ({n_layers})")

    def _tag_free(self, mask: torch.Tensor) -> torch.Tensor:
        """The mask without the first position where every source starts with a target tag (a shared
        model with `tag_position: source_prefix`): the tag names the target, not the meaning."""
        if not (self.cfg.shared and self.cfg.tag_position == "source_prefix") or mask.size(1) < 2:
            return mask
        mask = mask.clone()
        mask[:, 0] = False
        return mask

    def _layer_vector(self, layers: tuple[list[torch.Tensor], torch.Tensor], layer: int) -> torch.Tensor:
        """The masked mean of one encoder layer's states (`agreement.layer`), tags left out."""
        states, mask = layers
        return masked_mean(states[layer].float(), self._tag_free(mask))

    def _agreement_vector(self, bridged: BridgeOutput, layers: tuple[list[torch.Tensor], torch.Tensor] | None,
                          agreement: AgreementConfig) -> torch.Tensor:
        """What `train.agreement` compares of one side: (batch, d), or (batch, heads, d) per head;
        `layers`: the encoder's layer states and mask, where `agreement.layer` chooses one of them."""
        if layers is not None:
            assert agreement.layer is not None
            return self._layer_vector(layers, agreement.layer)
        if agreement.pooling == "heads":
            return self.bridge.head_vectors(bridged)
        if self.bridge.heads is None:  # the memory is the token states: leave a source tag out
            return masked_mean(bridged.memory.float(), self._tag_free(bridged.memory_mask))
        return self.bridge.pooled(bridged)

    def _target_agreement_vector(self, tgt_out: torch.Tensor, tgt_lang: str, prefix: int | None,
                                 agreement: AgreementConfig) -> torch.Tensor:
        """The batch's target sentences encoded as sources of `tgt_lang` (targets without EOS, after
        `prefix` where a shared model's sources carry a tag), then pooled as the source side is."""
        ids = tgt_out.masked_fill(tgt_out == EOS, PAD)
        lengths = (ids != PAD).sum(1)
        if prefix is not None:
            ids = torch.cat([ids.new_full((len(ids), 1), prefix), ids], 1)
            lengths = lengths + 1
        if not torch.compiler.is_compiling():  # compiled (`train.compile`), a width read from the data would
            ids = ids[:, :max(int(lengths.max()), 1)]  # split the graph: the padding columns stay, masked
        with torch.set_grad_enabled(torch.is_grad_enabled() and not agreement.detach_target):
            if agreement.layer is not None:  # the layers above the compared one and the bridge are not needed
                return self._layer_vector(self.encoder_for(tgt_lang).layer_states(ids, lengths, upto=agreement.layer),
                                          agreement.layer)
            bridged, layers = self._encode(ids, lengths, tgt_lang, None)
            return self._agreement_vector(bridged, layers, agreement)


def _sampled_logits(generator: nn.Linear, states: torch.Tensor, gold: torch.Tensor,
                    extra: int, rows: OutputRows | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits over the gold types of the batch plus `extra` uniform draws (the RNG is the
    trainer's, so a resumed run draws the same; drawn among `rows` where the target language's
    outputs are restricted), and the gold ids renumbered into that set."""
    if rows is None:
        drawn = torch.randint(generator.out_features, (extra,), device=gold.device)
    else:
        drawn = rows.index(gold.device)[torch.randint(len(rows), (extra,), device=gold.device)]
    candidates = torch.unique(torch.cat([gold, drawn]))  # sorted
    logits = linear(states, generator.weight[candidates], generator.bias[candidates]).float()
    return logits, torch.searchsorted(candidates, gold)
