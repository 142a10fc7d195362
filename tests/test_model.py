"""mt/model.py: masks, causality, padding invariance, incremental decoding, tied weights, attention
equivalence, and the attention weights the layers use."""

import pytest
import torch

from mt.batching import make_batch
from mt.config import BOS, FREEZABLE, PAD, ModelConfig
from mt.kv_cache import KVCache
from mt.model import Dropout, Seq2Seq, decoder_self_mask
from mt.training.step import batch_loss


def test_decoder_self_mask_is_causal_and_hides_padding():
    assert decoder_self_mask(3, None).tolist() == [
        [[[True, False, False], [True, True, False], [True, True, True]]]
    ]
    tgt_mask = torch.tensor([[True, True, False]])
    expected = [[[[True, False, False], [True, True, False], [True, True, False]]]]
    assert decoder_self_mask(3, tgt_mask).tolist() == expected
    assert decoder_self_mask(5, torch.ones(2, 5, dtype=torch.bool)).shape == (2, 1, 5, 5)


def test_future_target_tokens_do_not_change_earlier_logits(small_model):
    torch.manual_seed(1)
    src = torch.randint(4, 50, (2, 6))
    src_mask = torch.ones_like(src, dtype=torch.bool)
    tgt = torch.randint(4, 50, (2, 7))
    tgt_mask = torch.ones_like(tgt, dtype=torch.bool)
    base = small_model(src, src_mask, tgt, tgt_mask)
    for t in range(6):
        changed = tgt.clone()
        changed[:, t + 1] = (changed[:, t + 1] + 1 - 4) % 46 + 4
        out = small_model(src, src_mask, changed, tgt_mask)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, t + 1], base[:, t + 1])


def test_source_padding_changes_no_real_output(small_model):
    torch.manual_seed(2)
    src = torch.randint(4, 50, (1, 5))
    tgt = torch.randint(4, 50, (1, 4))
    tgt_mask = torch.ones_like(tgt, dtype=torch.bool)
    padded = torch.cat([src, torch.full((1, 3), PAD)], dim=1)
    mask, padded_mask = src != PAD, padded != PAD
    torch.testing.assert_close(
        small_model.encode(padded, padded_mask)[:, :5], small_model.encode(src, mask), rtol=0, atol=1e-5
    )
    torch.testing.assert_close(
        small_model(padded, padded_mask, tgt, tgt_mask),
        small_model(src, mask, tgt, tgt_mask),
        rtol=0,
        atol=1e-5,
    )


def test_target_padding_changes_no_real_logits(small_model):
    torch.manual_seed(3)
    src = torch.randint(4, 50, (1, 5))
    src_mask = src != PAD
    tgt = torch.randint(4, 50, (1, 4))
    padded = torch.cat([tgt, torch.full((1, 2), PAD)], dim=1)
    full = small_model(src, src_mask, tgt, tgt != PAD)
    torch.testing.assert_close(
        small_model(src, src_mask, padded, padded != PAD)[:, :4], full, rtol=0, atol=1e-5
    )


def test_incremental_decoding_equals_teacher_forcing(small_model):
    torch.manual_seed(4)
    src = torch.randint(4, 50, (3, 6))
    src[2, 4:] = PAD
    src_mask = src != PAD
    tgt = torch.randint(4, 50, (3, 8))
    memory = small_model.encode(src, src_mask)
    full, _ = small_model.decode(tgt, memory, src_mask)
    cache = KVCache(len(small_model.decoder))
    steps = []
    for t in range(tgt.size(1)):
        logits, cache = small_model.decode(tgt[:, t : t + 1], memory, src_mask, cache)
        steps.append(logits)
    assert cache.length == tgt.size(1)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


def test_cache_reorder_selects_rows(small_model):
    src = torch.randint(4, 50, (2, 5))
    memory = small_model.encode(src, src != PAD)
    cache = KVCache(len(small_model.decoder))
    _, cache = small_model.decode(torch.full((2, 1), BOS), memory, src != PAD, cache)
    k0 = cache.self_kv[0][0].clone()
    cache.reorder(torch.tensor([1, 1, 0]), torch.tensor([1, 1, 0]))
    assert torch.equal(cache.self_kv[0][0][:, :, :1], k0[[1, 1, 0]])
    assert cache.self_kv[0][0].shape[2] == 2  # one free position for the next step
    assert cache.cross_kv[1][0].shape[0] == 3


@torch.no_grad()
def test_decoding_after_a_reorder_equals_recomputing_the_reordered_prefixes(small_model):
    """Beam search's pattern: two steps, reorder rows (and sentences), a third step written in place."""
    torch.manual_seed(5)
    src = torch.randint(4, 50, (3, 6))
    src[1, 3:] = PAD
    tgt = torch.randint(4, 50, (3, 3))
    memory = small_model.encode(src, src != PAD)
    cache = KVCache(len(small_model.decoder))
    for t in range(2):
        _, cache = small_model.decode(tgt[:, t : t + 1], memory, src != PAD, cache)
    order = torch.tensor([2, 0, 0, 1])
    cache.reorder(order, order)
    room = cache.self_kv[0][0]
    step, cache = small_model.decode(tgt[order, 2:], memory[order], (src != PAD)[order], cache)
    assert cache.self_kv[0][0] is room and cache.length == 3
    full, _ = small_model.decode(tgt[order], memory[order], (src != PAD)[order])
    torch.testing.assert_close(step[:, 0], full[:, -1], rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_beams_sharing_their_sentences_memory_equal_repeated_memory(small_model):
    """G target rows per sentence on (B, S, D) memory give what (G*B, S, D) copies of it give."""
    torch.manual_seed(6)
    src = torch.randint(4, 50, (2, 5))
    src[0, 3:] = PAD
    src_mask = src != PAD
    G, tgt = 3, torch.randint(4, 50, (6, 4))
    memory = small_model.encode(src, src_mask)
    copies = memory.repeat_interleave(G, dim=0), src_mask.repeat_interleave(G, dim=0)
    shared, _ = small_model.decode(tgt, memory, src_mask)
    repeated, _ = small_model.decode(tgt, *copies)
    torch.testing.assert_close(shared, repeated, rtol=1e-5, atol=1e-5)
    shared_cache, repeated_cache = KVCache(len(small_model.decoder)), KVCache(len(small_model.decoder))
    for t in range(tgt.size(1)):
        shared, _ = small_model.decode(tgt[:, t : t + 1], memory, src_mask, shared_cache)
        repeated, _ = small_model.decode(tgt[:, t : t + 1], *copies, repeated_cache)
        torch.testing.assert_close(shared, repeated, rtol=1e-5, atol=1e-5)
    assert shared_cache.cross_kv[0][0].shape[0] == 2 and repeated_cache.cross_kv[0][0].shape[0] == 6


def test_attention_matches_reference_multihead(small_model):
    """Our attention with weights copied into nn.MultiheadAttention gives the same output."""
    attn = small_model.encoder[0].self_attn
    D = 32
    ref = torch.nn.MultiheadAttention(D, 4, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(attn.qkv_proj.weight)  # the same layout: Q, K, V rows
        ref.in_proj_bias.copy_(attn.qkv_proj.bias)
        ref.out_proj.weight.copy_(attn.out_proj.weight)
        ref.out_proj.bias.copy_(attn.out_proj.bias)
    x = torch.randn(2, 5, D)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    ours = attn(*attn.project_qkv(x), mask[:, None, None, :])
    theirs, _ = ref(x, x, x, key_padding_mask=~mask)  # PyTorch's True = pad convention, only here
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_embeddings_and_output_projection_are_tied(small_model):
    assert small_model.src_embed.weight is small_model.tgt_embed.weight is small_model.out_proj.weight


def test_untied_model_has_three_matrices():
    from mt.config import ModelConfig
    from mt.model import Seq2Seq

    m = Seq2Seq(ModelConfig(d_model=16, n_heads=2, layers=1, d_ff=32, tie_embeddings=False), 40)
    assert len({id(m.src_embed.weight), id(m.tgt_embed.weight), id(m.out_proj.weight)}) == 3


def test_residual_block_pre_and_post_norm():
    from mt.model import Residual

    torch.manual_seed(0)
    x, f = torch.randn(2, 3, 8), torch.nn.Linear(8, 8)
    pre, post = Residual(8, 0.0, pre_norm=True), Residual(8, 0.0, pre_norm=False)
    norm = torch.nn.functional.layer_norm
    torch.testing.assert_close(pre(x, f), x + f(norm(x, (8,))))  # x + f(norm(x))
    torch.testing.assert_close(post(x, f), norm(x + f(x), (8,)))  # norm(x + f(x))


def test_post_norm_model_ends_each_layer_in_a_norm():
    from mt.config import ModelConfig
    from mt.model import Seq2Seq

    torch.manual_seed(0)
    m = Seq2Seq(ModelConfig(d_model=16, n_heads=2, layers=2, d_ff=32, norm="post"), 40).eval()
    assert isinstance(m.enc_norm, torch.nn.Identity) and isinstance(m.dec_norm, torch.nn.Identity)
    src = torch.randint(4, 40, (2, 5))
    memory = m.encode(src, src != PAD)  # (B, S, D), straight from a LayerNorm
    torch.testing.assert_close(memory.mean(-1), torch.zeros(2, 5), rtol=0, atol=1e-5)
    torch.testing.assert_close(memory.var(-1, unbiased=False), torch.ones(2, 5), rtol=0, atol=1e-3)


def test_dropout_rate_scale_and_eval_identity():
    torch.manual_seed(0)
    d = Dropout(0.1)
    x = torch.ones(200_000)
    y = d.train()(x)
    assert abs((y == 0).float().mean().item() - 0.1) < 0.005
    scale = torch.tensor(1 / 0.9).item()  # in float32
    assert set(torch.unique(y).tolist()) == {0.0, scale}
    assert torch.equal(d.eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    xg = torch.ones(10, requires_grad=True)
    d.train()(xg).sum().backward()
    assert set(xg.grad.unique().tolist()) <= {0.0, scale}


def test_a_model_with_its_dropout_off_trains_as_one_without_dropout():
    """use_dropout(False) (train.dropout_start's early updates) turns off every kind: model.dropout,
    attention_dropout and activation_dropout, and draws no random number; True puts them back."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=16, n_heads=2, layers=1, d_ff=32, dropout=0.3, attention_dropout=0.3, activation_dropout=0.3
    )
    model = Seq2Seq(cfg, 30)
    src, tgt = torch.randint(4, 30, (2, 5)), torch.randint(4, 30, (2, 6))
    masks = torch.ones_like(src, dtype=torch.bool), torch.ones_like(tgt, dtype=torch.bool)
    expected = model.eval()(src, masks[0], tgt, masks[1])
    model.train().use_dropout(False)
    state = torch.get_rng_state()
    assert torch.equal(model(src, masks[0], tgt, masks[1]), expected)
    assert torch.equal(torch.get_rng_state(), state)
    model.use_dropout(True)
    assert not torch.allclose(model(src, masks[0], tgt, masks[1]), expected)
    for rate in ("dropout", "attention_dropout", "activation_dropout"):  # each kind on its own is switched
        rates = {"dropout": 0.0, rate: 0.5}
        alone = Seq2Seq(ModelConfig(d_model=16, n_heads=2, layers=1, d_ff=32, **rates), 30)
        off = alone.eval()(src, masks[0], tgt, masks[1])
        alone.train().use_dropout(False)
        assert torch.equal(alone(src, masks[0], tgt, masks[1]), off), rate
        alone.use_dropout(True)
        assert not torch.allclose(alone(src, masks[0], tgt, masks[1]), off), rate


def test_the_causal_flag_gives_the_masked_outputs_at_real_positions(small_model, monkeypatch):
    """The GPU path (SDPA's is_causal, no mask) against the explicit pad-and-causal mask, on
    right-padded targets: the same logits wherever the target is real."""
    import mt.model

    torch.manual_seed(5)
    src = torch.randint(4, 50, (3, 6))
    tgt = torch.randint(4, 50, (3, 7))
    tgt[1, 4:], tgt[2, 2:] = PAD, PAD
    masked = small_model(src, src != PAD, tgt, tgt != PAD)  # (B, T, V)
    monkeypatch.setattr(mt.model, "causal_flag", lambda tgt_in: True)
    flagged = small_model(src, src != PAD, tgt, tgt != PAD)
    real = tgt != PAD
    torch.testing.assert_close(flagged[real], masked[real], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(flagged[~real], masked[~real])  # pad positions now see other pads


def test_attention_of_every_kind_hides_exactly_the_masked_positions(small_model):
    batch = make_batch([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14]])  # S = 5, T = 4; row 1 is padded
    found = small_model.attention(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)
    assert [len(found[k]) for k in ("encoder", "decoder", "cross")] == [2, 2, 2]
    hidden = {
        "encoder": ~batch.src_mask[:, None, None, :].expand(2, 4, 5, 5),  # (B, H, S, S)
        "decoder": ~decoder_self_mask(4, batch.tgt_mask).expand(2, 4, 4, 4),  # (B, H, T, T)
        "cross": ~batch.src_mask[:, None, None, :].expand(2, 4, 4, 5),
    }  # (B, H, T, S)
    for kind, layers in found.items():
        for w in layers:
            assert w.shape == hidden[kind].shape
            assert torch.all(w[hidden[kind]] == 0) and torch.all(w[~hidden[kind]] > 0), kind
            torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    # the padded sentence (<s> 14 <pad> <pad>): its queries see only earlier real tokens
    assert hidden["decoder"][1, 0].int().tolist() == [[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1]]


def test_attention_weights_are_the_ones_the_layers_use(small_model, monkeypatch):
    """Each kind's weights times the values, through out_proj, give the layer's output; with SDPA's
    causal flag (the GPU path) too, whose decoder self-attention has no mask to hook."""
    import mt.model

    batch = make_batch([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14]])
    for flag in (False, True):
        monkeypatch.setattr(mt.model, "causal_flag", lambda tgt_in: flag)
        seen = []
        modules = [
            small_model.encoder[0].self_attn,
            small_model.decoder[0].self_attn,
            small_model.decoder[0].cross_attn,
        ]
        hooks = [m.register_forward_hook(lambda m, args, out: seen.append((m, args, out))) for m in modules]
        found = small_model.attention(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)
        for hook in hooks:
            hook.remove()
        for (module, args, out), w in zip(
            seen, (found["encoder"][0], found["decoder"][0], found["cross"][0])
        ):
            mixed = w @ args[2]  # (B, H, T, Dh)
            B, H, T, Dh = mixed.shape
            real = batch.tgt_mask if T == 4 else torch.ones(B, T, dtype=torch.bool)
            torch.testing.assert_close(
                module.out_proj(mixed.transpose(1, 2).reshape(B, T, H * Dh))[real], out[real]
            )


def test_cross_attention_weights_reproduce_the_attention_output(small_model):
    batch = make_batch([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14]])
    weights = small_model.attention(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)["cross"]
    assert len(weights) == 2 and weights[0].shape == (2, 4, 4, 5)  # (B, H, T, S)
    for w in weights:
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 4))
        assert torch.all(w[1, :, :, 3:] == 0)  # padded source positions get nothing
    # the weights are the ones the layer uses: weights @ V through out_proj gives its output
    layer = small_model.decoder[0].cross_attn
    seen = {}
    handle = layer.register_forward_hook(lambda m, args, out: seen.update(args=args, out=out))
    small_model.attention(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)
    handle.remove()
    q, k, v, mask = seen["args"]
    mixed = layer.weights(q, k, mask) @ v  # (B, H, T, Dh)
    B, H, T, Dh = mixed.shape
    torch.testing.assert_close(layer.out_proj(mixed.transpose(1, 2).reshape(B, T, H * Dh)), seen["out"])


@pytest.mark.parametrize("parts", [["embeddings"], ["encoder"], ["decoder"], ["embeddings", "encoder"]])
def test_freeze_stops_exactly_the_named_parts(small_model, parts):
    prefixes = {
        "embeddings": ("src_embed", "tgt_embed", "out_proj"),
        "encoder": ("encoder.", "enc_norm"),
        "decoder": ("decoder.", "dec_norm"),
    }
    assert set(prefixes) == set(FREEZABLE)
    small_model.freeze(parts)
    frozen = tuple(p for part in parts for p in prefixes[part])
    for name, p in small_model.named_parameters():  # the tied matrix is listed once, as src_embed
        assert p.requires_grad == (not name.startswith(frozen)), name


def test_encoder_and_decoder_depths_default_to_layers():
    """model.layers is the shorthand for both stacks; encoder_layers / decoder_layers set each."""
    assert ModelConfig(layers=4).depth == (4, 4)
    assert ModelConfig(layers=4, encoder_layers=6, decoder_layers=1).depth == (6, 1)
    model = Seq2Seq(ModelConfig(d_model=16, n_heads=2, d_ff=32, layers=2, decoder_layers=1), vocab_size=20)
    assert (len(model.encoder), len(model.decoder), len(model.new_cache().self_kv)) == (2, 1, 1)


def test_under_autocast_each_input_is_cast_once():
    """bf16 autocast's casts in a training forward: per Linear its weight and bias, plus the input of
    each projection that reads the fp32 residual stream (self-attention's one q/k/v projection,
    cross-attention's query, the feed-forward's first layer, the output projection), and the encoder's
    output once for every decoder layer's keys and values; each attention casts its q, k and v up to
    fp32 (`attend`) and its out_proj reads the fp32 result; the loss reads the bf16 logits in fp32 a
    chunk of rows at a time (here one chunk)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountCasts(TorchDispatchMode):
        casts = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            CountCasts.casts += func.overloadpacket == torch.ops.aten._to_copy
            return func(*args, **(kwargs or {}))

    cfg = ModelConfig(
        d_model=16, n_heads=2, layers=1, encoder_layers=3, decoder_layers=2, d_ff=32, dropout=0.0
    )
    model = Seq2Seq(cfg, 40)
    batch = make_batch([[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14]])
    with torch.autocast("cpu", dtype=torch.bfloat16), CountCasts():
        batch_loss(model, batch, 0.1)
    attention = 3 + 1  # q, k, v up; the out_proj's fp32 input down
    # per layer: (w, b, input) or (w, b) a Linear, and its attentions
    encoder, decoder = 3 + 2 + 3 + 2 + attention, (3 + 2) + (3 + 2 + 2) + (3 + 2) + 2 * attention
    # + the memory, the output projection's weight and input, the loss's chunk
    assert CountCasts.casts == 3 * encoder + 2 * decoder + 1 + 2 + 1
