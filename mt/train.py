"""Training: label-smoothed loss, inverse-sqrt warmup, and one plain loop with validation.

`train(cfg, run_dir)` does everything a run needs and writes it into `run_dir`: config.yaml, spm.model,
train.log (set up by the CLI), metrics.jsonl, last.pt and best.pt (by validation BLEU).
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from mt.checkpoint import atomic_save
from mt.config import ConfigError, RunConfig, config_to_dict, save_config
from mt.data import Batch, drop_long_pairs, epoch_batches, fill_ratio, load_split, make_batch, token_batches
from mt.evaluate import score, translate_lines
from mt.model import Seq2Seq, count_parameters, resolve_device
from mt.tokenizer import PAD, Tokenizer, load_tokenizer, train_tokenizer

log = logging.getLogger(__name__)


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Per-row label-smoothed CE and NLL with the gradient written out: softmax - smoothed target.

    Autograd through log_softmax + gather + mean makes about eight passes over the (N, V) logits;
    this makes three, which is a tenth of a CPU training step at V = 8000.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        lse = torch.logsumexp(logits, dim=-1)                            # (N,)
        nll = lse - logits.gather(1, target[:, None]).squeeze(1)         # (N,)
        uniform = lse - logits.mean(dim=-1)                              # (N,) mean over V of -log p
        ctx.save_for_backward(logits, target)
        ctx.epsilon = epsilon
        return (1.0 - epsilon) * nll + epsilon * uniform, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        logits, target = ctx.saved_tensors
        eps, V = ctx.epsilon, logits.size(1)
        grad = torch.softmax(logits, dim=-1)                             # (N, V)
        grad.mul_((grad_loss + grad_nll)[:, None]).sub_((eps / V) * grad_loss[:, None])
        grad.scatter_add_(1, target[:, None], (-(1.0 - eps) * grad_loss - grad_nll)[:, None])
        return grad, None, None


def label_smoothed_loss(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross entropy and summed NLL over non-pad targets.

    The smoothed target puts 1 - epsilon on the gold token plus epsilon / V on every one of the V
    entries (gold included), as `F.cross_entropy(label_smoothing=epsilon)` does.

    Args:
        logits: (N, V); target: (N,) ids, PAD positions ignored.
    Returns:
        (loss_sum, nll_sum), both scalars; divide by the number of non-pad targets.
    """
    loss, nll = _SmoothedCrossEntropy.apply(logits.float(), target, epsilon)  # (N,) each
    real = target != PAD
    return loss[real].sum(), nll[real].sum()


def inverse_sqrt_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak` at step `warmup`, then peak * sqrt(warmup / step). Steps count from 1."""
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


def _autocast(device: torch.device, precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def batch_loss(model: Seq2Seq, batch: Batch, epsilon: float) -> tuple[Tensor, Tensor]:
    logits = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)  # (B, T, V)
    return label_smoothed_loss(logits.flatten(0, 1), batch.tgt_out.flatten(), epsilon)


def prepare_tokenizer(cfg: RunConfig, run_dir: Path, src: list[str], tgt: list[str]) -> Tokenizer:
    """Train the joint BPE model once per run directory; reuse it afterwards."""
    path = run_dir / "spm.model"
    if path.exists():
        tokenizer = load_tokenizer(path)
        if tokenizer.vocab_size != cfg.tokenizer.vocab_size:
            raise ConfigError(f"{path} has {tokenizer.vocab_size} pieces but tokenizer.vocab_size is "
                              f"{cfg.tokenizer.vocab_size}; use a new --run-dir")
        log.info("reusing %s", path)
        return tokenizer
    tokenizer = train_tokenizer(src + tgt, cfg.tokenizer.vocab_size, cfg.tokenizer.character_coverage)
    tokenizer.save(path)
    log.info("trained joint BPE on %d lines: %d pieces -> %s", len(src) + len(tgt), tokenizer.vocab_size, path)
    return tokenizer


@dataclass
class Validation:
    """Held-out data and the decoding it needs."""
    src_lines: list[str]
    ref_lines: list[str]
    batches: list[Batch]


def make_validation(cfg: RunConfig, tokenizer: Tokenizer) -> Validation:
    src, ref = load_split(cfg.data, "val")
    src_ids, tgt_ids = tokenizer.encode(src), tokenizer.encode(ref)
    groups = token_batches([len(s) + 1 for s in src_ids], [len(t) + 1 for t in tgt_ids], cfg.train.max_tokens)
    batches = [make_batch([src_ids[i] for i in g], [tgt_ids[i] for i in g]) for g in groups]
    return Validation(src, ref, batches)


@torch.no_grad()
def validate(model: Seq2Seq, val: Validation, tokenizer: Tokenizer, cfg: RunConfig,
             device: torch.device) -> dict:
    """Teacher-forced loss/perplexity and greedy BLEU/chrF on the validation set."""
    model.eval()
    loss_sum = nll_sum = 0.0
    ntokens = 0
    for batch in val.batches:
        with _autocast(device, cfg.train.precision):
            loss, nll = batch_loss(model, batch.to(device), cfg.train.label_smoothing)
        loss_sum, nll_sum, ntokens = loss_sum + loss.item(), nll_sum + nll.item(), ntokens + batch.ntokens
    hyps = translate_lines(model, tokenizer, val.src_lines, cfg.decode, device)
    scores = score(hyps, val.ref_lines)
    model.train()
    for i in range(3):
        log.info("example %d | source: %s | reference: %s | hypothesis: %s",
                 i, val.src_lines[i], val.ref_lines[i], hyps[i])
    return {"val_loss": loss_sum / ntokens, "val_nll": nll_sum / ntokens,
            "val_ppl": math.exp(min(nll_sum / ntokens, 50.0)), "val_bleu": scores["bleu"],
            "val_chrf": scores["chrf"], "bleu_signature": scores["bleu_signature"]}


EMPTY_WINDOW = {"loss": 0.0, "nll": 0.0, "tgt": 0, "tokens": 0, "seconds": 0.0}


@dataclass
class Progress:
    """Counters of the running training loop."""
    step: int = 0
    epoch: int = 0
    best_bleu: float = -1.0
    best_step: int = 0
    bad_validations: int = 0
    window: dict = field(default_factory=lambda: dict(EMPTY_WINDOW))  # sums since the last log line
    train_seconds: float = 0.0   # inside optimizer updates only (for tokens/s)
    elapsed_s: float = 0.0       # wall clock since the loop started, validation included


def _setup(cfg: RunConfig) -> torch.device:
    random.seed(cfg.train.seed)
    torch.manual_seed(cfg.train.seed)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    if cfg.train.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: cuda requested but no GPU is visible; use auto or cpu")
    device = resolve_device(cfg.train.device)
    if cfg.train.precision == "fp16" and device.type != "cuda":
        raise ConfigError("train.precision: fp16 needs a CUDA device; use bf16 or fp32 on CPU")
    return device


def _save(path: Path, model: Seq2Seq, optimizer: torch.optim.Optimizer, cfg: RunConfig, p: Progress) -> None:
    atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "config": config_to_dict(cfg),
                 "vocab_size": model.vocab_size, "step": p.step, "epoch": p.epoch,
                 "best_bleu": p.best_bleu, "best_step": p.best_step}, path)


class Trainer:
    """Holds what the loop needs; `run()` is the loop."""

    def __init__(self, cfg: RunConfig, run_dir: Path):
        self.cfg, self.run_dir = cfg, run_dir
        self.device = _setup(cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
        src, tgt = load_split(cfg.data, "train")
        self.tokenizer = prepare_tokenizer(cfg, run_dir, src, tgt)
        self.src_ids, self.tgt_ids = drop_long_pairs(self.tokenizer.encode(src), self.tokenizer.encode(tgt),
                                                     cfg.data.max_len)
        self.val = make_validation(cfg, self.tokenizer)
        self.model = Seq2Seq(cfg.model, self.tokenizer.vocab_size).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.98),
                                          eps=1e-9, fused=True)
        self.scaler = torch.amp.GradScaler("cuda", enabled=cfg.train.precision == "fp16")
        self.metrics = open(run_dir / "metrics.jsonl", "w", encoding="utf-8")
        self.p = Progress()
        log.info("model: %d parameters; device %s; precision %s; threads %d", count_parameters(self.model),
                 self.device, cfg.train.precision, torch.get_num_threads())

    def _write_metrics(self, record: dict) -> None:
        self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()

    def _update(self, micro_batches: list[Batch]) -> None:
        """One optimizer step over `micro_batches`, loss normalised by their total target tokens."""
        t = self.cfg.train
        lr = inverse_sqrt_lr(self.p.step + 1, t.lr, t.warmup_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        ntokens = sum(b.ntokens for b in micro_batches)
        for batch in micro_batches:
            batch = batch.to(self.device)
            with _autocast(self.device, t.precision):
                loss, nll = batch_loss(self.model, batch, t.label_smoothing)
            self.scaler.scale(loss / ntokens).backward()
            w = self.p.window
            w["loss"], w["nll"] = w["loss"] + loss.item(), w["nll"] + nll.item()
            w["tgt"] += batch.ntokens
            w["tokens"] += batch.ntokens + int(batch.src_mask.sum())
        self.scaler.unscale_(self.optimizer)
        if t.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.p.step += 1

    def _log_train(self, bar: tqdm) -> None:
        w, p = self.p.window, self.p
        loss, nll = w["loss"] / w["tgt"], w["nll"] / w["tgt"]
        lr = self.optimizer.param_groups[0]["lr"]
        tok_s = w["tokens"] / max(w["seconds"], 1e-9)
        record = {"step": p.step, "epoch": p.epoch, "loss": round(loss, 4), "nll": round(nll, 4), "lr": lr,
                  "tokens_per_s": round(tok_s, 1), "elapsed_s": round(p.elapsed_s, 1)}
        self._write_metrics(record)
        log.info("step %d | epoch %d | loss %.3f | nll %.3f | ppl %.1f | lr %.2e | tok/s %.0f | elapsed %.0fs",
                 p.step, p.epoch, loss, nll, math.exp(min(nll, 50.0)), lr, tok_s, p.elapsed_s)
        budget = self.cfg.train.max_minutes * 60
        left = {"time_left": f"{max(budget - p.elapsed_s, 0) / 60:.1f}m"} if budget else {}
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.1e}", tok_s=f"{tok_s:.0f}", **left)
        p.window = dict(EMPTY_WINDOW)

    def _validate(self) -> None:
        p = self.p
        result = validate(self.model, self.val, self.tokenizer, self.cfg, self.device)
        self._write_metrics({"step": p.step, **{k: v for k, v in result.items() if k != "bleu_signature"},
                             "elapsed_s": round(p.elapsed_s, 1)})
        improved = result["val_bleu"] > p.best_bleu
        if improved:
            p.best_bleu, p.best_step, p.bad_validations = result["val_bleu"], p.step, 0
        else:
            p.bad_validations += 1
        log.info("validation step %d | loss %.3f | ppl %.2f | BLEU %.2f | chrF %.2f | best %.2f at %d | %s",
                 p.step, result["val_loss"], result["val_ppl"], result["val_bleu"], result["val_chrf"],
                 p.best_bleu, p.best_step, result["bleu_signature"])
        _save(self.run_dir / "last.pt", self.model, self.optimizer, self.cfg, p)
        if improved:
            _save(self.run_dir / "best.pt", self.model, self.optimizer, self.cfg, p)

    def _should_stop(self) -> str:
        t, p = self.cfg.train, self.p
        if p.step >= t.max_steps:
            return f"reached train.max_steps={t.max_steps}"
        if t.max_minutes and p.elapsed_s >= 60 * t.max_minutes:
            return f"reached train.max_minutes={t.max_minutes}"
        if t.patience and p.bad_validations >= t.patience:
            return f"no BLEU gain in {t.patience} validations (train.patience)"
        return ""

    def run(self) -> dict:
        t, p = self.cfg.train, self.p
        self.model.train()
        stop = ""
        loop_start = time.perf_counter()
        with logging_redirect_tqdm(), tqdm(total=t.max_steps, desc="train", unit="step", dynamic_ncols=True,
                                           disable=None) as bar:
            while not stop:
                p.epoch += 1
                batches = epoch_batches(self.src_ids, self.tgt_ids, t.max_tokens, t.seed, p.epoch)
                if p.epoch == 1:
                    log.info("epoch 1: %d batches, non-pad fraction %.3f", len(batches), fill_ratio(batches))
                for i in range(0, len(batches), t.accumulate):
                    start = time.perf_counter()
                    self._update(batches[i: i + t.accumulate])
                    elapsed = time.perf_counter() - start
                    p.window["seconds"] += elapsed
                    p.train_seconds += elapsed
                    p.elapsed_s = time.perf_counter() - loop_start
                    bar.update(1)
                    if p.step % t.log_every == 0:
                        self._log_train(bar)
                    if p.step % t.valid_every == 0:
                        self._validate()
                        p.elapsed_s = time.perf_counter() - loop_start
                    stop = self._should_stop()
                    if stop:
                        break
        if p.step % t.valid_every:
            self._validate()
        p.elapsed_s = time.perf_counter() - loop_start
        log.info("stopped at step %d (epoch %d): %s; best val BLEU %.2f at step %d; %.0fs wall, %.0fs in updates",
                 p.step, p.epoch, stop, p.best_bleu, p.best_step, p.elapsed_s, p.train_seconds)
        self.metrics.close()
        return {"step": p.step, "epoch": p.epoch, "best_bleu": p.best_bleu, "best_step": p.best_step,
                "train_seconds": p.train_seconds, "elapsed_s": p.elapsed_s}


def train(cfg: RunConfig, run_dir: str | Path) -> dict:
    return Trainer(cfg, Path(run_dir)).run()
