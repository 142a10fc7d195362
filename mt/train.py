"""Training: label-smoothed loss, inverse-sqrt warmup, and one plain loop with validation.

`train(cfg, run_dir)` does everything a run needs and writes it into `run_dir`: config.yaml, spm.model,
train.log (set up by the CLI), metrics.jsonl, last.pt and best.pt (by validation BLEU).

Resume is exact: last.pt holds the model, optimizer, grad scaler, every counter, the position in the
epoch's seeded batch order and all RNG states, so stopping and re-running the same command gives the
same parameters and the same metrics as an uninterrupted run. Ctrl-C and SIGTERM checkpoint first.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from mt import distributed
from mt.card import code_version, config_section, hardware, update_card
from mt.checkpoint import atomic_save, load_checkpoint
from mt.config import ConfigError, RunConfig, config_differences, config_to_dict, save_config
from mt.data import Batch, drop_long_pairs, epoch_batches, fill_ratio, load_split, make_batch, token_batches
from mt.evaluate import score, translate_lines
from mt.model import Seq2Seq, count_parameters
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

# Keys a resumed run may change: they decide when to stop, log, save or validate, not what is learned.
RESUMABLE_KEYS = ("name", "base", "train.max_steps", "train.max_minutes", "train.patience", "train.valid_every",
                  "train.save_every", "train.log_every", "train.max_nonfinite", "train.threads",
                  "train.device", "train.dist_backend", "decode")


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss keeps diverging); the last good checkpoint is kept."""


@dataclass
class Progress:
    """Counters of the running training loop: all of it goes into every checkpoint."""
    step: int = 0                # optimizer updates done
    epoch: int = 0               # current epoch, from 1
    batch_index: int = 0         # batches of the current epoch consumed so far
    best_bleu: float = -1.0
    best_chrf: float = -1.0      # chrF at the best-BLEU validation
    best_step: int = 0
    bad_validations: int = 0     # validations in a row without a BLEU gain (train.patience)
    validated_step: int = -1     # step of the latest validation
    nonfinite_total: int = 0     # updates skipped for a non-finite loss or gradient
    nonfinite_streak: int = 0
    window: dict = field(default_factory=lambda: dict(EMPTY_WINDOW))  # sums since the last log line
    tokens: int = 0              # source + target non-pad tokens trained on
    train_seconds: float = 0.0   # inside optimizer updates only (for tokens/s)
    elapsed_s: float = 0.0       # wall clock of the loop, validation included, summed over restarts


def _setup(cfg: RunConfig, ranks: distributed.Ranks) -> torch.device:
    """Seed, threads, and this rank's device (joining the process group under torchrun)."""
    random.seed(cfg.train.seed)
    torch.manual_seed(cfg.train.seed)  # the same initial weights on every rank
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    if cfg.train.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: cuda requested but no GPU is visible; use auto or cpu")
    device = distributed.start(ranks, cfg.train.device, cfg.train.dist_backend)
    if cfg.train.precision == "fp16" and device.type != "cuda":
        raise ConfigError("train.precision: fp16 needs a CUDA device; use bf16 or fp32 on CPU")
    return device


def rng_state() -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _resume_point(cfg: RunConfig, run_dir: Path, force_new: bool, ranks: distributed.Ranks) -> dict | None:
    """The checkpoint to resume from (None = start fresh), refusing one from a different config."""
    path = run_dir / "last.pt"
    if not path.exists():
        return None
    if force_new:
        if ranks.main:
            _archive(run_dir)
        return None
    ckpt = load_checkpoint(path)
    if "progress" not in ckpt:
        raise ConfigError(f"{path}: written by an older mt without resume state; use another --run-dir "
                          f"or --force-new")
    diff = config_differences(ckpt["config"], config_to_dict(cfg), ignore=RESUMABLE_KEYS)
    if diff:
        changes = ", ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in ((k, *v) for k, v in diff.items()))
        raise ConfigError(f"{run_dir} holds a run with a different config ({changes}); resume with the same "
                          f"config, use another --run-dir, or --force-new to start over")
    return ckpt


def _archive(run_dir: Path) -> None:
    """--force-new: move the previous run's files into DIR/replaced-<time>/ rather than delete them."""
    dest = run_dir / time.strftime("replaced-%Y%m%d-%H%M%S")
    dest.mkdir()
    for pattern in ("last.pt", "best.pt", "spm.model", "config.yaml", "metrics.jsonl", "card.json",
                    "eval-*.json", "hyp-*.txt"):
        for path in run_dir.glob(pattern):
            path.rename(dest / path.name)
    log.info("--force-new: moved the previous run's files to %s", dest)


def _keep_metrics_until(path: Path, step: int) -> None:
    """Drop metrics written after the checkpoint we resume from (and a half-written last line)."""
    kept = []
    for line in path.read_text(encoding="utf-8").split("\n") if path.exists() else []:
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line + "\n")
        except (ValueError, KeyError, TypeError):
            continue
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(kept), encoding="utf-8")
    os.replace(tmp, path)


@contextlib.contextmanager
def stop_requests():
    """While active, Ctrl-C and SIGTERM only record their name in the yielded list, so the loop can
    finish its update, checkpoint and return. A second Ctrl-C interrupts at once (the default)."""
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum, frame):
        received.append(signal.Signals(signum).name)
        signal.signal(signum, previous[signum])

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class Trainer:
    """Holds what the loop needs; `run()` is the loop. Starts fresh, or resumes `run_dir/last.pt`.

    Under torchrun every rank runs this; rank 0 alone writes files and validates (the others wait),
    each rank trains on its share of every update's batches, and DDP averages the gradients."""

    def __init__(self, cfg: RunConfig, run_dir: Path, force_new: bool = False):
        self.cfg, self.run_dir = cfg, run_dir
        self.ranks = ranks = distributed.ranks_from_env()
        self.device = _setup(cfg, ranks)
        # everything that can fail on user input happens before anything in run_dir is written
        ckpt = _resume_point(cfg, run_dir, force_new, ranks)
        src, tgt = load_split(cfg.data, "train")
        if ckpt is not None:
            self.tokenizer = self._resumed_tokenizer(ckpt)
        else:  # trained once, on rank 0, so that every rank has the very same pieces
            proto = train_tokenizer(src + tgt, cfg.tokenizer.vocab_size,
                                    cfg.tokenizer.character_coverage).proto if ranks.main else None
            self.tokenizer = Tokenizer(distributed.from_main(proto, ranks))
        self.src_ids, self.tgt_ids = drop_long_pairs(self.tokenizer.encode(src), self.tokenizer.encode(tgt),
                                                     cfg.data.max_len)
        self.val = make_validation(cfg, self.tokenizer) if ranks.main else None
        self.model = Seq2Seq(cfg.model, self.tokenizer.vocab_size).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.98),
                                          eps=1e-9, fused=True)
        self.scaler = torch.amp.GradScaler("cuda", enabled=cfg.train.precision == "fp16")
        self.p = Progress()
        self.batches: list[Batch] | None = None
        self.metrics = None
        if ranks.main:
            run_dir.mkdir(parents=True, exist_ok=True)
            save_config(cfg, run_dir / "config.yaml")
        if ckpt is None:
            if ranks.enabled:
                torch.manual_seed(cfg.train.seed + 1000 * ranks.rank)  # different dropout masks per rank
            if ranks.main:
                self.tokenizer.save(run_dir / "spm.model")
                log.info("trained joint BPE on %d lines: %d pieces -> %s", len(src) + len(tgt),
                         self.tokenizer.vocab_size, run_dir / "spm.model")
        else:
            self._restore(ckpt)
        if ranks.main:
            self.metrics = open(run_dir / "metrics.jsonl", "a" if ckpt else "w", encoding="utf-8")
        # DDP wraps the model for training steps only; validation and saving use the plain module
        self.ddp = DistributedDataParallel(self.model, forward_sync_buffers=False) if ranks.enabled else self.model
        log.info("model: %d parameters; device %s; precision %s; threads %d; processes %d",
                 count_parameters(self.model), self.device, cfg.train.precision, torch.get_num_threads(),
                 ranks.world)

    def _resumed_tokenizer(self, ckpt: dict) -> Tokenizer:
        path = self.run_dir / "spm.model"
        if not path.is_file():
            raise ConfigError(f"{path}: missing, so {self.run_dir}/last.pt cannot be resumed; restore it or "
                              f"use --force-new")
        tokenizer = load_tokenizer(path)
        if tokenizer.vocab_size != ckpt["vocab_size"]:
            raise ConfigError(f"{path} has {tokenizer.vocab_size} pieces but last.pt expects "
                              f"{ckpt['vocab_size']}; the run directory is inconsistent")
        return tokenizer

    def _restore(self, ckpt: dict) -> None:
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scaler.load_state_dict(ckpt["scaler"])
        self.p = Progress(**ckpt["progress"])
        states = ckpt["rng"]
        if len(states) != self.ranks.world:
            raise ConfigError(f"{self.run_dir}/last.pt was written by {len(states)} processes, not "
                              f"{self.ranks.world}; resume with the same number for an exact resume")
        set_rng_state(states[self.ranks.rank])
        if self.ranks.main:
            _keep_metrics_until(self.run_dir / "metrics.jsonl", self.p.step)
        log.info("resuming %s/last.pt: step %d, epoch %d (batch %d), best val BLEU %.2f at step %d",
                 self.run_dir, self.p.step, self.p.epoch, self.p.batch_index, self.p.best_bleu, self.p.best_step)

    def _save(self, name: str) -> None:
        """Every rank calls this (its RNG state goes in); rank 0 writes."""
        states = distributed.gather(rng_state(), self.ranks)  # one per rank
        if self.ranks.main:
            atomic_save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                         "scaler": self.scaler.state_dict(), "config": config_to_dict(self.cfg),
                         "vocab_size": self.model.vocab_size, "progress": dataclasses.asdict(self.p),
                         "rng": states}, self.run_dir / name)

    def _write_metrics(self, record: dict) -> None:
        if self.metrics is not None:
            self.metrics.write(json.dumps(record) + "\n")
            self.metrics.flush()

    def _next_batches(self) -> list[Batch]:
        """The next `accumulate` x processes batches of the seeded epoch order (the same on every rank),
        moving to a new epoch at its end."""
        t, p = self.cfg.train, self.p
        if p.epoch == 0:
            p.epoch = 1
        if self.batches is None:
            self.batches = epoch_batches(self.src_ids, self.tgt_ids, t.max_tokens, t.seed, p.epoch)
        if p.batch_index >= len(self.batches):
            p.epoch, p.batch_index = p.epoch + 1, 0
            self.batches = epoch_batches(self.src_ids, self.tgt_ids, t.max_tokens, t.seed, p.epoch)
        if p.epoch == 1 and p.batch_index == 0:
            log.info("epoch 1: %d batches, non-pad fraction %.3f", len(self.batches), fill_ratio(self.batches))
        group = self.batches[p.batch_index: p.batch_index + t.accumulate * self.ranks.world]
        p.batch_index += len(group)
        return group

    def _update(self, group: list[Batch], requests: list[str]) -> tuple[bool, bool]:
        """One optimizer step over `group`, the loss normalised by its total target tokens. Each rank
        backpropagates its share (every world-th batch); DDP sums the shares' gradients once, on the
        last micro-batch, and divides by the number of ranks, which the loss scale undoes.

        Returns (stepped, stop): no step when the loss or the gradient is not finite; stop when any
        rank got Ctrl-C or SIGTERM (all ranks stop at the same step)."""
        t, world = self.cfg.train, self.ranks.world
        lr = inverse_sqrt_lr(self.p.step + 1, t.lr, t.warmup_steps)  # the schedule is a function of step
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = lr
        ntokens = sum(b.ntokens for b in group)
        mine = group[self.ranks.rank::world]
        weight = world / ntokens
        if not mine:  # the epoch's last group has fewer batches than ranks: join the gradient sync with zero
            mine, weight = group[:1], 0.0
        sums = dict(EMPTY_WINDOW)
        for i, batch in enumerate(mine):
            batch = batch.to(self.device)
            last = i == len(mine) - 1
            with _autocast(self.device, t.precision), \
                    (contextlib.nullcontext() if last or not self.ranks.enabled else self.ddp.no_sync()):
                loss, nll = batch_loss(self.ddp, batch, t.label_smoothing)
                self.scaler.scale(loss * weight).backward()
            if weight:
                sums["loss"], sums["nll"] = sums["loss"] + loss.item(), sums["nll"] + nll.item()
                sums["tgt"] += batch.ntokens
                sums["tokens"] += batch.ntokens + int(batch.src_mask.sum())
        keys = ("loss", "nll", "tgt", "tokens")
        *totals, stops = distributed.sum_across([sums[k] for k in keys] + [float(bool(requests))], self.ranks,
                                                self.device)
        sums.update(zip(keys, totals))
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm or math.inf)
        # with fp16 the grad scaler itself skips steps whose gradients overflow
        finite = math.isfinite(sums["loss"]) and (self.scaler.is_enabled() or math.isfinite(norm.item()))
        if finite:
            self.scaler.step(self.optimizer)
            self.p.step += 1
            self.p.nonfinite_streak = 0
            for key in ("loss", "nll", "tgt", "tokens"):
                self.p.window[key] += sums[key]
            self.p.tokens += int(sums["tokens"])
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if not finite:
            self._skip_update(sums["loss"])
        return finite, stops > 0

    def _skip_update(self, loss: float) -> None:
        t, p = self.cfg.train, self.p
        p.nonfinite_total += 1
        p.nonfinite_streak += 1
        log.warning("non-finite loss or gradient (loss %s) after step %d: update skipped (%d so far, %d in a row)",
                    loss, p.step, p.nonfinite_total, p.nonfinite_streak)
        self._write_metrics({"step": p.step, "skipped_update": "non-finite", "nonfinite_total": p.nonfinite_total})
        if p.nonfinite_streak >= t.max_nonfinite:
            raise TrainingError(f"the loss was not finite in {p.nonfinite_streak} updates in a row after step "
                                f"{p.step} (train.max_nonfinite); {self.run_dir}/last.pt is untouched; lower "
                                f"train.lr or check the data")

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
        """Rank 0 validates (the others wait for its verdict), then every rank saves."""
        p = self.p
        improved = False
        if self.ranks.main:
            result = validate(self.model, self.val, self.tokenizer, self.cfg, self.device)
            self._write_metrics({"step": p.step, **{k: v for k, v in result.items() if k != "bleu_signature"},
                                 "elapsed_s": round(p.elapsed_s, 1)})
            improved = result["val_bleu"] > p.best_bleu
            if improved:
                p.best_bleu, p.best_chrf, p.best_step = result["val_bleu"], result["val_chrf"], p.step
                p.bad_validations = 0
            else:
                p.bad_validations += 1
            log.info("validation step %d | loss %.3f | ppl %.2f | BLEU %.2f | chrF %.2f | best %.2f at %d | %s",
                     p.step, result["val_loss"], result["val_ppl"], result["val_bleu"], result["val_chrf"],
                     p.best_bleu, p.best_step, result["bleu_signature"])
        improved, p.best_bleu, p.best_chrf, p.best_step, p.bad_validations = distributed.from_main(
            (improved, p.best_bleu, p.best_chrf, p.best_step, p.bad_validations), self.ranks)
        p.validated_step = p.step
        self._save("last.pt")
        if improved:
            self._save("best.pt")

    def _should_stop(self) -> str:
        t, p = self.cfg.train, self.p
        if p.step >= t.max_steps:
            return f"reached train.max_steps={t.max_steps}"
        if t.max_minutes and p.elapsed_s >= 60 * t.max_minutes:
            return f"reached train.max_minutes={t.max_minutes}"
        if t.patience and p.bad_validations >= t.patience:
            return f"no BLEU gain in {t.patience} validations (train.patience)"
        return ""

    def _after_update(self, bar: tqdm, clock_start: float) -> None:
        t, p = self.cfg.train, self.p
        # rank 0's clock decides max_minutes for every rank, so that all stop at the same step
        p.elapsed_s = distributed.from_main(time.perf_counter() - clock_start, self.ranks) \
            if t.max_minutes and self.ranks.enabled else time.perf_counter() - clock_start
        bar.update(1)
        if p.step % t.log_every == 0:
            self._log_train(bar)
        if p.step % t.valid_every == 0:
            self._validate()
            p.elapsed_s = time.perf_counter() - clock_start
        elif t.save_every and p.step % t.save_every == 0:
            self._save("last.pt")

    def run(self) -> dict:
        """Train until a stop condition or a stop request; returns a summary (`interrupted`: signal name)."""
        t, p = self.cfg.train, self.p
        self.ddp.train()
        stop, interrupted = self._should_stop(), ""
        clock_start = time.perf_counter() - p.elapsed_s
        with stop_requests() as requests, logging_redirect_tqdm(), \
                tqdm(total=t.max_steps, initial=p.step, desc="train", unit="step", dynamic_ncols=True,
                     disable=None if self.ranks.main else True) as bar:
            while not stop and not interrupted:
                start = time.perf_counter()
                with distributed.peers_lost():
                    updated, stop_requested = self._update(self._next_batches(), requests)
                elapsed = time.perf_counter() - start
                p.window["seconds"] += elapsed
                p.train_seconds += elapsed
                if updated:
                    self._after_update(bar, clock_start)
                if stop_requested:  # here or on another rank
                    interrupted = requests[0] if requests else "SIGTERM"
                stop = self._should_stop()
            if interrupted:
                self._save("last.pt")
                log.info("%s at step %d: saved %s/last.pt; run the same command again to resume",
                         interrupted, p.step, self.run_dir)
            elif p.validated_step != p.step:
                self._validate()
        p.elapsed_s = time.perf_counter() - clock_start
        if not interrupted:
            log.info("stopped at step %d (epoch %d): %s; best val BLEU %.2f at step %d; %.0fs wall, %.0fs in "
                     "updates", p.step, p.epoch, stop, p.best_bleu, p.best_step, p.elapsed_s, p.train_seconds)
        if self.ranks.main:
            self.metrics.close()
            self._write_card(stop, interrupted)
        return {"step": p.step, "epoch": p.epoch, "best_bleu": p.best_bleu, "best_step": p.best_step,
                "train_seconds": p.train_seconds, "elapsed_s": p.elapsed_s, "interrupted": interrupted,
                "stopped": stop}

    def _write_card(self, stop: str, interrupted: str) -> None:
        p = self.p
        tokens_per_s = p.tokens / max(p.train_seconds, 1e-9)
        training = {"steps": p.step, "epochs": p.epoch, "wall_s": round(p.elapsed_s, 1),
                    "train_s": round(p.train_seconds, 1), "tokens_per_s": round(tokens_per_s, 1),
                    "best_step": p.best_step, "best_val_bleu": p.best_bleu, "best_val_chrf": p.best_chrf,
                    "nonfinite_skipped": p.nonfinite_total, "stopped": interrupted or stop}
        update_card(self.run_dir, config=config_section(self.cfg), parameters=count_parameters(self.model),
                    precision=self.cfg.train.precision, code=code_version(),
                    hardware=hardware(self.device, self.ranks.world),
                    training=training)


def train(cfg: RunConfig, run_dir: str | Path, force_new: bool = False) -> dict:
    """Train (or resume) a run; under torchrun, every rank calls this."""
    try:
        return Trainer(cfg, Path(run_dir), force_new).run()
    finally:
        distributed.stop()
