"""Layer smoothness (paper Figure 1): the distance/angle math, padding, and the model hook-up."""

import math

import pytest
import torch
from torch import nn

from albertlm import AlbertModel, get_preset
from albertlm.analysis.smoothness import angle_degrees, plot_smoothness, smoothness, transition_sums


def test_identity_gives_zero_distance_and_angle():
    h = torch.randn(2, 5, 16) * 10
    sums = transition_sums([h, h.clone(), h.clone()])
    assert sums["distance"].tolist() == [0.0, 0.0]
    assert sums["angle"].tolist() == [0.0, 0.0]  # exact: no arccos rounding near 1
    assert sums["cosine"] / sums["tokens"] == pytest.approx(torch.ones(2, dtype=torch.float64))


def test_known_angles_and_distances():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [3.0, 4.0]])
    y = torch.tensor([[0.0, 2.0], [-1.0, 0.0], [1.0, 1.0], [6.0, 8.0]])
    assert angle_degrees(x, y).tolist() == pytest.approx([90.0, 180.0, 45.0, 0.0], abs=1e-9)
    sums = transition_sums([x[None], y[None]])  # [1, 4, 2]
    assert float(sums["distance"][0]) == pytest.approx(math.sqrt(5) + 2 + 1 + 5)
    assert float(sums["angle"][0]) == pytest.approx(315.0)
    assert int(sums["tokens"]) == 4


def test_padding_is_excluded():
    a, b = torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    padded_a = torch.cat([a, torch.full((1, 2, 8), 1e6)], dim=1)
    padded_b = torch.cat([b, torch.full((1, 2, 8), -1e6)], dim=1)
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    with_pad = transition_sums([padded_a, padded_b], mask)
    without = transition_sums([a, b])
    for key in ("distance", "angle", "cosine", "tokens"):
        assert torch.allclose(with_pad[key], without[key])


class _PassThrough(nn.Module):
    def forward(self, x, mask=None):
        return x


def test_model_with_identity_layers_is_perfectly_smooth():
    config = get_preset("test", num_hidden_layers=4)
    model = AlbertModel(config)
    model.encoder.attention = nn.ModuleList([_PassThrough()])
    model.encoder.ffn = nn.ModuleList([_PassThrough()])
    batch = {"input_ids": torch.randint(5, config.vocab_size, (3, 7)),
             "attention_mask": torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])}
    out = smoothness(model, [batch])
    assert out["layers"] == 4 and out["tokens"] == 15
    assert out["distance"] == [0.0] * 4 and out["angle"] == [0.0] * 4


def test_real_model_curves_have_one_point_per_layer_call(tmp_path):
    config = get_preset("test", inner_group_num=2)
    model = AlbertModel(config)
    batch = {"input_ids": torch.randint(5, config.vocab_size, (2, 6))}
    out = smoothness(model, [batch, batch])
    assert out["layers"] == config.num_layer_calls == 6
    assert all(d > 0 for d in out["distance"]) and all(0 < a < 180 for a in out["angle"])
    assert model.training  # the model's mode is restored
    plot_smoothness({"test": out, "again": out}, tmp_path / "f.png", "title")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
