"""Greedy decoding on the cache, batching of lines, and the sacreBLEU wrapper.

Decoding tests run on two models (the `any_model` fixture): a random one, whose hypotheses all run to
the length limit, and a trained one, whose hypotheses end with eos at different steps."""

import pytest

from mt.config import DecodeConfig
from mt.batching import source_batch
from mt.decode import greedy_decode
from mt.translate import score, split_pieces, translate_lines


def test_cached_and_uncached_greedy_are_identical(any_model, tokenizer, toy):
    src, mask = source_batch(tokenizer.encode(toy["test"][0][:8]))
    cached = greedy_decode(any_model, src, mask, 1.0, 5, use_cache=True)
    uncached = greedy_decode(any_model, src, mask, 1.0, 5, use_cache=False)
    assert [h.tokens for h in cached] == [h.tokens for h in uncached]
    assert [h.logprob for h in cached] == pytest.approx([h.logprob for h in uncached], abs=1e-4)
    assert all(len(h.tokens) <= length + 5 for h, length in zip(cached, mask.sum(1).tolist()))


def test_greedy_one_by_one_equals_batched(any_model, tokenizer, toy):
    ids = tokenizer.encode(toy["test"][0][:8])
    src, mask = source_batch(ids)
    batched = greedy_decode(any_model, src, mask, 1.0, 5)
    for i, s in enumerate(ids):
        [alone] = greedy_decode(any_model, *source_batch([s]), 1.0, 5)
        assert alone.tokens == batched[i].tokens
        assert alone.logprob == pytest.approx(batched[i].logprob, abs=1e-4)
        assert len(alone.tokens) <= len(s) + 1 + 5


def test_translate_keeps_one_line_per_input_line(text_model, tokenizer):
    lines = ["Der Hund sieht die Katze.", "", "   ", "Die Frau liest.", "", "Ein Kind lacht."]
    out = translate_lines(text_model, tokenizer, lines, DecodeConfig(batch_tokens=32))
    assert len(out) == len(lines)
    assert out[1] == out[2] == out[4] == ""
    assert all("\n" not in line for line in out)


@pytest.mark.parametrize("beam", [1, 3])
def test_translate_restores_input_order(any_model, tokenizer, toy, beam):
    lines = toy["test"][0][:20]
    forward = translate_lines(any_model, tokenizer, lines, DecodeConfig(beam=beam, batch_tokens=64))
    backward = translate_lines(any_model, tokenizer, lines[::-1], DecodeConfig(beam=beam, batch_tokens=64))
    one_batch = translate_lines(any_model, tokenizer, lines, DecodeConfig(beam=beam, batch_tokens=100_000))
    assert forward == backward[::-1] == one_batch


def test_bleu_of_identity_is_100():
    refs = ["The dog bit the man.", "It was not unexpected."]
    result = score(refs, refs)
    assert result["bleu"] == pytest.approx(100.0) and result["chrf"] == pytest.approx(100.0)
    assert result["sentences"] == 2


def test_bleu_matches_sacrebleu_readme_example():
    refs = [
        ["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
        ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."],
    ]
    hyps = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
    result = score(hyps, *refs)
    assert result["bleu"] == pytest.approx(48.530827, abs=1e-6)
    assert result["bleu_signature"].startswith("nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert result["chrf_signature"].startswith("nrefs:2|case:mixed|eff:yes|nc:6|nw:0|space:no|version:")


def test_split_pieces_cuts_before_word_starts():
    starts = {10, 20}  # piece ids that begin a word
    ids = [10, 1, 1, 20, 1, 1, 1, 10, 1, 20, 1]
    parts = split_pieces(ids, 4, starts.__contains__)
    assert [p for part in parts for p in part] == ids and all(len(p) <= 4 for p in parts)
    assert parts == [[10, 1, 1], [20, 1, 1, 1], [10, 1, 20, 1]]
    assert split_pieces([1] * 9, 4, starts.__contains__) == [
        [1] * 4,
        [1] * 4,
        [1],
    ]  # no word start: hard cuts
