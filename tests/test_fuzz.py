"""Fuzzing every reader (tests/fuzzing.py): damaged copies of valid files either work or are refused
with one line and exit code 2, never a traceback, and a refusal changes nothing in the run directory.

Two kinds of damage:
- structured, the same on every machine: each key of card.json, metrics.jsonl, config.yaml and the
  checkpoints' metadata dropped, renamed and given each other kind of value, and each file cut after
  each line;
- random bytes, drawn by hypothesis with a fixed seed (derandomized) and a bounded count per reader, on
  files whose bytes are the same on every machine (the workspace's measured values are pinned), so CI
  is repeatable; `pytest tests/test_fuzz.py --fuzz-long` (or MT_FUZZ_EXAMPLES=N) runs many more.
"""

import os
from unittest import mock

import pytest
from fuzzing import DAMAGE, READERS, STRUCTURED, damage, make_workspace
from hypothesis import HealthCheck, given, settings

from mt.report.curves import curve_points

EXAMPLES = int(os.environ.get("MT_FUZZ_EXAMPLES") or 25)


@pytest.fixture(scope="module")
def workspace(small_corpus, tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("fuzz"), small_corpus)


@pytest.mark.slow
@pytest.mark.parametrize("reader", list(READERS))
def test_a_damaged_file_is_read_or_refused_in_one_line(workspace, reader):
    valid, read = READERS[reader]
    original = valid(workspace)
    assert read(workspace, original).code == 0  # the undamaged file works: the damage is what is tested

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(DAMAGE)
    def check(ops):
        outcome = read(workspace, damage(original, ops))
        assert not outcome.problem(), f"{reader}: {outcome.problem()}"

    check()


@pytest.mark.slow
@pytest.mark.parametrize("reader", list(STRUCTURED))
def test_every_key_damaged_is_read_or_refused_in_one_line(workspace, reader):
    """`mt report` reads what it would plot but draws nothing here (drawing is 97% of its time and reads
    no field); the random damage above draws."""
    valid, read = READERS[reader]
    cases = STRUCTURED[reader](valid(workspace))
    with mock.patch("mt.report.markdown.plot_curves", lambda runs, path, groups=(): curve_points(runs)):
        outcomes = {what: read(workspace, data) for what, data in cases}
    failures = [f"{what}: {o.problem()}" for what, o in outcomes.items() if o.problem()]
    assert failures == [], f"{reader}: {len(failures)} of {len(cases)} cases: {failures[:5]}"
    refused = sum(o.code == 2 for o in outcomes.values())
    print(f"{reader}: {len(cases)} damaged files, {refused} refused, {len(cases) - refused} read")
