"""Fuzzing every reader (tests/fuzzing.py): damaged copies of valid files either work or are refused
with one line and exit code 2, never a traceback, and a refusal changes nothing in the run directory.

Hypothesis draws the damage with a fixed seed (derandomized) and a bounded count per reader, so CI
is repeatable; `pytest tests/test_fuzz.py --fuzz-long` (or MT_FUZZ_EXAMPLES=N) runs many more.
"""
import os

import pytest
from hypothesis import HealthCheck, given, settings

from fuzzing import DAMAGE, READERS, damage, make_workspace

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

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(DAMAGE)
    def check(ops):
        outcome = read(workspace, damage(original, ops))
        assert not outcome.problem(), f"{reader}: {outcome.problem()}"

    check()
