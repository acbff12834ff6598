"""`interlingua train`: rotate over directions, optimise, validate, keep the best, resume exactly.

Every source of randomness is either derived from the seed and a counter (direction order,
batch order) or saved in the checkpoint (torch's RNG for dropout), so a run killed and
resumed from `last.pt` continues exactly as an uninterrupted one with the same seed.
"""
from __future__ import annotations

import json
import logging
import signal
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from interlingua.config import ExperimentConfig
from interlingua.data.batching import DirectionBatches
from interlingua.data.directions import Direction, DirectionScheduler, build_directions, zero_shot_directions
from interlingua.data.prepare import PreparedData, direction_pairs, prepare
from interlingua.data.vocab import language_tag
from interlingua.errors import CheckpointError, ConfigError, DataError
from interlingua.evaluation.plots import plot_training_curves
from interlingua.modules.model import TranslationModel
from interlingua.training.checkpoint import build_payload, read_checkpoint, save_atomic
from interlingua.training.precision import autocast, resolve_precision
from interlingua.training.validation import DevSet, evaluate_devset

log = logging.getLogger(__name__)


def direction_name(d: Direction) -> str:
    return f"{d[0]}-{d[1]}"


@dataclass
class TrainResult:
    work_dir: Path
    steps: int
    best_bleu: float | None
    best_checkpoint: Path | None
    last_checkpoint: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    tokens_per_second: float = 0.0


class Trainer:
    def __init__(self, cfg: ExperimentConfig, resume: bool = False, data: PreparedData | None = None):
        self.cfg = cfg
        self.work_dir = Path(cfg.work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        tc = cfg.train
        if tc.threads:
            torch.set_num_threads(tc.threads)
        torch.manual_seed(tc.seed)
        self.precision = resolve_precision(tc.precision)
        self.data = data or prepare(cfg)
        self.directions = build_directions(cfg.directions, self.data.languages)
        self.encoder_langs = sorted({s for s, _ in self.directions})
        self.decoder_langs = sorted({t for _, t in self.directions})
        self.zero_shot = zero_shot_directions(self.directions, self.data.languages)
        self.model = TranslationModel(cfg.model, {lang: len(v) for lang, v in self.data.vocabs.items()},
                                      self.encoder_langs, self.decoder_langs)
        self.optimizer = (torch.optim.SGD(self.model.parameters(), lr=tc.lr) if tc.optimizer == "sgd"
                          else torch.optim.Adam(self.model.parameters(), lr=tc.lr, fused=True))
        self.scheduler = DirectionScheduler(self.directions, tc.seed)
        self.batches = {d: self._direction_batches(d) for d in self.directions}
        self.devsets = self._devsets()
        self.step = 0
        self.elapsed = 0.0
        self.best_bleu: float | None = None
        self.history: list[dict[str, Any]] = []
        self._stop_requested = False
        if resume:
            self._resume()
        elif (self.work_dir / "last.pt").exists():
            raise ConfigError(f"{self.work_dir} already holds a run (last.pt); use --resume to continue it or choose another work_dir")

    # -- setup ---------------------------------------------------------------------------
    def _prefix(self, src: str, tgt: str) -> int | None:
        return self.data.vocabs[src].piece_id(language_tag(tgt)) if self.cfg.model.shared else None

    def _direction_batches(self, d: Direction) -> DirectionBatches:
        src, tgt = direction_pairs(self.data, "train", *d)
        if not src:
            raise DataError(f"no training sentence pairs for direction {d[0]}->{d[1]} in the corpus")
        seed = self.cfg.train.seed * 7919 + zlib.crc32(direction_name(d).encode())
        return DirectionBatches(src, tgt, d[0], d[1], self.cfg.train.batch_size, seed, self.cfg.train.bucket_pool,
                                self._prefix(*d))

    def _devsets(self) -> dict[Direction, DevSet]:
        if "val" not in self.data.splits:
            log.warning("the corpus has no 'val' split: no dev evaluation, the last checkpoint is also the best")
            return {}
        dev = {}
        for d in self.directions + self.zero_shot:
            if d[0] == d[1]:
                continue
            src, tgt = direction_pairs(self.data, "val", *d, limit=self.cfg.preprocess.max_valid_sentences)
            if src:
                refs = [self.data.vocabs[d[1]].decode(t.tolist()) for t in tgt]
                dev[d] = DevSet(d[0], d[1], src, tgt, refs)
        return dev

    # -- checkpoints ---------------------------------------------------------------------
    def _training_state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "elapsed": self.elapsed,
            "best_bleu": self.best_bleu,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "batches": {direction_name(d): b.state_dict() for d, b in self.batches.items()},
            "torch_rng": torch.get_rng_state(),
            "history": json.dumps(self.history),
        }

    def _save(self, name: str) -> Path:
        path = self.work_dir / name
        save_atomic(build_payload(self.cfg, self.model, self.data.vocabs, self.directions, self._training_state()), path)
        return path

    def _resume(self) -> None:
        path = self.work_dir / "last.pt"
        payload = read_checkpoint(path)
        if "training" not in payload:
            raise CheckpointError(f"{path} holds no training state to resume from")
        stored = payload["config"]
        for section in ("model", "directions", "preprocess"):
            if stored[section] != self.cfg.model_dump(mode="json")[section]:
                raise ConfigError(f"cannot resume {path}: config section '{section}' differs from the one it was trained with")
        self.model.load_state_dict(payload["model"])
        st = payload["training"]
        self.optimizer.load_state_dict(st["optimizer"])
        self.scheduler.load_state_dict(st["scheduler"])
        for d, b in self.batches.items():
            b.load_state_dict(st["batches"][direction_name(d)])
        torch.set_rng_state(st["torch_rng"])
        self.step, self.elapsed, self.best_bleu = st["step"], st["elapsed"], st["best_bleu"]
        self.history = json.loads(st["history"])
        self._truncate_metrics_after(self.step)
        log.info("resumed from %s at step %d", path, self.step)

    def _truncate_metrics_after(self, step: int) -> None:
        """Drop log lines written after the checkpoint we resume from (they will be redone)."""
        path = self.work_dir / "metrics.jsonl"
        if path.exists():
            kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= step]
            path.write_text("".join(line + "\n" for line in kept))

    # -- loop ----------------------------------------------------------------------------
    def _log(self, record: dict[str, Any]) -> None:
        with open(self.work_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def _budget_spent(self) -> bool:
        mm = self.cfg.train.max_minutes
        return mm is not None and self.elapsed >= mm * 60

    def validate(self) -> dict[str, Any]:
        results = {}
        for d, dev in self.devsets.items():
            with autocast(self.precision):
                r = evaluate_devset(self.model, dev, self.data.vocabs, beam=self.cfg.train.valid_beam,
                                    max_len=2 * self.cfg.preprocess.max_len)
            r["zero_shot"] = d in self.zero_shot
            results[direction_name(d)] = r
        supervised = [r["bleu"] for n, r in results.items() if not r["zero_shot"]]
        mean_bleu = float(np.mean(supervised)) if supervised else float("nan")
        self.model.train()
        return {"type": "valid", "step": self.step, "mean_bleu": mean_bleu, "directions": results}

    def _request_stop(self, *_: Any) -> None:
        self._stop_requested = True

    def train(self) -> TrainResult:
        tc = self.cfg.train
        (self.work_dir / "config.json").write_text(json.dumps(self.cfg.model_dump(mode="json"), indent=1))
        self.model.train()
        old_handler = signal.signal(signal.SIGTERM, self._request_stop) if _in_main_thread() else None
        window_tokens, window_time = 0, 0.0
        total_tokens, total_time = 0, 0.0
        acc = {"nll": 0.0, "tok": 0, "pen": 0.0, "n": 0}
        # With a wall-clock budget the bar counts seconds of training, otherwise steps.
        by_time = tc.max_minutes is not None
        bar = tqdm(total=round(tc.max_minutes * 60) if by_time else tc.max_steps,
                   initial=round(self.elapsed) if by_time else self.step,
                   desc="train", unit="s" if by_time else "step", dynamic_ncols=True, mininterval=2)
        try:
            while self.step < tc.max_steps and not self._budget_spent() and not self._stop_requested:
                t0 = time.perf_counter()
                direction = self.scheduler.next()
                batch = self.batches[direction].next()
                with autocast(self.precision):
                    out = self.model.loss(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, batch.src_lang,
                                          batch.tgt_lang, tc.penalty_weight, tc.label_smoothing,
                                          tc.softmax_sample)
                self.optimizer.zero_grad(set_to_none=True)
                out.loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.clip_norm)
                self.optimizer.step()
                self.step += 1
                dt = time.perf_counter() - t0
                self.elapsed += dt
                ntok = batch.n_src_tokens + batch.n_tgt_tokens
                window_tokens, window_time = window_tokens + ntok, window_time + dt
                total_tokens, total_time = total_tokens + ntok, total_time + dt
                acc["nll"] += out.nll_sum
                acc["tok"] += out.n_tokens
                acc["pen"] += out.penalty
                acc["n"] += 1
                if by_time:
                    bar.update(max(0, min(round(self.elapsed), bar.total) - bar.n))
                else:
                    bar.update(1)
                if self.step % tc.log_every == 0:
                    rec = {"type": "train", "step": self.step, "loss": acc["nll"] / max(acc["tok"], 1),
                           "penalty": acc["pen"] / acc["n"], "tokens_per_s": window_tokens / max(window_time, 1e-9),
                           "lr": self.optimizer.param_groups[0]["lr"], "elapsed_s": round(self.elapsed, 2)}
                    self._log(rec)
                    bar.set_postfix(step=self.step, loss=f"{rec['loss']:.3f}", pen=f"{rec['penalty']:.2f}", tok_s=f"{rec['tokens_per_s']:.0f}")
                    acc = {"nll": 0.0, "tok": 0, "pen": 0.0, "n": 0}
                    window_tokens, window_time = 0, 0.0
                if self.step % tc.valid_every == 0:
                    self._validate_and_save()
        except KeyboardInterrupt:
            log.warning("interrupted at step %d: saving last.pt", self.step)
            self._save("last.pt")
            raise
        finally:
            bar.close()
            if old_handler is not None:
                signal.signal(signal.SIGTERM, old_handler)
        if not self.history or self.history[-1]["step"] != self.step:
            self._validate_and_save()
        best = self.work_dir / "best.pt"
        return TrainResult(self.work_dir, self.step, self.best_bleu, best if best.exists() else None,
                           self.work_dir / "last.pt", self.history, total_tokens / max(total_time, 1e-9))

    def _validate_and_save(self) -> None:
        rec = self.validate() if self.devsets else {"type": "valid", "step": self.step, "mean_bleu": float("nan"), "directions": {}}
        rec["elapsed_s"] = round(self.elapsed, 2)
        self.history.append(rec)
        self._log(rec)
        score = rec["mean_bleu"]
        improved = not np.isnan(score) and (self.best_bleu is None or score > self.best_bleu)
        if improved:
            self.best_bleu = score
        self._save("last.pt")
        if improved or not self.devsets:
            self._save("best.pt")
        summary = " ".join(f"{n}={r['bleu']:.1f}{'*' if r['zero_shot'] else ''}" for n, r in rec["directions"].items())
        tqdm.write(f"step {self.step}: dev mean BLEU {score:.2f} {'(best)' if improved else ''} | {summary}")
        try:
            plot_training_curves(self.work_dir / "metrics.jsonl", self.work_dir / "curves.png")
        except (ValueError, KeyError) as err:
            log.warning("could not plot curves: %s", err)


def _in_main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


def train(cfg: ExperimentConfig, resume: bool = False) -> TrainResult:
    return Trainer(cfg, resume=resume).train()
