"""Target-vocabulary sampling: the sampled logits are the full ones restricted to the candidates."""
import pytest
import torch

from interlingua.config import ModelConfig
from interlingua.modules.model import TranslationNetwork, _sampled_logits


def test_sampled_logits_are_full_logits_on_the_candidates():
    torch.manual_seed(0)
    generator = torch.nn.Linear(8, 50)
    states, gold = torch.randn(12, 8), torch.randint(0, 50, (12,))
    logits, renumbered = _sampled_logits(generator, states, gold, extra=6)
    full = generator(states)
    assert torch.allclose(logits.gather(1, renumbered[:, None]), full.gather(1, gold[:, None]))
    assert gold.unique().numel() <= logits.size(1) <= gold.unique().numel() + 6
    # every candidate column is one of the full columns, in vocabulary order
    cols = [int((full[0] == v).nonzero()[0]) for v in logits[0]]
    assert cols == sorted(set(cols)) and set(gold.tolist()) <= set(cols)


def _model():
    torch.manual_seed(3)
    cfg = ModelConfig.model_validate({"embed_dim": 8, "encoder": {"hidden": 12}, "bridge": {"heads": 3, "hidden": 6},
                                      "decoder": {"hidden": 8, "layers": 1}, "dropout": 0.0})
    return TranslationNetwork(cfg, {"en": 60, "de": 60}, ["en"], ["de"])


def test_sampled_loss_trains_only_candidate_rows_and_evaluation_stays_full():
    model = _model()
    src, lengths = torch.randint(4, 60, (4, 7)), torch.tensor([7, 6, 5, 3])
    tgt = torch.randint(4, 20, (4, 6))  # gold types among the first 20 of 60
    full = model.loss(src, lengths, tgt, tgt, "en", "de")
    sampled = model.loss(src, lengths, tgt, tgt, "en", "de", softmax_sample=5)
    assert sampled.nll_sum < full.nll_sum  # a partition function over fewer types
    sampled.loss.backward()
    grad = model.decoders["de"].generator.weight.grad
    touched = (grad.abs().sum(1) > 0).sum()
    assert tgt.unique().numel() <= touched <= tgt.unique().numel() + 5
    model.eval()
    assert model.loss(src, lengths, tgt, tgt, "en", "de", softmax_sample=5).nll_sum == pytest.approx(full.nll_sum)
