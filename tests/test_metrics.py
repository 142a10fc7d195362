"""mt/metrics.py: the one list of metrics, each scored with a signature."""

from mt.metrics import METRICS, corpus_scores


def test_every_metric_gives_a_score_and_a_signature():
    scores = corpus_scores(["the dog runs .", "a cat"], ["the dog runs .", "a cat sleeps"])
    assert set(scores) == {m.key for m in METRICS} | {f"{m.key}_signature" for m in METRICS} | {
        "sentences",
        "length_ratio",
    }
    assert scores["sentences"] == 2 and scores["length_ratio"] == 6 / 7  # 13a tokens: hypotheses / refs


def test_lines_that_repeat_a_word_4_gram_are_counted():
    hypotheses = ["a b c d a b c d", "a b c d e", "", "the the the the the", "a b c a b c"]
    scores = corpus_scores(hypotheses, ["x"] * 5)
    assert scores["repeated_4grams"] == 2.0 and scores["repeated_4grams_signature"] == "lines|words|n:4"
