"""Runs `mt` with a throwaway metric added to mt.plumbing.metrics before anything else reads the table, and
made the primary one: `words_off`, the mean per line of |hypothesis words - reference words|, lower
better. With CURVES set, also writes the report's curve points (mt.report.curves) of the runs given there.
Usage: tests/metric_driver.py COMMAND ARGS..."""

import json
import os
import sys

import numpy as np
from sacrebleu.metrics.base import Metric, Score, Signature

import mt.plumbing.metrics as metrics


class WordsOffSignature(Signature):
    def __init__(self, args: dict):
        super().__init__(args)
        self._abbr.update({"unit": "u"})
        self.info.update({"unit": "words"})


class WordsOff(Metric):
    """A sacreBLEU metric, so that `mt report`'s paired bootstrap resamples it as it does BLEU: each
    line's statistics are (|hypothesis words - reference words|, 1)."""

    _SIGNATURE_TYPE = WordsOffSignature

    def _preprocess_segment(self, sent: str) -> str:
        return sent

    def _extract_reference_info(self, refs) -> dict:
        return {"words": len(refs[0].split())}

    def _compute_segment_statistics(self, hypothesis: str, ref_kwargs: dict) -> list[int]:
        return [abs(len(hypothesis.split()) - ref_kwargs["words"]), 1]

    def _compute_score_from_stats(self, stats) -> Score:
        return Score("words off", stats[0] / max(stats[1], 1))

    def _aggregate_and_compute(self, stats) -> Score:
        return self._compute_score_from_stats(np.sum(stats, axis=0).tolist())


WORDS_OFF = metrics.Metric("words_off", "words off", lambda tokenize: WordsOff(), higher_is_better=False)
metrics.METRICS = (*metrics.METRICS, WORDS_OFF)
metrics.HEADLINE = (*metrics.HEADLINE, WORDS_OFF)
metrics.BY_KEY = {**metrics.BY_KEY, WORDS_OFF.key: WORDS_OFF}
metrics.BEST_METRICS = (*(m.key for m in metrics.HEADLINE), "loss")
metrics.PRIMARY = WORDS_OFF

from mt.cli import main  # noqa: E402

code = main(sys.argv[1:])
if os.environ.get("CURVES"):
    from mt.report.curves import curve_points
    from mt.report.runs import load_runs

    points = curve_points(load_runs(json.loads(os.environ["CURVES"])))
    with open(os.environ["CURVES_OUT"], "w") as out:
        json.dump([panels[1, 0] for _, panels in points], out)
sys.exit(code)
