"""Patience-based early exit: the depth-weighted loss, the exit rule, batched = one at a time, the
saved directory (ours and transformers'), and the CLI end to end on the `test` preset."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from albertlm import get_preset
from albertlm.early_exit import (EarlyExitSequenceClassifier, EarlyExitTokenClassifier, depth_weighted_loss,
                                 has_exit_heads)
from albertlm.heads import AlbertForSequenceClassification, AlbertForTokenClassification


def _config(**changes):
    """The `test` preset (3 layer applications, all shared) without dropout."""
    return get_preset("test").replace(hidden_dropout_prob=0.0, classifier_dropout_prob=0.0, **changes)


def _batch(B: int = 5, S: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids [B, S] and a right-padded attention mask of mixed lengths (row 0 full length)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 128, (B, S), generator=g)
    lengths = torch.randint(3, S + 1, (B,), generator=g)
    lengths[0] = S
    mask = (torch.arange(S)[None] < lengths[:, None]).long()
    return ids * mask, mask


# ---------------------------------------------------------------------------- training
def test_depth_weighted_loss_is_the_formula():
    losses = [torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0)]
    assert depth_weighted_loss(losses).item() == pytest.approx((1 * 1 + 2 * 2 + 3 * 3) / (1 + 2 + 3))
    assert depth_weighted_loss([torch.tensor(0.7)]).item() == pytest.approx(0.7)


def test_training_loss_weights_every_layers_cross_entropy():
    model = EarlyExitSequenceClassifier(_config()).eval()
    ids, mask = _batch()
    labels = torch.tensor([0, 1, 1, 0, 1])
    out = model(ids, mask, labels=labels)
    assert out.layer_logits.shape == (3, 5, 2)
    per_layer = [F.cross_entropy(logits, labels) for logits in out.layer_logits]
    expected = (per_layer[0] + 2 * per_layer[1] + 3 * per_layer[2]) / 6
    torch.testing.assert_close(out.loss, expected)
    # every layer's classifier is trained: each gets a gradient
    out.loss.backward()
    assert all(h.weight.grad is not None and h.weight.grad.abs().sum() > 0 for h in [*model.exits, model.classifier])


def test_layer_logits_are_each_layers_pooled_cls_through_its_classifier():
    model = EarlyExitSequenceClassifier(_config()).eval()
    ids, mask = _batch()
    out = model(ids, mask, output_hidden_states=True)
    for i, h in enumerate(out.hidden_states[1:]):
        head = model.exits[i] if i < 2 else model.classifier
        expected = head(torch.tanh(model.albert.pooler(h[:, 0])))
        torch.testing.assert_close(out.layer_logits[i], expected)


def test_final_logits_are_the_plain_heads():
    for exit_cls, plain_cls in ((EarlyExitSequenceClassifier, AlbertForSequenceClassification),
                                (EarlyExitTokenClassifier, AlbertForTokenClassification)):
        model = exit_cls(_config(num_labels=3)).eval()
        assert has_exit_heads(model.config) and len(model.exits) == 2
        plain = plain_cls(_config(num_labels=3)).eval()
        plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("exits.")})
        ids, mask = _batch()
        torch.testing.assert_close(model(ids, mask).logits, plain(ids, mask).logits)


def test_token_loss_ignores_unlabelled_positions():
    model = EarlyExitTokenClassifier(_config(num_labels=4)).eval()
    ids, mask = _batch()
    labels = torch.randint(0, 4, ids.shape).masked_fill(mask == 0, -100)
    out = model(ids, mask, labels=labels)
    per_layer = [F.cross_entropy(lg.reshape(-1, 4), labels.reshape(-1), ignore_index=-100) for lg in out.layer_logits]
    torch.testing.assert_close(out.loss, depth_weighted_loss(per_layer))
