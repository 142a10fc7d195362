"""Setting up a training run: the `Session` the loop in mt.training.train works with (device, tokenizer,
corpus, model, optimizer, counters, files), built by `setup` with every input checked before the first
write to the run directory, from scratch or from the checkpoint `resume_checkpoint` found; and saving
it (`save`). Finishing it is mt.training.finish's."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch.nn.parallel import DistributedDataParallel

from mt import devices
from mt.batching import Pairs
from mt.config import RunConfig
from mt.data import load_split
from mt.model import Seq2Seq, count_parameters
from mt.output_pieces import target_pieces
from mt.plumbing.errors import WriteError
from mt.plumbing.metrics import HEADLINE
from mt.plumbing.seeds import derived_seed
from mt.run import checkpoint, folder
from mt.run.card import update_card
from mt.run.metrics_log import MetricsLog, tensorboard_writer
from mt.run.parent import Parent, parent_of, shared_tokenizer, teacher_of
from mt.run.progress import Progress
from mt.run.provenance import config_section
from mt.run.resume import Resumed, restore
from mt.tokenizer import Tokenizer
from mt.training import corpus, distributed
from mt.training.epochs import BatchStream
from mt.training.validation import Validation, make_validation

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class Session:
    """What the loop works with; `setup` builds it, `train` runs it, by keywords."""

    cfg: RunConfig
    run_dir: Path
    ranks: distributed.Ranks
    device: torch.device
    tokenizer: Tokenizer
    model: Seq2Seq  # the plain module: validation and checkpoints
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    progress: Progress
    stream: BatchStream
    val: Validation | None  # rank 0 only
    metrics: MetricsLog | None = None  # rank 0 only, from `first_writes`
    cleaning: dict | None = None  # rank 0 only: what binarizing kept and removed (corpus.cleaning_report)
    # what train_step runs: the model, or under torchrun its DDP wrapper (for training steps only:
    # validation and saving use the plain module)
    ddp: torch.nn.Module = field(init=False)

    def __post_init__(self):
        self.ddp = (
            DistributedDataParallel(self.model, broadcast_buffers=False) if self.ranks.enabled else self.model
        )


def new_tokenizer(
    cfg: RunConfig, run_dir: Path, parent: Parent | None, ranks: distributed.Ranks
) -> tuple[Tokenizer, int | None, dict]:
    """A new run's tokenizer, the pair count if BPE read the corpus, and its origin for the card: the
    parent's tokenizer (train.init_from), another run's (tokenizer.from_run), or joint BPE learned
    here with its settings for the script; and the teacher of a distilled corpus
    (mt.run.parent.teacher_of)."""
    teacher = teacher_of(cfg)
    if parent:
        return parent.tokenizer, None, {"parent": parent.record()} | teacher
    if cfg.tokenizer.from_run:
        tokenizer, source = shared_tokenizer(cfg, run_dir)
        return tokenizer, None, {"tokenizer_from": source} | teacher
    tokenizer, pairs, settings = joint_bpe(cfg, ranks)
    return tokenizer, pairs, {"tokenizer": settings} | teacher


def joint_bpe(cfg: RunConfig, ranks: distributed.Ranks) -> tuple[Tokenizer, int | None, dict]:
    """Learned once, on rank 0, so that every rank has the very same pieces; the pair count and the
    settings chosen for the script (rank 0; mt.plumbing.script.tokenizer_settings)."""

    def learned() -> tuple[bytes, int, dict]:
        tokenizer, pairs, settings = corpus.learn_tokenizer(cfg)
        return tokenizer.proto, pairs, settings

    proto, pairs, settings = distributed.made_by_main(learned, ranks, "learns the joint BPE")
    return Tokenizer(proto), pairs, settings


def training_corpus(
    cfg: RunConfig, tokenizer: Tokenizer, pairs: int | None, ranks: distributed.Ranks
) -> tuple[list[Pairs], list[Path]]:
    """Binarized (or checked) on rank 0, then memory-mapped by every rank: one copy in the page cache.
    One view, or with data.bpe_dropout data.bpe_views sampled ones (epoch e trains on view e mod n);
    and their folders (the views keep the same pairs)."""
    views = range(1, cfg.data.bpe_views + 1) if cfg.data.bpe_dropout else [0]
    folders = distributed.made_by_main(
        lambda: [corpus.prepare(cfg.data, tokenizer, pairs, v) for v in views],
        ranks,
        "binarizes the training corpus (or checks its cache)",
    )
    return [corpus.training_pairs(cfg.data, folder) for folder in folders], folders


def validation_lines(cfg: RunConfig, ranks: distributed.Ranks) -> tuple[list[str], list[str]] | None:
    """Rank 0's val split, and how its BLEU is scored, in the log: a BLEU tokenizer the config names
    that is not installed is refused here, before any write."""
    if not ranks.main:
        return None
    log.info("validation BLEU: sacreBLEU's %s tokenizer (eval.bleu_tokenize)", cfg.bleu_tokenize)
    return load_split(cfg.data, "val")


def best_so_far(p: Progress) -> str:
    if p.validated_step < 0:
        return "no validation yet"
    return f"best val {', '.join(f'{m.label} {p.best[m.key]:.2f}' for m in HEADLINE)} at step {p.best_step}"


def setup(
    cfg: RunConfig,
    run_dir: Path,
    force_new: bool,
    resumed: Resumed | None,
    ranks: distributed.Ranks,
    cleanup: contextlib.ExitStack,
) -> Session:
    """Build everything the loop needs, starting fresh or from `resumed` (`resume_checkpoint`).
    Every check on user input runs before the first write to run_dir (folder.open_run_dir); `cleanup`
    closes the files."""
    start_log = cleanup.enter_context(folder.run_log(logging.getLogger("mt"), ranks.main))
    log.info("run directory %s", run_dir)
    device = distributed.start_training(cfg.train, ranks)
    val_lines = validation_lines(cfg, ranks)
    parent = None if resumed else parent_of(cfg, run_dir)
    tokenizer, pairs, origin = (
        (resumed.tokenizer, None, {}) if resumed else new_tokenizer(cfg, run_dir, parent, ranks)
    )
    train_pairs, folders = training_corpus(cfg, tokenizer, pairs, ranks)
    model = new_model(cfg, tokenizer, resumed, parent, train_pairs)
    optimizer, scaler, progress = learner(cfg, model.to(device), device, resumed, ranks)
    s = Session(
        cfg=cfg,
        run_dir=run_dir,
        ranks=ranks,
        device=device,
        tokenizer=tokenizer,
        model=model,
        optimizer=optimizer,
        scaler=scaler,
        progress=progress,
        stream=BatchStream.training(train_pairs, cfg, device),
        val=make_validation(*val_lines, tokenizer, model, cfg.train.max_tokens) if ranks.main else None,
    )
    if ranks.main:  # the first write: the lock, then the run's files
        s.metrics, s.cleaning = first_writes(
            s, resumed is not None, force_new, start_log, cleanup, folders[0]
        )
        if origin:  # recorded at once: a run stopped by a crash still names what it came from
            update_card(run_dir, config=config_section(cfg), parameters=count_parameters(model), **origin)
    log_start(s, resumed is not None, parent)
    return s


def first_writes(
    s: Session,
    resumed: bool,
    force_new: bool,
    start_log: Callable[[Path], None],
    cleanup: contextlib.ExitStack,
    corpus_folder: Path,
) -> tuple[MetricsLog, dict]:
    """Rank 0's writes once every check has passed: the lock, the run's files (folder.open_run_dir) and
    the list of the training pairs data.clean removed, the previous run archived first where `force_new`;
    the metrics log and the cleaning report."""
    board = tensorboard_writer(s.cfg.train)  # refused before the lock if its extra is missing
    cleanup.enter_context(folder.locked(s.run_dir))
    if force_new:
        folder.archive_previous(s.run_dir)
    resume_step = s.progress.step if resumed else None
    metrics = folder.open_run_dir(s.run_dir, s.cfg, s.tokenizer, resume_step, start_log, board)
    cleanup.callback(metrics.close)
    return metrics, corpus.cleaning_report(corpus_folder, s.run_dir / "removed-pairs.tsv")


def log_start(s: Session, resumed: bool, parent: Parent | None) -> None:
    """The run's opening lines: where it resumes or starts from, and what trains on what."""
    p = s.progress
    if resumed:
        log.info(
            "resuming %s/last.pt: step %d, epoch %d (batch %d), %s",
            s.run_dir,
            p.step,
            p.epoch,
            p.batch_index,
            best_so_far(p),
        )
    elif parent:
        log.info(
            "starting from %s: its weights and tokenizer, a new optimizer and schedule", parent.checkpoint
        )
    log.info(
        "model: %d parameters; device %s; precision %s; threads %d; processes %d",
        count_parameters(s.model),
        s.device,
        devices.ran_precision(s.device, s.cfg.train.precision),
        torch.get_num_threads(),
        s.ranks.world,
    )


def new_model(
    cfg: RunConfig,
    tokenizer: Tokenizer,
    resumed: Resumed | None,
    parent: Parent | None,
    train_pairs: list[Pairs],
) -> Seq2Seq:
    """The model, on the CPU: random weights, the parent's, or (restored by `learner`) `resumed`'s, with
    train.freeze's parts frozen. With model.output_pieces: target the output layer's pieces are the
    training targets' (a resumed run's are its checkpoint's)."""
    pieces = None
    if cfg.model.output_pieces == "target":
        saved = resumed.ckpt["model"].get("output.ids") if resumed else None
        pieces = (
            saved if saved is not None else target_pieces([p.tgt for p in train_pairs], tokenizer.vocab_size)
        )
        log.info(
            "output layer: %d of %d pieces (the training targets' and the specials)",
            len(pieces),
            tokenizer.vocab_size,
        )
    model = Seq2Seq(cfg.model, tokenizer.vocab_size, pieces)
    if parent:  # the parent's weights; the output layer's pieces are this corpus's
        weights = {k: v for k, v in parent.ckpt["model"].items() if k != "output.ids"}
        model.load_state_dict(weights | ({"output.ids": model.output.ids} if model.output else {}))
    model.freeze(cfg.train.freeze)
    return model


def learner(
    cfg: RunConfig, model: Seq2Seq, device: torch.device, resumed: Resumed | None, ranks: distributed.Ranks
) -> tuple[torch.optim.Optimizer, torch.amp.GradScaler, Progress]:
    """Adam, the fp16 grad scaler and the counters for `model` (on `device`): new, or restored (the model's
    weights too) from `resumed`. Adam holds only the parameters train.freeze leaves to train."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=cfg.train.lr, betas=(0.9, 0.98), eps=1e-9, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.train.precision == "fp16")
    ran = devices.ran_precision(device, cfg.train.precision)
    if resumed:
        progress = restore(resumed.ckpt, model, optimizer, scaler, ranks.rank, device)
        progress.precision = distributed.precision_so_far(progress.precision, progress.step, ran)
        return optimizer, scaler, progress
    if ranks.enabled:
        torch.manual_seed(derived_seed(cfg.train.seed, ranks.rank))  # different dropout masks per rank
    return optimizer, scaler, Progress(precision=ran)


def save(s: Session, name: str) -> None:
    """Every rank calls this (its RNG state goes in); rank 0 writes."""
    rng = distributed.gather(checkpoint.rng_state(s.device), s.ranks)  # one per rank
    if s.ranks.main:
        try:
            checkpoint.save_checkpoint(s.run_dir / name, s, rng)
        except WriteError as e:  # no way to resume from here on: stop, saying so once
            raise WriteError(
                f"training stopped at step {s.progress.step}, its checkpoints as they were: {e}"
            ) from None


def write_metrics(s: Session, record: dict) -> None:
    if s.metrics is not None:
        s.metrics.write(record)
