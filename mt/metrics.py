"""Corpus metrics: every score that evaluation, validation, the run card and `mt report` show, each
with its sacreBLEU signature, on sacreBLEU's 0-100 scale. A new metric is one entry in METRICS.

Each is scored on cased, detokenized text against one or more reference streams, line-aligned with
the hypotheses. A result stores KEY and KEY_signature for every metric; validation logs val_KEY and
`mt report` tests the significance of the headline ones only.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric as SacreMetric


class RepeatedNgrams:
    """The lines whose translation repeats a word n-gram ("the the the", a phrase repeated up to the
    length limit): degenerate output, counted so that nobody has to read for it. sacreBLEU's
    interface: `corpus_score(...).score` and `get_signature()`."""

    def __init__(self, n: int):
        self.n = n

    def corpus_score(self, hypotheses: list[str], references: list[list[str]]) -> SimpleNamespace:
        return SimpleNamespace(score=float(sum(repeats(line.split(), self.n) for line in hypotheses)))

    def get_signature(self) -> str:
        return f"lines|words|n:{self.n}"


def repeats(tokens: list, n: int) -> bool:
    """Whether some n-gram of `tokens` occurs twice."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


@dataclass(frozen=True)
class Metric:
    key: str  # the result's field (its signature: KEY_signature); validation logs val_KEY
    label: str  # how a report names it
    make: Callable[[], SacreMetric]  # a fresh sacreBLEU metric (they keep state), or one of its shape
    headline: bool = True  # validated, tested for significance in `mt report`, its own verdict
    note: str = ""  # what a report says beside a metric that is not a headline


METRICS = (
    Metric("bleu", "BLEU", BLEU),  # 13a tokenization: what WMT and the papers report
    Metric("chrf", "chrF", CHRF),
    # lower-cased BLEU, to set beside papers that report lower-cased scores
    Metric("bleu_lc", "BLEU lc", lambda: BLEU(lowercase=True), False, "lower-cased, not the headline"),
    Metric(
        "repeated_4grams",
        "rep. 4-gram lines",
        lambda: RepeatedNgrams(4),
        False,
        "lines that repeat a word 4-gram",
    ),
)
HEADLINE = tuple(m for m in METRICS if m.headline)


def corpus_scores(hypotheses: list[str], *references: list[str], metrics=METRICS) -> dict:
    """Each metric's corpus score and signature, the sentence count, and the length ratio
    (hypothesis / reference tokens, BLEU's count). Each of `references` is one reference stream."""
    scores, signatures, ratio = {}, {}, None
    for metric in metrics:
        scorer = metric.make()
        result = scorer.corpus_score(hypotheses, list(references))
        scores[metric.key] = result.score
        signatures[f"{metric.key}_signature"] = str(scorer.get_signature())
        if metric.key == "bleu":
            ratio = result.sys_len / max(result.ref_len, 1)
    return {**scores, **signatures, "sentences": len(hypotheses), "length_ratio": ratio}
