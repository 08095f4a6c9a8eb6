"""Transforms applied from outside: activation checkpointing and compile keep the numbers."""

import copy

import pytest
import torch

from albertlm.config import get_preset
from albertlm.distributed import DistContext, apply_activation_checkpointing, gradient_bytes, maybe_compile, wrap_data_parallel
from albertlm.model import AlbertForPreTraining


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 128, (3, 16), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, 3:6] = ids[:, 3:6]
    mask = torch.ones_like(ids)
    mask[0, 10:] = 0
    return dict(input_ids=ids, attention_mask=mask, labels=labels, sentence_order_label=torch.tensor([0, 1, 1]))


def _grads(model):
    model.zero_grad()
    loss = model(**_batch()).loss
    loss.backward()
    # named by state-dict key: the checkpoint wrapper adds its own level to parameter names only
    return loss.detach(), {n.replace("._checkpoint_wrapped_module", ""): p.grad.clone()
                           for n, p in model.named_parameters()}


@pytest.mark.parametrize("sharing", ["all", "none", "attention"])
def test_activation_checkpointing_keeps_loss_and_gradients(sharing):
    model = AlbertForPreTraining(get_preset("test", sharing=sharing))
    ref_loss, ref = _grads(model)
    ckpt = copy.deepcopy(model)
    wrapped = apply_activation_checkpointing(ckpt)
    assert wrapped == len(ckpt.albert.encoder.attention) + len(ckpt.albert.encoder.ffn)
    assert apply_activation_checkpointing(ckpt) == 0  # idempotent
    loss, grads = _grads(ckpt)
    assert torch.equal(loss, ref_loss)
    for n in ref:
        torch.testing.assert_close(grads[n], ref[n], rtol=1e-6, atol=1e-8, msg=n)
    assert set(ckpt.state_dict()) == set(model.state_dict())  # the keys do not change
    assert not any(hasattr(block, "_albertlm_checkpointed") for block in ckpt.modules())  # wrapped, not patched
    ckpt.load_state_dict(model.state_dict())  # and a plain model's checkpoint loads into the wrapped one


def test_single_process_wrap_is_identity():
    model = AlbertForPreTraining(get_preset("test"))
    assert wrap_data_parallel(model, DistContext()) is model
    assert maybe_compile(model, False) is model
    assert gradient_bytes(model) == 4 * model.num_parameters()


@pytest.mark.slow
def test_compile_keeps_the_numbers():
    model = AlbertForPreTraining(get_preset("test")).eval()
    compiled = maybe_compile(model, True)
    with torch.no_grad():
        a, b = model(**_batch()), compiled(**_batch())
    torch.testing.assert_close(a.loss, b.loss, rtol=1e-5, atol=1e-6)
