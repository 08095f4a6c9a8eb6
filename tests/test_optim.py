import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from albertlm.config import get_preset
from albertlm.errors import ConfigError
from albertlm.model import AlbertForPreTraining
from albertlm.optim import Lamb, build_optimizer, is_excluded, lr_at, param_groups, scaled_lr


def numpy_lamb(w, g, m, v, lr, wd, adapt, b1=0.9, b2=0.999, eps=1e-6):
    """The official update written out independently, float64."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    u = m / (np.sqrt(v) + eps) + wd * w
    r = 1.0
    if adapt:
        wn, un = np.linalg.norm(w), np.linalg.norm(u)
        r = wn / un if wn > 0 and un > 0 else 1.0
    return w - lr * r * u, m, v, r


@pytest.mark.parametrize("foreach", [True, False])
def test_two_steps_match_hand_computation(foreach):
    W0 = np.array([[1.0, -2.0], [0.5, 3.0]])        # decayed + adapted matrix
    b0 = np.array([0.1, -0.2])                       # excluded bias: no wd, r = 1
    Z0 = np.zeros((2, 2))                            # ‖w‖ = 0 → trust ratio 1.0
    grads = [(np.array([[0.3, -0.1], [0.2, 0.4]]), np.array([0.05, -0.5]), np.array([[1.0, 2.0], [0.0, -1.0]])),
             (np.array([[-0.2, 0.6], [0.1, 0.0]]), np.array([0.3, 0.1]), np.array([[0.5, 0.5], [0.5, 0.5]]))]
    W, b, Z = (nn.Parameter(torch.tensor(x)) for x in (W0, b0, Z0))
    lr, wd = 0.01, 0.1
    opt = Lamb([dict(params=[W, Z], weight_decay=wd, adapt=True),
                dict(params=[b], weight_decay=0.0, adapt=False)], lr=lr, foreach=foreach)
    ref = {k: (x.copy(), np.zeros_like(x), np.zeros_like(x)) for k, x in (("W", W0), ("b", b0), ("Z", Z0))}
    for gW, gb, gZ in grads:
        for p, gr in ((W, gW), (b, gb), (Z, gZ)):
            p.grad = torch.tensor(gr)
        opt.step()
        for k, gr, wd_k, adapt in (("W", gW, wd, True), ("b", gb, 0.0, False), ("Z", gZ, wd, True)):
            w, m, v = ref[k]
            w, m, v, r = numpy_lamb(w, gr, m, v, lr, wd_k, adapt)
            ref[k] = (w, m, v)
    np.testing.assert_allclose(W.detach().numpy(), ref["W"][0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.detach().numpy(), ref["b"][0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(Z.detach().numpy(), ref["Z"][0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(opt.state[W]["exp_avg"].numpy(), ref["W"][1], atol=1e-15)
    np.testing.assert_allclose(opt.state[W]["exp_avg_sq"].numpy(), ref["W"][2], atol=1e-15)


def test_first_step_literal_values():
    # One coordinate, no wd, no adaptation: m = 0.1·g, v = 0.001·g², update = lr·0.1g/(√0.001|g| + ε).
    w = nn.Parameter(torch.tensor([2.0], dtype=torch.float64))
    w.grad = torch.tensor([0.5], dtype=torch.float64)
    Lamb([w], lr=0.1, weight_decay=0.0, adapt=False).step()
    assert w.item() == pytest.approx(2.0 - 0.1 * 0.05 / (math.sqrt(0.001) * 0.5 + 1e-6), abs=1e-12)
    # Adapted: u ≈ 3.1621, r = ‖w‖/‖u‖, so w moves by exactly lr·‖w‖ (r·u = ‖w‖·sign(u)).
    w = nn.Parameter(torch.tensor([2.0], dtype=torch.float64))
    w.grad = torch.tensor([0.5], dtype=torch.float64)
    Lamb([w], lr=0.1, weight_decay=0.0, adapt=True).step()
    assert w.item() == pytest.approx(2.0 - 0.1 * 2.0, abs=1e-12)


def test_zero_update_norm_gives_ratio_one_and_no_nan():
    w = nn.Parameter(torch.ones(3, 3))
    w.grad = torch.zeros(3, 3)
    Lamb([w], weight_decay=0.0).step()                 # ‖u‖ = 0 → r = 1, update 0
    assert torch.equal(w, torch.ones(3, 3))


def test_no_bias_correction_first_step_differs_from_adam():
    g = torch.tensor([0.3, -2.0, 0.01], dtype=torch.float64)
    a = nn.Parameter(torch.zeros(3, dtype=torch.float64))
    b = nn.Parameter(torch.zeros(3, dtype=torch.float64))
    a.grad, b.grad = g.clone(), g.clone()
    Lamb([a], lr=1e-3, weight_decay=0.0, adapt=False, eps=0.0).step()
    torch.optim.Adam([b], lr=1e-3, eps=0.0).step()
    # Adam (bias-corrected) moves each coordinate by lr; official LAMB by lr·(1-β1)/√(1-β2) ≈ 3.162·lr.
    torch.testing.assert_close(b.abs(), torch.full_like(b, 1e-3))
    torch.testing.assert_close(a.abs(), torch.full_like(a, 1e-3 * 0.1 / math.sqrt(0.001)))


def test_foreach_matches_loop_on_albert():
    torch.manual_seed(0)
    base = AlbertForPreTraining(get_preset("test"))
    models = [base.eval(), copy.deepcopy(base).eval()]           # eval: no dropout, same grads
    opts = [Lamb(param_groups(m), lr=1e-2, foreach=f) for m, f in zip(models, (True, False))]
    ids = torch.randint(5, 128, (2, 12))
    for _ in range(3):
        for m, o in zip(models, opts):
            o.zero_grad()
            out = m(ids)
            (out.prediction_logits.square().mean() + out.sop_logits.square().mean()).backward()
            o.step()
    for (n, p), q in zip(models[0].named_parameters(), models[1].parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=n)


def test_excluded_params_get_neither_decay_nor_adaptation():
    lin = nn.Linear(3, 3)
    groups = param_groups(lin, weight_decay=0.5)
    assert [len(g["params"]) for g in groups] == [1, 1]
    assert groups[1]["params"][0] is lin.bias and groups[1]["weight_decay"] == 0.0 and not groups[1]["adapt"]
    # With a zero gradient only decay could move a parameter: the weight moves, the bias does not.
    for p in lin.parameters():
        p.grad = torch.zeros_like(p)
    w0, b0 = lin.weight.detach().clone(), lin.bias.detach().clone()
    Lamb(groups, lr=0.1).step()
    assert torch.equal(lin.bias, b0) and not torch.equal(lin.weight, w0)
    # Decayed + adapted with g = 0: u = wd·w, r = ‖w‖/‖wd·w‖ = 1/wd → w ← w - lr·w.
    torch.testing.assert_close(lin.weight, w0 * (1 - 0.1))


def test_albert_groups_and_mlm_bias():
    model = AlbertForPreTraining(get_preset("test"))
    decay, keep = param_groups(model)
    names = {id(p): n for n, p in model.named_parameters()}
    keep_names = {names[id(p)] for p in keep["params"]}
    decay_names = {names[id(p)] for p in decay["params"]}
    assert "mlm.bias" in keep_names and "albert.embeddings.norm.weight" in keep_names
    assert "albert.embeddings.word.weight" in decay_names and "albert.project.weight" in decay_names
    assert all(p.ndim == 2 for p in decay["params"]) and all(p.ndim == 1 for p in keep["params"])
    assert len(decay["params"]) + len(keep["params"]) == len(list(model.parameters()))
    assert is_excluded("encoder.LayerNorm.gamma", torch.ones(2, 2))


def test_shared_module_counted_once():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.again = self.lin                  # the same module registered under a second name
            self.norm = nn.LayerNorm(4)

        def forward(self, x):
            return self.norm(self.again(self.lin(x)))

    groups = param_groups(Twice())
    assert [len(g["params"]) for g in groups] == [1, 3]
    flat = [p for g in groups for p in g["params"]]
    assert len({id(p) for p in flat}) == len(flat)
    Lamb(groups)                                   # torch rejects duplicates across groups


def test_state_dict_round_trip():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    opt = build_optimizer("lamb", model, lr=1e-2)
    xs = [torch.randn(3, 5) for _ in range(6)]

    def step(m, o, x):
        o.zero_grad()
        m(x).square().sum().backward()
        o.step()

    for x in xs[:3]:
        step(model, opt, x)
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    for x in xs[3:]:
        step(model, opt, x)
    model2 = nn.Sequential(nn.Linear(5, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    model2.load_state_dict(saved_model)
    opt2 = build_optimizer("lamb", model2, lr=1e-2)
    opt2.load_state_dict(saved_opt)
    for x in xs[3:]:
        step(model2, opt2, x)
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)


def test_build_optimizer():
    model = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))
    adamw = build_optimizer("adamw", model, lr=1e-3)
    assert type(adamw) is torch.optim.AdamW
    assert [g["weight_decay"] for g in adamw.param_groups] == [0.01, 0.0]
    model(torch.randn(2, 3)).sum().backward()
    adamw.step()
    assert isinstance(build_optimizer("lamb", model), Lamb)
    with pytest.raises(ConfigError):
        build_optimizer("sgd", model)


def test_schedule_endpoints_follow_official_formula():
    base, w, T = 0.00176, 3125, 125000
    assert lr_at(0, base, w, T) == 0.0
    assert lr_at(w // 2, base, w, T) == pytest.approx(base * (w // 2) / w)
    assert lr_at(w - 1, base, w, T) == pytest.approx(base * (w - 1) / w)
    # At the end of warmup the polynomial decay, counted from step 0, has already run w/T of the way.
    assert lr_at(w, base, w, T) == pytest.approx(base * (1 - w / T))
    assert lr_at(62500, base, w, T) == pytest.approx(base * 0.5)
    assert lr_at(T, base, w, T) == 0.0 and lr_at(T + 100, base, w, T) == 0.0
    assert lr_at(T + 5, 1.0, 0, T, end_lr=0.1) == pytest.approx(0.1)
    assert lr_at(50, 1.0, 0, 100, power=2.0) == pytest.approx(0.25)
    assert lr_at(0, 1.0, 0, 100) == 1.0               # no warmup: the first step at the peak
    with pytest.raises(ConfigError):
        lr_at(-1, base, w, T)


def test_schedule_monotone():
    base, w, T = 1.0, 10, 100
    lrs = [lr_at(s, base, w, T) for s in range(T + 10)]
    assert all(a < b for a, b in zip(lrs[:w - 1], lrs[1:w]))              # rising through warmup
    assert all(a >= b for a, b in zip(lrs[w - 1:], lrs[w:]))              # never rising afterwards
    assert max(lrs) == lrs[w - 1] and max(lrs) <= base


def test_scaled_lr():
    assert scaled_lr(4096) == pytest.approx(0.00176)
    assert scaled_lr(256) == pytest.approx(0.00044)
    assert scaled_lr(256, rule="linear") == pytest.approx(0.00011)
    assert scaled_lr(1024, base_lr=1.0, base_batch=256) == pytest.approx(2.0)
    with pytest.raises(ConfigError):
        scaled_lr(256, rule="cubic")
    with pytest.raises(ConfigError):
        scaled_lr(0)
