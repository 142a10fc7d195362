"""mt/serving/worker.py: `mt serve`'s decoding thread driven directly: waiting requests merged into one batch
and answered in order, other options decoded apart, a request whose client went away skipped."""

import dataclasses

import pytest
from conftest import ODD, expected, make_worker

from mt.serving.limits import ServeLimits
from mt.serving.worker import Job, Worker
from mt.translator import Translator


def test_waiting_requests_are_merged_into_one_batch_and_answered_in_order(served):
    worker = make_worker(served)
    requests = [ODD[i % 3 : i % 3 + 1 + i % 2] + [f"Der Hund {i} ."] for i in range(12)]
    jobs = [Job.translate(lines, served[1].decode) for lines in requests]
    for job in jobs:  # queued before the worker starts: its first round takes them all
        worker.queue.put(job)
    worker.start()
    got = [job.future.result(timeout=60) for job in jobs]
    worker.stop()
    assert worker.batches == 1
    for found, want in zip(
        got, (expected(served, lines) for lines in requests)
    ):  # other batches: other padding
        assert [line.alignment for line in found] == [None] * len(found)
        found = [line.nbest for line in found]
        assert [[text for text, _ in hyps] for hyps in found] == [[text for text, _ in hyps] for hyps in want]
        assert [s for hyps in found for _, s in hyps] == pytest.approx(
            [s for hyps in want for _, s in hyps], abs=1e-4
        )


def test_requests_with_other_options_are_decoded_apart(served):
    worker = make_worker(served)
    greedy = Job.translate(["Der Hund ."], served[1].decode)
    beam = Job.translate(["Der Hund ."], dataclasses.replace(served[1].decode, beam=2, n_best=2))
    worker.queue.put(greedy), worker.queue.put(beam)
    worker.start()
    assert greedy.future.result(timeout=60)[0].nbest == expected(served, ["Der Hund ."])[0]
    assert beam.future.result(timeout=60)[0].nbest == expected(served, ["Der Hund ."], beam=2, n_best=2)[0]
    worker.stop()
    assert worker.batches == 2


def test_a_request_whose_client_went_away_is_skipped_and_the_worker_goes_on(served):
    worker = make_worker(served)
    gone, kept = (Job.translate([line], served[1].decode) for line in ("a", "b"))
    worker.queue.put(gone), worker.queue.put(kept)
    assert gone.future.cancel()  # what asyncio does to it when the client disconnects
    worker.start()
    assert kept.future.result(timeout=60)[0].nbest == expected(served, ["b"])[0]
    assert worker.running.is_set() and worker.batches == 1
    worker.stop()


def test_merged_requests_keep_each_lines_own_prefix(served):
    worker = make_worker(served)
    requests = [
        (["Der Hund .", "Die Katze ."], ["a cat", ""]),
        (["Der Mann ."], None),
        (["Der Hund ."], ["the man"]),
    ]
    jobs = [Job.translate(lines, served[1].decode, prefixes) for lines, prefixes in requests]
    for job in jobs:
        worker.queue.put(job)
    worker.start()
    got = [[line.nbest[0][0] for line in job.future.result(timeout=60)] for job in jobs]
    worker.stop()
    assert worker.batches == 1
    assert got == [[hyps[0][0] for hyps in expected(served, lines, prefixes)] for lines, prefixes in requests]
    assert got[0][0].startswith("a cat") and got[2][0].startswith("the man")


def test_an_ensemble_of_the_model_with_itself_serves_what_the_model_does(served):
    run, cfg, tokenizer, model = served
    worker = Worker(Translator.from_run(run, device="cpu", ensemble=[str(run)]), ServeLimits())
    job = Job.translate(ODD + ["Der Hund ."], dataclasses.replace(cfg.decode, beam=2, n_best=2))
    worker.queue.put(job)
    worker.start()
    found = job.future.result(timeout=60)
    worker.stop()
    want = expected(served, ODD + ["Der Hund ."], beam=2, n_best=2)
    assert [[text for text, _ in line.nbest] for line in found] == [
        [text for text, _ in hyps] for hyps in want
    ]
