"""`train.batch_tokens`: batches by token count that mix every direction in a step.

The plan of one direction cuts length-sorted pools into batches within its token budget and
covers every pair once an epoch; a step takes one such batch of each direction in the
rotation's order, weights each pass by its share of the step's target tokens (so the step
trains on their mean, as one batch would), and resumes exactly.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_config

from interlingua.cli import main
from interlingua.config import parse_config
from interlingua.data.batching import DirectionBatches, PairTooLong, token_batches
from interlingua.data.prepare import prepare
from interlingua.errors import ConfigError
from interlingua.model_files.checkpoint import read_checkpoint
from interlingua.training.build import build_run
from interlingua.training.step import forward_backward, micro_batches, step_parts
from interlingua.training.trainer import Trainer, train

TWO_WAYS = {"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]]}


def _pairs(n: int = 500, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, 50, rng.integers(1, 30)) for _ in range(n)]
    tgt = [rng.integers(4, 50, len(s) + rng.integers(0, 3)) for s in src]
    return src, tgt


def test_token_batches_cut_in_order_within_the_budget():
    order = np.array([4, 2, 7, 1, 0])
    cut = token_batches(order, np.array([3, 4, 5, 9, 1]), 10)
    assert [b.tolist() for b in cut] == [[4, 2], [7], [1, 0]]


@pytest.mark.parametrize("prefix", [None, 3])
def test_a_token_plan_stays_within_its_budget_and_covers_every_pair_once_an_epoch(prefix):
    src, tgt = _pairs()
    it = DirectionBatches(src, tgt, "en", "de", batch_size=1, seed=5, pool=4, src_prefix=prefix, max_tokens=300)
    for _ in range(2):  # two epochs, each a new permutation
        epoch = [it.next_indices()]  # the first draw of an epoch makes its plan (and len(it) its size)
        epoch += [it.next_indices() for _ in range(len(it) - 1)]
        assert all(it.tokens(idx) <= 300 for idx in epoch)
        seen = np.sort(np.concatenate(epoch))
        assert seen.tolist() == list(range(len(src)))
        # full: no batch could have taken the next pair of its (length-sorted) pool and stayed within budget
        assert np.mean([it.tokens(idx) for idx in epoch]) > 0.8 * 300
    extra = (prefix is not None) + 1
    idx = it.next_indices()
    assert it.tokens(idx) == sum(len(src[i]) + len(tgt[i]) + extra for i in idx)


def test_a_token_plan_is_seeded_and_resumable():
    src, tgt = _pairs()
    it = DirectionBatches(src, tgt, "en", "de", batch_size=1, seed=5, pool=4, max_tokens=300)
    for _ in range(3):
        it.next()
    state = it.state_dict()
    ahead = [it.next_indices() for _ in range(3 * len(it))]  # crosses epoch boundaries
    again = DirectionBatches(src, tgt, "en", "de", batch_size=1, seed=5, pool=4, max_tokens=300)
    again.load_state_dict(state)
    assert all(np.array_equal(a, again.next_indices()) for a in ahead)


def test_a_pair_longer_than_the_budget_is_refused():
    src, tgt = _pairs()
    longest = max(len(s) + len(t) for s, t in zip(src, tgt)) + 1
    with pytest.raises(PairTooLong) as err:
        DirectionBatches(src, tgt, "en", "de", batch_size=1, seed=5, max_tokens=longest - 1)
    assert err.value.tokens == longest
    DirectionBatches(src, tgt, "en", "de", batch_size=1, seed=5, max_tokens=longest)


def _config(corpus, work, dropout: float = 0.0, **train_options):
    return parse_config(tiny_config(corpus, work, directions=TWO_WAYS, model={"dropout": dropout},
                                    train={"batch_tokens": 900, "max_steps": 8, "valid_every": 4, "log_every": 2,
                                           **train_options}))


def test_a_step_takes_one_batch_of_each_direction_in_the_rotations_order(multi30k_corpus, tmp_path):
    run = build_run(_config(multi30k_corpus, tmp_path / "run"))
    try:
        for _ in range(3):
            order = [run.direction_scheduler.next() for _ in range(2)]
            run.direction_scheduler.load_state_dict({"cycle": run.direction_scheduler.cycle - 1, "position": 0})
            parts = step_parts(run)
            assert [d for d, _ in parts] == order
            assert sum(run.batches[d].tokens(idx) for d, idx in parts) <= 900
            assert all(run.batches[d].tokens(idx) <= 450 for d, idx in parts)
    finally:
        run.close()


def test_a_mixed_step_trains_on_the_mean_over_all_its_target_tokens(multi30k_corpus, tmp_path):
    """The passes of a step (one per direction) weigh by their share of the step's target tokens: the
    gradient is that of the summed NLL of every pass over their summed target tokens."""
    run = build_run(_config(multi30k_corpus, tmp_path / "run", optimizer="sgd", penalty_weight=0.0))
    try:
        micro, ntok = micro_batches(run, step_parts(run))
        assert sorted((m.batch.src_lang, m.batch.tgt_lang) for m in micro) == [("de", "en"), ("en", "de")]
        assert sum(m.scale for m in micro) == pytest.approx(1.0)
        run.optimizer.zero_grad(set_to_none=True)
        forward_backward(run, micro)
        got = {n: p.grad.clone() for n, p in run.network.named_parameters() if p.grad is not None}
        run.optimizer.zero_grad(set_to_none=True)
        outs = [run.network(m.batch) for m in micro]
        (sum(o.loss * o.n_tokens for o in outs) / sum(o.n_tokens for o in outs)).backward()  # loss: mean NLL
        assert got and all(torch.allclose(got[n], p.grad, atol=1e-6) for n, p in run.network.named_parameters()
                           if p.grad is not None)
        assert ntok == sum(int(m.batch.src_lengths.sum()) + int((m.batch.tgt_out > 0).sum()) for m in micro)
    finally:
        run.close()


def test_accumulated_token_batches_equal_the_whole_step(multi30k_corpus, tmp_path):
    """accumulate 3 cuts each direction's batch into 3 passes; with SGD and no dropout the weights end
    as with one pass per direction."""
    data = prepare(_config(multi30k_corpus, tmp_path / "one"))
    train(_config(multi30k_corpus, tmp_path / "one", optimizer="sgd", lr=0.05), data=data)
    train(_config(multi30k_corpus, tmp_path / "three", optimizer="sgd", lr=0.05, accumulate=3), data=data)
    one, three = (read_checkpoint(tmp_path / w / "last.pt")["model"] for w in ("one", "three"))
    assert all(torch.allclose(one[k], three[k], rtol=1e-5, atol=1e-6) for k in one)


def test_ctrl_c_in_the_middle_of_a_mixed_step_resumes_exactly(multi30k_corpus, tmp_path):
    data = prepare(_config(multi30k_corpus, tmp_path / "straight"))
    train(_config(multi30k_corpus, tmp_path / "straight", dropout=0.3), data=data)
    trainer = Trainer(build_run(_config(multi30k_corpus, tmp_path / "run", dropout=0.3), data=data))
    calls = {"n": 0}
    original = trainer.run.network.loss

    def loss(*args, **kwargs):  # steps 1-4: 8 calls, validation at 4: 2, steps 5-6: 4; step 7's second pass
        calls["n"] += 1
        out = original(*args, **kwargs)
        if calls["n"] == 16:
            raise KeyboardInterrupt
        return out

    trainer.run.network.loss = loss  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt, match="Ctrl-C at step 6: saved"):
        trainer.train()
    assert train(_config(multi30k_corpus, tmp_path / "run", dropout=0.3), resume=True, data=data).steps == 8
    straight, resumed = (read_checkpoint(tmp_path / w / "last.pt") for w in ("straight", "run"))
    assert all(torch.equal(straight["model"][k], resumed["model"][k]) for k in straight["model"])
    assert straight["training"]["batches"] == resumed["training"]["batches"]


def test_epochs_count_the_largest_directions_batches(multi30k_corpus, tmp_path):
    run = build_run(parse_config(tiny_config(multi30k_corpus, tmp_path / "run", directions=TWO_WAYS,
                                             train={"batch_tokens": 900, "epochs": 2})))
    try:
        assert run.max_steps == 2 * max(len(b) for b in run.batches.values())
    finally:
        run.close()


def test_a_budget_too_small_for_a_pair_is_one_clear_error(multi30k_corpus, tmp_path, capsys):
    cfg = tiny_config(multi30k_corpus, tmp_path / "run", directions=TWO_WAYS, train={"batch_tokens": 40})
    with pytest.raises(ConfigError, match=r"train.batch_tokens gives each of the 2 directions .* 20 tokens.*at least"):
        build_run(parse_config(cfg))


def test_the_cli_trains_with_token_batches(multi30k_corpus, tmp_path, capsys):
    import yaml
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny_config(multi30k_corpus, tmp_path / "run", directions=TWO_WAYS,
                                               train={"batch_tokens": 900, "max_steps": 4, "valid_every": 4})))
    assert main(["train", str(path)]) == 0
    assert (tmp_path / "run" / "best.pt").exists()
    path.write_text(yaml.safe_dump(tiny_config(multi30k_corpus, tmp_path / "other", directions=TWO_WAYS,
                                               train={"batch_tokens": 1})))
    assert main(["train", str(path)]) == 2
    assert "train.batch_tokens" in capsys.readouterr().err


def test_the_model_card_says_what_a_step_trained_on():
    from interlingua.model_files.card import _training_section
    for train_section, said in (({"batch_tokens": 4096}, "steps of at most 4,096 tokens, one batch of every direction"),
                                ({"batch_size": 64}, "batches of 64 sentence pairs")):
        lines = _training_section({"train": {"optimizer": "adam", "lr": 0.002, **train_section}}, {"step": 10})
        assert any(said in line for line in lines)
