"""The decoding thread of `mt serve`: the one thread that calls the run's `Translator`. It takes the
queued jobs, merges those with the same decoding options into one `Translator.nbest` call (attention
jobs are never merged; each line keeps its own forced prefix) and hands each job its own lines'
results. Needs no web framework: mt.serving.app puts HTTP around it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import queue
import threading
import time
from typing import Callable, Hashable, NamedTuple

from mt.attention import alignment_json, attention_json
from mt.decode_config import DecodeConfig
from mt.serving.limits import ServeLimits
from mt.translator import Translator

log = logging.getLogger(__name__)


class Overloaded(Exception):  # the queue is full or the decoding thread has stopped: 503
    pass


class Translated(NamedTuple):
    """A line's result: its n-best list, best first, and the 1-best's word alignment when asked."""

    nbest: list[tuple[str, float]]  # (translation, score)
    alignment: str | None  # Pharaoh i-j pairs


@dataclasses.dataclass
class Job:
    """A request's lines and its work: `work(worker, lines, prefixes)` gives one result per line of all
    the jobs in its group. Jobs with one `merge_key` are computed in one call; None: never merged."""

    lines: list[str]
    work: Callable[[Worker, list[str], list[str]], list]
    merge_key: Hashable | None
    prefixes: list[str] | None = None  # a forced target prefix per line ("" for none)
    future: concurrent.futures.Future = dataclasses.field(default_factory=concurrent.futures.Future)

    @staticmethod
    def translate(
        lines: list[str], decode: DecodeConfig, prefixes: list[str] | None = None, alignments: bool = False
    ) -> Job:
        """n-best translations of the lines (`Translated`); merged with every translation with the same
        options, except samples: a line's draws are seeded by its index in its own request."""
        merge_key = None if decode.sample else ("translate", decode, alignments)
        work = lambda worker, group, forced: worker.translate(group, decode, forced, alignments)  # noqa: E731
        return Job(lines, work, merge_key, prefixes)

    @staticmethod
    def attention(lines: list[str], decode: DecodeConfig, index: int) -> Job:
        """The attention of lines[index] in a batch of all the lines: the batch is what the page shows,
        so it is never merged."""
        return Job(lines, lambda worker, group, _: worker.attention(group, decode, index), None)


class Worker:
    """The one thread that runs the model: takes queued jobs, merges the ones it can, answers each.

    `mt serve` runs it in the main thread (`run`), which also opened the run: torch's CPU thread
    pool then serves one thread only (decoding in a second thread beside a main thread that has used
    torch measured about half as fast here). Tests start it in a thread of its own (`start`)."""

    def __init__(self, translator: Translator, limits: ServeLimits):
        """`translator`: the opened run (any engine; attention and alignments read its torch model)."""
        self.translator, self.limits = translator, limits
        # unbounded: `submit` keeps to max_queue, `stop` never waits
        self.queue: queue.Queue[Job | None] = queue.Queue()
        self.running = threading.Event()
        self.batches = 0  # decoding calls made, for /health

    def start(self) -> None:  # running at once: a request may come before the thread gets going
        self.running.set()
        threading.Thread(target=self.run, name="mt-decoder", daemon=True).start()

    def stop(self) -> None:
        """Ask `run` to return after the round it is in (returns at once)."""
        if self.running.is_set():
            self.queue.put(None)

    def submit(self, job: Job) -> concurrent.futures.Future:
        if not self.running.is_set():
            raise Overloaded("the decoding thread has stopped; restart mt serve")
        if self.queue.qsize() >= self.limits.max_queue:  # one event loop submits: no race with another put
            raise Overloaded(
                f"the queue is full ({self.limits.max_queue} requests waiting, mt serve "
                f"--max-queue); retry later"
            )
        self.queue.put(job)
        return job.future

    def translate(
        self, lines: list[str], decode: DecodeConfig, prefixes: list[str], alignments: bool = False
    ) -> list[Translated]:
        options = dataclasses.asdict(decode)
        found = self.translator.nbest(lines, prefixes if any(prefixes) else None, **options)
        aligned = (
            self.translator.align(lines, [hyps[0][0] for hyps in found], **options)
            if alignments
            else [None] * len(lines)
        )
        return [Translated(hyps, alignment) for hyps, alignment in zip(found, aligned)]

    def attention(self, lines: list[str], decode: DecodeConfig, index: int) -> list:
        """[line index's attention and word alignment], as JSON here: torch stays in this thread."""
        t = self.translator
        with t.lock:
            found = t.attention(lines, **dataclasses.asdict(decode))[index]
            page = attention_json(found, t.model.cfg.n_heads)
            page["alignment"] = alignment_json(t.model, t.tokenizer, lines[index], found.translation)
        return [page]

    def _take(self) -> list[Job] | None:
        """The jobs of the next round, up to max_batch_lines: all waiting ones, and those that come
        less than max_wait_ms apart (10 * max_wait_ms at most in all); None to stop.

        Waiting for a gap rather than a fixed time lets requests that answered clients send at once
        join the round while the event loop is still taking them in. (Waiting longer, for as many as
        the last round answered, made fuller rounds but no more sentences/s: the decoder idled.)"""
        first = self.queue.get()
        if first is None:
            return None
        jobs, n = [first], len(first.lines)
        gap = self.limits.max_wait_ms / 1000
        last_call = time.monotonic() + 10 * gap
        while n < self.limits.max_batch_lines:
            try:
                job = self.queue.get(timeout=max(min(gap, last_call - time.monotonic()), 0))
            except queue.Empty:
                break
            if job is None:
                self.queue.put(None)  # stop after this round
                break
            jobs.append(job)
            n += len(job.lines)
        # a request whose client went away was cancelled: skip it; the others can no longer be cancelled
        return [job for job in jobs if job.future.set_running_or_notify_cancel()]

    def run(self) -> None:
        """Decode until `stop`."""
        self.running.set()
        try:
            while (jobs := self._take()) is not None:
                groups: dict[Hashable, list[Job]] = {}
                for job in jobs:
                    groups.setdefault(job.merge_key if job.merge_key is not None else id(job), []).append(job)
                for group in groups.values():
                    self._answer(group)
        finally:
            self.running.clear()
            while not self.queue.empty():  # nobody will decode these: answer them, not leave them hanging
                job = self.queue.get()
                if job is not None and job.future.set_running_or_notify_cancel():
                    job.future.set_exception(Overloaded("mt serve is stopping"))

    def _answer(self, group: list[Job]) -> None:
        try:
            lines = [line for job in group for line in job.lines]
            prefixes = [p for job in group for p in (job.prefixes or [""] * len(job.lines))]
            results = group[0].work(self, lines, prefixes)
            self.batches += 1
        except Exception as e:  # a bug: each waiting request gets a 500, the server goes on
            log.exception("decoding failed")
            for job in group:
                job.future.set_exception(e)
            return
        start = 0
        for job in group:
            job.future.set_result(results[start : start + len(job.lines)])
            start += len(job.lines)
