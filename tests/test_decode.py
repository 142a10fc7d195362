"""mt/decode.py: beam search against hand-derived hypotheses (a scripted bigram "decoder"), beam 1
against greedy, n-best scores against teacher forcing, cached against uncached, batched against one
by one.

Decoding tests run on two models (the `any_model` fixture): a random one, whose hypotheses all run to
the length limit, and a trained one, whose hypotheses end with eos at different steps."""

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch
from conftest import TEXT_MODEL

from mt.batching import source_batch
from mt.config import BOS, EOS
from mt.decode import Ensemble, Hypothesis, Sampler, Sources, beam_search, greedy_decode, length_penalty
from mt.decode_config import DecodeConfig, decoding
from mt.kv_cache import KVCache
from mt.model import Seq2Seq
from mt.plumbing.errors import ConfigError
from mt.plumbing.spelling import COMMAND_LINE, REQUEST
from mt.translate import SearchRequest, search_lines


def test_cached_and_uncached_greedy_are_identical(any_model, tokenizer, toy):
    src, mask = source_batch(tokenizer.encode(toy["test"][0][:8]))
    cached = greedy_decode(
        any_model, Sources(src, mask), DecodeConfig(max_len_a=1.0, max_len_b=5), use_cache=True
    )
    uncached = greedy_decode(
        any_model, Sources(src, mask), DecodeConfig(max_len_a=1.0, max_len_b=5), use_cache=False
    )
    assert [h.tokens for h in cached] == [h.tokens for h in uncached]
    assert [h.logprob for h in cached] == pytest.approx([h.logprob for h in uncached], abs=1e-4)
    assert all(len(h.tokens) <= length + 5 for h, length in zip(cached, mask.sum(1).tolist()))


def test_greedy_one_by_one_equals_batched(any_model, tokenizer, toy):
    ids = tokenizer.encode(toy["test"][0][:8])
    src, mask = source_batch(ids)
    batched = greedy_decode(any_model, Sources(src, mask), DecodeConfig(max_len_a=1.0, max_len_b=5))
    for i, s in enumerate(ids):
        [alone] = greedy_decode(
            any_model, Sources(*source_batch([s])), DecodeConfig(max_len_a=1.0, max_len_b=5)
        )
        assert alone.tokens == batched[i].tokens
        assert alone.logprob == pytest.approx(batched[i].logprob, abs=1e-4)
        assert len(alone.tokens) <= len(s) + 1 + 5


A, B, C = 4, 5, 6


# next-token probabilities given the last token (a bigram "decoder"); every other entry is 0
TABLE = {BOS: {A: 0.6, B: 0.4}, A: {EOS: 17 / 30, C: 13 / 30}, B: {C: 0.825, EOS: 0.175}, C: {EOS: 1.0}}


class ScriptedModel(torch.nn.Module):
    """Stands in for Seq2Seq: `decode` returns log TABLE[last token], whatever the source."""

    def __init__(self):
        super().__init__()
        self.decoder = [None]
        self.cfg = SimpleNamespace(max_positions=64)
        table = torch.full((7, 7), float("-inf"))
        for prev, row in TABLE.items():
            for tok, p in row.items():
                table[prev, tok] = math.log(p)
        self.table = table

    def encode(self, src, src_mask):
        return torch.zeros(src.size(0), src.size(1), 1)

    def new_cache(self):
        return KVCache(len(self.decoder))

    def decode(self, tgt_in, memory, src_mask, cache=None, tgt_mask=None):
        return self.table[tgt_in[:, -1:]], cache  # (B, 1, V)

    def to_pieces(self, logits):  # its output layer scores every piece
        return logits


def run(beam, alpha, n_best=3):
    src, mask = source_batch([[A, B, C]])
    cfg = DecodeConfig(beam=beam, max_len_a=1.0, max_len_b=5, length_penalty=alpha, n_best=n_best)
    return beam_search(ScriptedModel(), Sources(src, mask), cfg)[0]


# By hand, beam 2. Step 1: a (.6), b (.4). Step 2 candidates: a-eos .34, b-c .33, a-c .26, b-eos .07;
# a-eos ranks within the top 2 and finishes, b-c and a-c go on. Step 3: b-c-eos .33, a-c-eos .26 finish.
# Finished: [a] .34 (length 2 with eos), [b c] .33 (length 3), [a c] .26 (length 3).
def test_beam_without_length_penalty_ranks_by_probability():
    hyps = run(beam=2, alpha=0.0)
    assert [h.tokens for h in hyps] == [[A], [B, C], [A, C]]
    assert [h.logprob for h in hyps] == pytest.approx([math.log(0.34), math.log(0.33), math.log(0.26)])
    assert [h.score for h in hyps] == pytest.approx([math.log(0.34), math.log(0.33), math.log(0.26)])


def test_length_penalty_prefers_the_longer_hypothesis():
    # GNMT alpha = 1: log(.34) / (7/6) = -0.925 < log(.33) / (8/6) = -0.832 > log(.26) / (8/6) = -1.010
    hyps = run(beam=2, alpha=1.0)
    assert [h.tokens for h in hyps] == [[B, C], [A], [A, C]]
    assert [h.score for h in hyps] == pytest.approx(
        [math.log(0.33) / (8 / 6), math.log(0.34) / (7 / 6), math.log(0.26) / (8 / 6)]
    )
    assert length_penalty(3, 1.0) == pytest.approx(8 / 6) and length_penalty(3, 0.0) == 1.0


def test_beam_search_computes_only_the_running_sentences_beams():
    """One row per sentence at the first step (its beams would be identical), then K per running
    sentence; a done sentence leaves the batch."""
    rows = []

    class Counting(ScriptedModel):
        def decode(self, tgt_in, memory, src_mask, cache=None, tgt_mask=None):
            rows.append(tgt_in.size(0))
            return super().decode(tgt_in, memory, src_mask, cache, tgt_mask)

    src, mask = source_batch([[A], [A, B, C]])  # limits 2 and 4: the first is done after step 2
    both = beam_search(
        Counting(),
        Sources(src, mask),
        DecodeConfig(beam=2, max_len_a=1.0, max_len_b=0, length_penalty=0.0, n_best=2),
    )
    assert rows == [2, 4, 2]
    assert [h.tokens for h in both[0]] == [[A], [B, C]]  # at the limit: [b c] without eos
    assert [h.tokens for h in both[1]] == [[A], [B, C]]  # the hand-derived beam-2 search above
    assert [h.logprob for h in both[1]] == pytest.approx([math.log(0.34), math.log(0.33)])


def test_greedy_takes_the_locally_best_path():
    src, mask = source_batch([[A, B, C]])
    [greedy] = greedy_decode(ScriptedModel(), Sources(src, mask), DecodeConfig(max_len_a=1.0, max_len_b=5))
    assert greedy.tokens == [A] and greedy.logprob == pytest.approx(math.log(0.34))
    assert greedy.ended
    assert [h.tokens for h in run(beam=1, alpha=0.0)] == [[A]]


def test_min_len_bans_eos_until_that_many_pieces_in_greedy_and_beam():
    """The scripted model ends [A] at once (A -> eos 17/30); min_len 2 makes greedy take C, the one
    other piece after A, at its renormalised log-probability 0, then eos; every beam hypothesis has 2
    pieces or more. min_len 0 is the search without it."""
    src, mask = source_batch([[A, B, C]])
    cfg = DecodeConfig(max_len_a=1.0, max_len_b=5, min_len=2)
    [greedy] = greedy_decode(ScriptedModel(), Sources(src, mask), cfg)
    assert greedy.tokens == [A, C] and greedy.logprob == pytest.approx(math.log(0.6))
    beams = beam_search(ScriptedModel(), Sources(src, mask), dataclasses.replace(cfg, beam=2, n_best=2))[0]
    assert [h.tokens for h in beams] == [[A, C], [B, C]]
    [plain] = greedy_decode(ScriptedModel(), Sources(src, mask), dataclasses.replace(cfg, min_len=0))
    assert plain.tokens == [A]


def test_min_len_holds_for_every_draw_of_sampling():
    """Sampling chooses among the filtered scores too: with min_len 2 no draw ends after one piece
    (the scripted model's A -> eos and B -> eos), whatever its seed."""
    src, mask = source_batch([[A, B, C]] * 8)
    cfg = DecodeConfig(max_len_a=1.0, max_len_b=5, min_len=2)
    drawn = greedy_decode(
        ScriptedModel(), Sources(src, mask), cfg, choose=Sampler("topk:3", 1.0, list(range(8)))
    )
    assert {tuple(h.tokens) for h in drawn} <= {(A, C), (B, C)} and len({h.tokens[0] for h in drawn}) == 2
    plain = greedy_decode(
        ScriptedModel(),
        Sources(src, mask),
        dataclasses.replace(cfg, min_len=0),
        choose=Sampler("topk:3", 1.0, list(range(8))),
    )
    assert any(len(h.tokens) == 1 for h in plain)


def test_min_len_lengthens_the_lines_a_trained_model_ends_early_and_no_other(trained_model, tokenizer, toy):
    lines = toy["test"][0][:80]
    plain = [
        h[0].tokens for h in search_lines(SearchRequest(trained_model, tokenizer, lines), DecodeConfig())
    ]
    long = [
        h[0].tokens
        for h in search_lines(SearchRequest(trained_model, tokenizer, lines), DecodeConfig(min_len=6))
    ]
    short = [i for i, tokens in enumerate(plain) if len(tokens) < 6]
    assert short, "no line of the fixture ends before 6 pieces: the test would test nothing"
    assert all(len(long[i]) >= 6 for i in short)
    assert [long[i] for i in range(len(lines)) if i not in short] == [
        plain[i] for i in range(len(lines)) if i not in short
    ]


def test_length_limit_finishes_without_eos():
    src, mask = source_batch([[A]])  # limit = 1.0 * (1 + eos) + 0 = 2 tokens
    hyps = beam_search(
        ScriptedModel(),
        Sources(src, mask),
        DecodeConfig(beam=2, max_len_a=1.0, max_len_b=0, length_penalty=0.0, n_best=2),
    )[0]
    assert [h.tokens for h in hyps] == [[A], [B, C]]
    assert hyps[1].logprob == pytest.approx(math.log(0.33))  # no eos score: it was cut, not ended
    assert [h.ended for h in hyps] == [True, False]
    src, mask = source_batch([[A, B, C]])
    alpha = DecodeConfig(beam=2, max_len_a=1.0, max_len_b=0, length_penalty=1.5, n_best=2)
    hyps = beam_search(ScriptedModel(), Sources(src, mask), alpha)[
        0
    ]  # the score: over the penalty of its steps
    assert [h.score for h in hyps] == [h.logprob / length_penalty(len(h.tokens) + h.ended, 1.5) for h in hyps]
    greedy = greedy_decode(
        ScriptedModel(), Sources(*source_batch([[A]])), DecodeConfig(max_len_a=0.0, max_len_b=1)
    )
    assert [(g.tokens, g.ended) for g in greedy] == [([A], False)]


def test_trained_model_ends_hypotheses_at_different_steps(trained_model, tokenizer, toy):
    """The premise of the any_model tests: the trained model's hypotheses end with eos, not at the
    limit, and at different lengths, so eos bookkeeping is exercised; the random model's never do."""
    ids = tokenizer.encode(toy["test"][0][:8])
    src, mask = source_batch(ids)
    limits = [len(s) + 1 + 5 for s in ids]  # a = 1, b = 5
    greedy = greedy_decode(trained_model, Sources(src, mask), DecodeConfig(max_len_a=1.0, max_len_b=5))
    ended = [len(h.tokens) for h, limit in zip(greedy, limits) if len(h.tokens) < limit]
    assert len(ended) >= 6 and len(set(ended)) >= 4
    beams = beam_search(
        trained_model, Sources(src, mask), DecodeConfig(beam=3, max_len_a=1.0, max_len_b=5, n_best=3)
    )
    assert len({len(h.tokens) for hyps in beams for h in hyps}) >= 6
    random_model = greedy_decode(
        Seq2Seq(TEXT_MODEL, tokenizer.vocab_size).eval(),
        Sources(src, mask),
        DecodeConfig(max_len_a=1.0, max_len_b=5),
    )
    assert [len(h.tokens) for h in random_model] == limits  # no eos: every hypothesis hits the limit


def test_beam_one_equals_greedy_on_a_model(any_model, tokenizer, toy):
    src, mask = source_batch(tokenizer.encode(toy["test"][0][:8]))
    greedy = greedy_decode(any_model, Sources(src, mask), DecodeConfig(max_len_a=1.0, max_len_b=5))
    beam = beam_search(
        any_model, Sources(src, mask), DecodeConfig(beam=1, max_len_a=1.0, max_len_b=5, length_penalty=0.0)
    )
    assert [h[0].tokens for h in beam] == [g.tokens for g in greedy]
    # float32 sums of ~30 log-probabilities, accumulated in another order: equal to ~1e-6 relative
    assert [h[0].score for h in beam] == pytest.approx([g.score for g in greedy], rel=1e-6, abs=1e-5)


@torch.no_grad()
def teacher_forced_logprob(model, src: torch.Tensor, src_mask: torch.Tensor, targets: list[int]) -> float:
    """Sum of log p(target_t | targets before t) for one sentence (src (1, S)), recomputed from scratch."""
    logits, _ = model.decode(torch.tensor([[BOS] + targets[:-1]]), model.encode(src, src_mask), src_mask)
    lprobs = torch.log_softmax(logits[0].float(), dim=-1)  # (T, V)
    return float(lprobs[torch.arange(len(targets)), torch.tensor(targets)].sum())


def test_n_best_scores_are_their_hypotheses_probabilities(any_model, tokenizer, toy):
    src, mask = source_batch(tokenizer.encode(toy["test"][0][:5]))
    n_best = beam_search(
        any_model, Sources(src, mask), DecodeConfig(beam=4, n_best=4)
    )  # a = 1.5, b = 10, alpha = 1
    one_best = beam_search(any_model, Sources(src, mask), DecodeConfig(beam=4, n_best=1))
    limits = (1.5 * mask.sum(1) + 10).long().tolist()
    for i, (hyps, best) in enumerate(zip(n_best, one_best)):
        assert len(hyps) == 4 and hyps[0] == best[0]
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            ended = len(h.tokens) < limits[i]  # else cut at the limit, without eos
            targets = h.tokens + [EOS] * ended
            assert h.logprob == pytest.approx(
                teacher_forced_logprob(any_model, src[i : i + 1], mask[i : i + 1], targets), abs=1e-4
            )
            assert h.score == pytest.approx(h.logprob / length_penalty(len(targets), 1.0), abs=1e-6)


def test_beam_one_by_one_equals_batched(any_model, tokenizer, toy):
    ids = tokenizer.encode(toy["test"][0][:6])
    batched = beam_search(any_model, Sources(*source_batch(ids)), DecodeConfig(beam=3, n_best=3))
    for i, s in enumerate(ids):
        alone = beam_search(any_model, Sources(*source_batch([s])), DecodeConfig(beam=3, n_best=3))[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[i]], abs=1e-5)


def test_cached_and_uncached_beam_are_identical(any_model, tokenizer, toy):
    src, mask = source_batch(tokenizer.encode(toy["test"][0][:6]))
    cached = beam_search(any_model, Sources(src, mask), DecodeConfig(beam=3, n_best=3))
    uncached = beam_search(any_model, Sources(src, mask), DecodeConfig(beam=3, n_best=3), use_cache=False)
    assert [[h.tokens for h in hyps] for hyps in cached] == [[h.tokens for h in hyps] for hyps in uncached]
    assert [h.score for hyps in cached for h in hyps] == pytest.approx(
        [h.score for hyps in uncached for h in hyps], abs=1e-4
    )


def test_sampling_near_zero_temperature_or_from_the_top_one_piece_is_greedy(trained_model, tokenizer, toy):
    lines = toy["test"][0][:40]
    greedy = [
        h[0].tokens for h in search_lines(SearchRequest(trained_model, tokenizer, lines), DecodeConfig())
    ]
    for sample, temperature in (("topk:50", 1e-4), ("topp:0.9", 1e-4), ("topk:1", 1.0)):
        cfg = DecodeConfig(sample=sample, temperature=temperature, seed=3)
        assert [
            h[0].tokens for h in search_lines(SearchRequest(trained_model, tokenizer, lines), cfg)
        ] == greedy, sample


def test_samples_are_seeded_reproducible_and_independent_of_the_batch(trained_model, tokenizer, toy):
    lines, cfg = toy["test"][0][:30], DecodeConfig(sample="topk:20", temperature=1.5, seed=7)
    drawn = [h[0].tokens for h in search_lines(SearchRequest(trained_model, tokenizer, lines), cfg)]
    assert [h[0].tokens for h in search_lines(SearchRequest(trained_model, tokenizer, lines), cfg)] == drawn
    one_by_one = dataclasses.replace(cfg, batch_tokens=16)  # a batch per line
    assert [
        h[0].tokens for h in search_lines(SearchRequest(trained_model, tokenizer, lines), one_by_one)
    ] == drawn
    reversed_lines = [
        h[0].tokens for h in search_lines(SearchRequest(trained_model, tokenizer, lines[::-1]), cfg)
    ]
    other_seed = [
        h[0].tokens
        for h in search_lines(
            SearchRequest(trained_model, tokenizer, lines), dataclasses.replace(cfg, seed=8)
        )
    ]
    greedy = [
        h[0].tokens for h in search_lines(SearchRequest(trained_model, tokenizer, lines), DecodeConfig())
    ]
    assert (
        sum(a != b for a, b in zip(drawn, other_seed)) >= 10
        and sum(a != b for a, b in zip(drawn, greedy)) >= 10
    )
    assert sum(a != b for a, b in zip(drawn, reversed_lines[::-1])) >= 10  # the line's number seeds it


def test_n_samples_per_line_are_n_seeded_draws_the_first_the_one_sample(trained_model, tokenizer, toy):
    lines, cfg = toy["test"][0][:12], DecodeConfig(sample="topk:20", temperature=1.5, seed=7)
    one = search_lines(SearchRequest(trained_model, tokenizer, lines), cfg)
    three = search_lines(SearchRequest(trained_model, tokenizer, lines), dataclasses.replace(cfg, n_best=3))
    assert [len(hyps) for hyps in three] == [3] * 12
    assert [hyps[0] for hyps in three] == [hyps[0] for hyps in one]
    one_by_one = search_lines(
        SearchRequest(trained_model, tokenizer, lines), dataclasses.replace(cfg, n_best=3, batch_tokens=16)
    )
    tokens = lambda found: [[h.tokens for h in hyps] for hyps in found]  # noqa: E731
    assert tokens(one_by_one) == tokens(three)  # independent of the batch
    assert sum(len({tuple(h.tokens) for h in hyps}) > 1 for hyps in three) >= 8, tokens(three)  # draws differ
    assert decoding(DecodeConfig(), {"sample": "topk:5", "n_best": 4}, COMMAND_LINE).n_best == 4


def test_an_option_given_wins_over_a_default_with_what_it_implies():
    tuned = DecodeConfig(beam=3, length_penalty=2.0)  # a run tuned on val
    sampled = decoding(tuned, {"sample": "topk:50", "temperature": 1.5, "beam": None}, COMMAND_LINE)
    assert (sampled.sample, sampled.beam, sampled.temperature) == ("topk:50", 1, 1.5)
    searched = decoding(DecodeConfig(sample="topp:0.9"), {"beam": 4}, REQUEST)  # a server that samples
    assert (searched.sample, searched.beam) == ("", 4)
    assert decoding(DecodeConfig(sample="topp:0.9"), {"beam": 1}, REQUEST).sample == "topp:0.9"


def test_top_p_keeps_the_fewest_pieces_that_reach_p():
    scores = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    drawn = {Sampler("topp:0.8", 1.0, [seed])(scores, torch.tensor([0])).item() for seed in range(200)}
    assert drawn == {0, 1}  # 0.5 + 0.3 reach 0.8: the others are never drawn
    drawn = {Sampler("topk:3", 1.0, [seed])(scores, torch.tensor([0])).item() for seed in range(200)}
    assert drawn == {0, 1, 2}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"sample": "top5"}, "--sample top5: expected topk:K (K >= 1) or topp:P (0 < P <= 1)"),
        ({"sample": "topp:1.5"}, "--sample topp:1.5: expected topk:K (K >= 1) or topp:P (0 < P <= 1)"),
        ({"sample": "topk:5", "beam": 4}, "--sample topk:5 draws one token at a time: add --beam 1"),
        (
            {"sample": "topk:5", "engine": "ctranslate2"},
            "--sample topk:5 runs on the torch engine: CTranslate2 draws from one random stream per "
            "process, so a line's sample would depend on its batch; add --engine torch",
        ),
    ],
)
def test_sampling_options_are_checked_in_the_users_terms(options, message):
    with pytest.raises(ConfigError) as e:
        decoding(DecodeConfig(), options, COMMAND_LINE)
    assert str(e.value) == message


@pytest.mark.parametrize("beam", [1, 4])
def test_an_ensemble_of_one_or_of_a_model_with_itself_decodes_as_the_model(
    trained_model, tokenizer, toy, beam
):
    lines, cfg = toy["test"][0][:12], DecodeConfig(beam=beam, n_best=beam)
    alone = search_lines(SearchRequest(trained_model, tokenizer, lines), cfg)
    for ensemble in (Ensemble([trained_model]), Ensemble([trained_model, trained_model])):
        together = search_lines(SearchRequest(ensemble, tokenizer, lines), cfg)
        assert [[h.tokens for h in hyps] for hyps in together] == [[h.tokens for h in hyps] for hyps in alone]
        for a, b in zip(alone, together):
            assert [h.score for h in b] == pytest.approx([h.score for h in a], abs=1e-4)


def test_an_ensemble_scores_the_mean_of_its_models_log_probabilities(trained_model, text_model, tokenizer):
    src, src_mask = source_batch(tokenizer.encode(["ein Hund läuft", "zwei Männer"]))
    tgt = torch.tensor([[BOS, 10, 11], [BOS, 12, 13]])
    ensemble = Ensemble([trained_model, text_model])
    with torch.no_grad():
        got, _ = ensemble.decode(tgt, ensemble.encode(src, src_mask), src_mask)
        want = [
            torch.log_softmax(m.decode(tgt, m.encode(src, src_mask), src_mask)[0], -1)
            for m in ensemble.models
        ]
    assert torch.allclose(got, (want[0] + want[1]) / 2, atol=1e-5)


def tokens_of(found: list) -> list:
    return [h.tokens if isinstance(h, Hypothesis) else [x.tokens for x in h] for h in found]


def test_an_ensembles_cached_decoding_equals_recomputation(trained_model, tokenizer, toy):
    src, src_mask = source_batch(tokenizer.encode(toy["test"][0][:6]))
    ensemble = Ensemble([trained_model, trained_model])
    for search_fn in (greedy_decode, beam_search):
        cached = search_fn(ensemble, Sources(src, src_mask), use_cache=True)
        assert tokens_of(cached) == tokens_of(search_fn(ensemble, Sources(src, src_mask), use_cache=False))


def test_block_repeats_bans_the_pieces_that_would_repeat_an_n_gram():
    from mt.score_filters import block_repeats

    history = torch.tensor(
        [[5, 6, 7, 5, 6], [5, 6, 7, 5, 6]]
    )  # the last two pieces, 5 6, came before: then 7
    scores = torch.zeros(2, 10)
    for n, banned in [(3, {7}), (2, {7}), (1, {5, 6, 7}), (6, set()), (0, set())]:
        out = block_repeats(scores, history, n)
        assert {i for i in range(10) if out[0, i] < -1e30} == banned, n
    assert torch.equal(
        block_repeats(scores, torch.tensor([[5, 6], [4, 4]]), 2)[1] < -1e30, torch.arange(10) == 4
    )


def repeated(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


@pytest.mark.parametrize("beam", [1, 3])
def test_no_repeat_ngram_leaves_no_n_gram_twice(trained_model, tokenizer, toy, beam):
    lines = toy["test"][0][:60] + [" ".join(["der Hund und die Katze und"] * 6)]  # an enumeration
    free = [
        h[0].tokens
        for h in search_lines(SearchRequest(trained_model, tokenizer, lines), DecodeConfig(beam=beam))
    ]
    cfg = DecodeConfig(beam=beam, no_repeat_ngram=2)
    blocked = [h[0].tokens for h in search_lines(SearchRequest(trained_model, tokenizer, lines), cfg)]
    assert any(repeated(t, 2) for t in free) and not any(repeated(t, 2) for t in blocked)
    if beam == 1:  # greedy's other lines are as they were (a beam's may rank otherwise: renormalised steps)
        assert all(a == b for a, b in zip(free, blocked) if not repeated(a, 2))
