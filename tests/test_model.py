import pytest
import torch

from albertlm.config import get_preset
from albertlm.model import AlbertForPreTraining, AlbertModel

STRATEGIES = ["all", "attention", "ffn", "none"]


def _batch(config, B=3, S=12, pad_last=4):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, config.vocab_size, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[-1, S - pad_last:] = 0
    types = torch.zeros(B, S, dtype=torch.long)
    types[:, S // 2:] = 1
    labels = torch.full((B, S), -100)
    labels[:, 2] = ids[:, 2]
    labels[0, 5] = ids[0, 5]
    sop = torch.tensor([0, 1, 0][:B])
    return ids, mask, types, labels, sop


def _config(sharing):
    return get_preset("test", num_hidden_layers=4, sharing=sharing)


@pytest.mark.parametrize("sharing", STRATEGIES)
def test_sharing_shares_what_it_claims(sharing):
    config = _config(sharing)
    enc = AlbertModel(config).encoder
    L = config.num_hidden_layers
    attn_ids = [id(enc.attention[a]) for a, _ in enc.schedule]
    ffn_ids = [id(enc.ffn[f]) for _, f in enc.schedule]
    expect_attn = 1 if sharing in ("all", "attention") else L
    expect_ffn = 1 if sharing in ("all", "ffn") else L
    assert len(set(attn_ids)) == expect_attn == len(enc.attention)
    assert len(set(ffn_ids)) == expect_ffn == len(enc.ffn)
    H, I = config.hidden_size, config.intermediate_size
    attn_params = 3 * H * H + 3 * H + H * H + H + 2 * H
    ffn_params = H * I + I + I * H + H + 2 * H
    assert sum(p.numel() for p in enc.parameters()) == expect_attn * attn_params + expect_ffn * ffn_params


@pytest.mark.parametrize("sharing", STRATEGIES)
def test_each_strategy_trains_a_step(sharing):
    config = _config(sharing)
    model = AlbertForPreTraining(config)
    ids, mask, types, labels, sop = _batch(config)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss0 = model(ids, mask, types, labels=labels, sentence_order_label=sop).loss
    loss0.backward()
    # every parameter receives a gradient (shared blocks get the sum over their applications)
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
    opt.step()
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    with torch.no_grad():
        loss1 = model(ids, mask, types, labels=labels, sentence_order_label=sop).loss
    assert loss1 < loss0


@pytest.mark.parametrize("sharing", ["all", "none"])
def test_sparse_mlm_equals_dense(sharing):
    config = _config(sharing)
    model = AlbertForPreTraining(config).eval()
    ids, mask, types, labels, sop = _batch(config)
    sparse = model(ids, mask, types, labels=labels, sentence_order_label=sop)
    dense = model(ids, mask, types, labels=labels, sentence_order_label=sop, dense_logits=True)
    assert sparse.prediction_logits.shape == (int((labels != -100).sum()), config.vocab_size)
    assert dense.prediction_logits.shape == (*ids.shape, config.vocab_size)
    assert sparse.prediction_mask is not None and dense.prediction_mask is None
    torch.testing.assert_close(sparse.prediction_logits, dense.prediction_logits[sparse.prediction_mask])
    torch.testing.assert_close(sparse.mlm_loss, dense.mlm_loss, rtol=0, atol=1e-6)
    torch.testing.assert_close(sparse.loss, dense.loss, rtol=0, atol=1e-6)
    ref = torch.nn.functional.cross_entropy(dense.prediction_logits.view(-1, config.vocab_size),
                                            labels.view(-1), ignore_index=-100)
    torch.testing.assert_close(dense.mlm_loss, ref)
    # gradients agree too
    g = []
    for dense_logits in (False, True):
        model.zero_grad()
        model(ids, mask, types, labels=labels, sentence_order_label=sop, dense_logits=dense_logits).loss.backward()
        g.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(g[0], g[1], rtol=1e-5, atol=1e-7)


def test_no_labels_gives_dense_logits_and_no_loss():
    config = _config("all")
    out = AlbertForPreTraining(config)(torch.randint(0, config.vocab_size, (2, 7)))
    assert out.loss is None and out.prediction_logits.shape == (2, 7, config.vocab_size)
    assert out.sop_logits.shape == (2, 2)


def test_batch_without_masked_positions_has_zero_loss():
    config = _config("all")
    model = AlbertForPreTraining(config)
    ids = torch.randint(5, config.vocab_size, (2, 6))
    out = model(ids, labels=torch.full_like(ids, -100))
    assert out.loss.item() == 0.0
    out.loss.backward()  # still differentiable


def test_hidden_states_count_and_padding_invariance():
    config = get_preset("test", num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2)
    model = AlbertModel(config).eval()
    ids, mask, types, _, _ = _batch(config)
    out = model(ids, mask, types, output_hidden_states=True)
    assert len(out.hidden_states) == 1 + config.num_hidden_layers * config.inner_group_num
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)
    # changing what sits under the padding does not change the real tokens' outputs
    ids2 = ids.clone()
    ids2[-1, mask[-1] == 0] = 7
    out2 = model(ids2, mask, types)
    real = mask.bool()
    torch.testing.assert_close(out.last_hidden_state[real], out2.last_hidden_state[real])
    # a full mask means the same as no mask
    torch.testing.assert_close(model(ids[:1], mask[:1], types[:1]).last_hidden_state,
                               model(ids[:1], None, types[:1]).last_hidden_state)


def test_decoder_is_tied_to_word_embeddings():
    model = AlbertForPreTraining(_config("all"))
    names = [n for n, _ in model.named_parameters()]
    assert not any("decoder" in n for n in names)
    with torch.no_grad():
        model.albert.embeddings.word.weight[9].zero_()
        model.mlm.bias[9] = 123.0
    out = model(torch.randint(5, 100, (1, 4)))
    assert torch.allclose(out.prediction_logits[..., 9], torch.tensor(123.0))


def test_position_ids_and_defaults():
    config = _config("all")
    model = AlbertModel(config).eval()
    ids = torch.randint(5, config.vocab_size, (2, 9))
    a = model(ids).last_hidden_state
    b = model(ids, torch.ones_like(ids), torch.zeros_like(ids), torch.arange(9).expand(2, 9)).last_hidden_state
    torch.testing.assert_close(a, b)


def test_an_input_longer_than_the_position_table_is_refused_by_name():
    config = _config("all")
    model = AlbertModel(config).eval()
    n = config.max_position_embeddings
    model(torch.randint(5, config.vocab_size, (1, n)))  # exactly the table's length is fine
    with pytest.raises(ValueError, match=f"{n + 1} tokens .* max_position_embeddings \\({n}\\)"):
        model(torch.randint(5, config.vocab_size, (1, n + 1)))


# ---------------------------------------------------------------------------- unpadded path
def _ragged(config, lengths=(12, 5, 9, 1), S=12, seed=2):
    g = torch.Generator().manual_seed(seed)
    B = len(lengths)
    ids = torch.randint(5, config.vocab_size, (B, S), generator=g)
    mask = (torch.arange(S)[None] < torch.tensor(lengths)[:, None]).long()
    ids[mask == 0] = 0
    types = (torch.arange(S)[None] >= 3).long() * mask
    labels = torch.where((torch.rand(B, S, generator=g) < 0.4) & mask.bool(), ids, torch.full_like(ids, -100))
    labels[:, 0] = ids[:, 0]
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels,
                sentence_order_label=torch.tensor([0, 1, 1, 0][:B]))


@pytest.mark.parametrize("sharing", STRATEGIES)
def test_unpadded_equals_padded(sharing):
    config = _config(sharing)
    model = AlbertForPreTraining(config).eval()
    batch = _ragged(config)
    keep = batch["attention_mask"].bool()
    with torch.no_grad():
        padded = model(**batch, output_hidden_states=True)
        packed = model(**batch, output_hidden_states=True, unpad=True)
    for a, b in zip(padded.hidden_states, packed.hidden_states, strict=True):
        torch.testing.assert_close(b[keep], a[keep], rtol=0, atol=1e-5)
        assert not b[~keep].any()  # zeros at padding
    torch.testing.assert_close(packed.prediction_logits, padded.prediction_logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(packed.sop_logits, padded.sop_logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(packed.loss, padded.loss, rtol=0, atol=1e-5)


def test_unpadded_gradients_equal_padded():
    config = get_preset("test", num_hidden_layers=3, num_hidden_groups=1, inner_group_num=2)
    model = AlbertForPreTraining(config)
    batch = _ragged(config)
    grads = []
    for unpad in (False, True):
        model.zero_grad()
        model(**batch, unpad=unpad).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=0, atol=1e-5, msg=n)


def test_unpad_without_padding_is_the_padded_path():
    config = _config("all")
    model = AlbertModel(config).eval()
    ids = torch.randint(5, config.vocab_size, (2, 10))
    with torch.no_grad():
        a = model(ids, torch.ones_like(ids)).last_hidden_state
        b = model(ids, torch.ones_like(ids), unpad=True).last_hidden_state
    assert torch.equal(a, b)


@pytest.mark.parametrize("unpad", [False, True])
def test_checkpointing_and_bf16_autocast_keep_the_loss(unpad):
    """The CPU stand-ins for the GPU path: activation checkpointing is exact, bf16 close."""
    from albertlm.distributed import apply_activation_checkpointing

    config = _config("all")
    batch = _ragged(config)
    model = AlbertForPreTraining(config)
    ref = model(**batch, unpad=unpad).loss
    ref.backward()
    ref_grad = model.albert.encoder.attention[0].qkv.weight.grad.clone()
    model.zero_grad()
    assert apply_activation_checkpointing(model) == 2
    loss = model(**batch, unpad=unpad).loss
    loss.backward()
    torch.testing.assert_close(loss, ref, rtol=0, atol=1e-6)
    torch.testing.assert_close(model.albert.encoder.attention[0].qkv.weight.grad, ref_grad, rtol=0, atol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(**batch, unpad=unpad).loss
    assert abs(low.item() - ref.item()) < 0.05 * ref.item()


def test_attention_runs_on_the_flash_kernel():
    """Our q/k/v views (no copies) are accepted by SDPA's flash kernel, padded, masked and packed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    config = _config("all")
    model = AlbertForPreTraining(config)
    batch = _ragged(config)
    reference = {unpad: model(**batch, unpad=unpad).loss for unpad in (False, True)}  # default kernels
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # flash only: an unsupported input raises here
        model(batch["input_ids"]).sop_logits.sum().backward()
        for unpad in (False, True):
            loss = model(**batch, unpad=unpad).loss
            loss.backward()
            assert torch.isfinite(loss) and torch.allclose(loss, reference[unpad], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_compiled_model_matches_eager():
    from albertlm.distributed import maybe_compile

    config = _config("all")
    model = AlbertForPreTraining(config).eval()
    batch = _ragged(config)
    compiled = maybe_compile(model, True)
    with torch.no_grad():
        for unpad in (False, True):
            torch.testing.assert_close(compiled(**batch, unpad=unpad).loss, model(**batch, unpad=unpad).loss,
                                       rtol=0, atol=1e-5)


def test_sentence_order_head_learns_a_synthetic_order_task():
    # Segment A draws from ids 5..40, segment B from 41..80; label 1 puts B first. The model can
    # only tell the orders apart through the [CLS] -> pooler -> SOP path, so this fails if that
    # path (or its loss) is disconnected.
    torch.manual_seed(0)
    config = get_preset("test", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = AlbertForPreTraining(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)

    def batch(n=32, half=6):
        a = torch.randint(5, 41, (n, half), generator=g)
        b = torch.randint(41, 81, (n, half), generator=g)
        label = torch.randint(0, 2, (n,), generator=g)
        first = torch.where(label[:, None] == 1, b, a)
        second = torch.where(label[:, None] == 1, a, b)
        cls, sep = torch.full((n, 1), 2), torch.full((n, 1), 3)
        ids = torch.cat([cls, first, sep, second, sep], dim=1)
        types = torch.cat([torch.zeros(n, half + 2), torch.ones(n, half + 1)], dim=1).long()
        return ids, types, label

    for _ in range(150):
        ids, types, label = batch()
        out = model(ids, token_type_ids=types, sentence_order_label=label)
        assert out.mlm_loss is None
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    model.eval()
    ids, types, label = batch(n=256)
    with torch.no_grad():
        accuracy = (model(ids, token_type_ids=types).sop_logits.argmax(-1) == label).float().mean()
    assert accuracy > 0.95, accuracy


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_prepacked_copy_computes_the_same_outputs():
    from albertlm.inference.prepack import prepack_for_cpu

    config = _config("all")
    torch.manual_seed(0)
    model = AlbertModel(config).eval()
    ids, mask, types, _, _ = _batch(config)
    packed = prepack_for_cpu(model)
    assert type(model.encoder) is type(packed.encoder)
    assert any(type(m).__name__ == "MkldnnLinear" for m in packed.modules())
    assert not any(type(m).__name__ == "MkldnnLinear" for m in model.modules())  # the original is untouched
    with torch.inference_mode():
        a = model(ids, mask, types)
        b = packed(ids, mask, types)
    keep = mask.bool()
    torch.testing.assert_close(b.last_hidden_state[keep], a.last_hidden_state[keep], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b.pooler_output, a.pooler_output, atol=1e-5, rtol=1e-5)


def test_init_embeddings_moves_only_the_starting_point():
    config = get_preset("test", embedding_size=16)
    model = AlbertForPreTraining(config)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.init_embeddings(position="sinusoidal", token_type="zero", projection="unit")
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"albert.embeddings.position.weight", "albert.embeddings.token_type.weight",
                       "albert.project.weight"}
    assert not after["albert.embeddings.token_type.weight"].any()
    table = after["albert.embeddings.position.weight"]
    assert abs(float(table.std()) - config.initializer_range) < 0.2 * config.initializer_range
    # the dot product of two sinusoidal positions depends on their offset only
    gram = table @ table.T
    assert torch.allclose(torch.diagonal(gram, 1)[:10], torch.diagonal(gram, 1)[10:20], rtol=1e-4, atol=1e-9)
    proj = after["albert.project.weight"]
    assert abs(float(proj.std()) * 16 ** 0.5 - 1.0) < 0.1
    # the official init is the default: nothing moves
    model.init_embeddings()
    assert torch.equal(model.state_dict()["albert.project.weight"], proj)
    with pytest.raises(ValueError):
        model.init_embeddings(position="learned")


def test_albert_zh_layout_is_albert_zh_network():
    # brightmart/albert_zh: word vectors x word_embeddings_2 (E x H, no bias) + H-wide position and
    # type tables, LayerNorm(H), no projection after; the MLM transform is H-wide and decodes back
    # through the transposed word projection, then the word table, plus the output bias.
    config = get_preset("test", embedding_layout="albert_zh", hidden_dropout_prob=0.0)
    model = AlbertForPreTraining(config).eval()
    emb = model.albert.embeddings
    assert emb.word_project.bias is None and tuple(emb.position.weight.shape)[1] == config.hidden_size
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    ids = torch.randint(0, config.vocab_size, (2, 7))
    types = torch.randint(0, 2, (2, 7))
    with torch.no_grad():
        x = emb.word.weight[ids] @ emb.word_project.weight.T + emb.position.weight[:7] + emb.token_type.weight[types]
        x = torch.nn.functional.layer_norm(x, (config.hidden_size,), emb.norm.weight, emb.norm.bias, config.layer_norm_eps)
        out = model(ids, token_type_ids=types, output_hidden_states=True)
        torch.testing.assert_close(out.hidden_states[0], x)
        h = out.hidden_states[-1]
        t = model.mlm.norm(torch.nn.functional.gelu(model.mlm.dense(h), approximate="tanh"))
        logits = (t @ emb.word_project.weight) @ emb.word.weight.T + model.mlm.bias
        torch.testing.assert_close(out.prediction_logits, logits)
