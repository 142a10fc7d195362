"""Where a training process runs: under torchrun who it is, its device, the process group, and the few
collectives the training loop needs; what a resumed run's updates ran in; and how it is asked to stop
(Ctrl-C, SIGTERM). The device and precision settings themselves are the core's (mt.devices).

`torchrun --nproc_per_node N -m mt train CONFIG` starts N copies of `mt train`; torchrun's RANK,
WORLD_SIZE and LOCAL_RANK tell each which it is. Without torchrun, WORLD_SIZE is absent and every
helper here is a no-op for a single process, so the training loop has one code path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import signal
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from mt.config import TrainConfig, check_precision
from mt.devices import set_precision
from mt.plumbing.errors import ConfigError

log = logging.getLogger(__name__)

TIMEOUT = timedelta(minutes=10)  # longest a rank waits for the others (rank 0 validates meanwhile)
PREPARING = timedelta(days=1)  # longest a rank waits for rank 0's BPE and binarizing (as long as the corpus)
_waiting: list = []  # the process group with PREPARING's timeout, made beside the default one


class RankFailure(RuntimeError):
    """Another rank stopped answering (it failed or was killed); this one gives up too."""


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0 writes logs, metrics, checkpoints and the card, and validates."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def ranks_from_env() -> Ranks:
    env = os.environ
    return Ranks(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)))


def precision_so_far(before: str, step: int, ran: str) -> str:
    """What a resumed run's updates run in (Progress.precision), `ran` from here on: a resume whose device
    decides train.precision: auto otherwise (bf16 on a CPU with it natively, fp32 on one without) goes on
    in `ran`, and says so. `before` is what its `step` updates ran in ("" in checkpoints before issue 83)."""
    last = before.rsplit("then ", 1)[-1]  # "fp32 to step 1500, then bf16" -> "bf16"
    if not before or last == ran:
        return before or ran
    log.warning(
        "the updates so far ran in %s; this device runs train.precision %s: updates from step %d run in %s, "
        "so this run is the model of neither precision (--set train.precision=%s keeps one)",
        last,
        ran,
        step + 1,
        ran,
        last,
    )
    return f"{before} to step {step}, then {ran}"


def start(ranks: Ranks, device: str, backend: str) -> torch.device:
    """Pick this rank's device and join the process group (NCCL on CUDA, gloo on CPU by default)."""
    gpus = torch.cuda.device_count()
    use_cuda = device == "cuda" or (device == "auto" and gpus > 0)
    if backend == "nccl" and gpus == 0:
        raise ConfigError("train.dist_backend: nccl needs CUDA GPUs and none is visible; use gloo (or auto)")
    if backend == "nccl" and not use_cuda:
        raise ConfigError("train.dist_backend: nccl needs train.device cuda (or auto on a GPU machine)")
    if use_cuda and ranks.local_rank >= gpus:
        raise ConfigError(
            f"torchrun started more processes on this node than there are GPUs ({gpus} visible, "
            f"local rank {ranks.local_rank}); use --nproc_per_node {gpus} or fewer"
        )
    target = torch.device("cuda", ranks.local_rank) if use_cuda else torch.device("cpu")
    if ranks.enabled and not dist.is_initialized():
        if use_cuda:
            torch.cuda.set_device(target)
        chosen = backend if backend != "auto" else ("nccl" if use_cuda else "gloo")
        dist.init_process_group(chosen, timeout=TIMEOUT, device_id=target if chosen == "nccl" else None)
        _waiting[:] = [dist.new_group(backend="gloo", timeout=PREPARING)]
    return target


def stop(together: bool = False) -> None:
    """End the process group. `together` (a run that ended normally): every rank waits for the others
    first, so that none tears its connections down while another still uses them (a rank that left
    early was once aborted by gloo at exit: "terminate called without an active exception")."""
    if dist.is_initialized():
        if together:
            dist.barrier()
        dist.destroy_process_group()


COMMUNICATION_ERRORS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "NCCL",
    "timed out",
    "Timed out",
)


@contextlib.contextmanager
def peers_lost():
    """Turn the error a rank gets when another rank died mid-collective (DDP's gradient all-reduce
    included) into a RankFailure, so that it exits with one line instead of a traceback."""
    try:
        yield
    except (RuntimeError, ConnectionError) as e:
        if not dist.is_initialized() or not (
            isinstance(e, dist.DistError) or any(s in str(e) for s in COMMUNICATION_ERRORS)
        ):
            raise
        first = re.sub(r"^\[[^\]]*\] ", "", str(e).strip().splitlines()[0])[:160]
        raise RankFailure(
            f"lost contact with the other processes ({first}); another rank probably failed: "
            f"see its error above"
        ) from None


def _collective(fn, *args, **kwargs):
    with peers_lost():
        return fn(*args, **kwargs)


def all_sum(t: torch.Tensor, ranks: Ranks) -> torch.Tensor:
    """`t` summed element-wise over all ranks, on its device (no host round trip)."""
    if ranks.enabled:
        _collective(dist.all_reduce, t)
    return t


def from_main(obj: Any, ranks: Ranks) -> Any:
    """Rank 0's `obj` on every rank."""
    if not ranks.enabled:
        return obj
    box = [obj]
    _collective(dist.broadcast_object_list, box, src=0)
    return box[0]


def made_by_main(make: Callable[[], Any], ranks: Ranks, what: str) -> Any:
    """make() run on rank 0 alone, its result on every rank: the others wait up to PREPARING (learning
    the BPE and binarizing take as long as the corpus is big) and say so; if rank 0 fails, they say
    that and stop, as it does."""
    if not ranks.enabled:
        return make()
    box: list = [None]
    if ranks.main:
        try:
            box = [("made", make())]
        except BaseException as e:
            box = [("failed", str(e) or type(e).__name__)]
            _collective(dist.broadcast_object_list, box, src=0, group=_waiting[0])
            raise
    else:
        log.warning("rank %d waits while rank 0 %s", ranks.rank, what)
    _collective(dist.broadcast_object_list, box, src=0, group=_waiting[0])
    outcome, value = box[0]
    if outcome == "failed":
        raise RankFailure(f"rank 0 failed while it {what}: {value}")
    return value


def gather(obj: Any, ranks: Ranks) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    if not ranks.enabled:
        return [obj]
    out: list[Any] = [None] * ranks.world
    _collective(dist.all_gather_object, out, obj)
    return out


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


def start_training(t: TrainConfig, ranks: Ranks) -> torch.device:
    """Seed, threads, and this rank's device (joining the process group under torchrun), with its
    precision checked and set."""
    random.seed(t.seed)
    torch.manual_seed(t.seed)  # the same initial weights on every rank
    if t.threads:
        torch.set_num_threads(t.threads)
    if t.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: cuda requested but no GPU is visible; use auto or cpu")
    device = start(ranks, t.device, t.dist_backend)
    check_precision(t.precision, device.type)
    set_precision(device, t.precision)
    return device
