"""The shared training step: accumulation equals one big batch; the global-norm clip; non-finite steps never touch weights."""

import copy

import pytest
import torch
from torch import nn

from albertlm.config import get_preset
from albertlm.distributed import DistContext
from albertlm.model import AlbertForPreTraining
from albertlm.optim import build_optimizer
from albertlm.train.loop import NonFiniteLossError, StepSettings, train_step
from albertlm.train.pretrain import _counts, _loss


def _batch(n, S=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 128, (n, S), generator=g)
    labels = torch.full((n, S), -100)
    pick = torch.rand(n, S, generator=g) < 0.25  # an uneven number of targets per example
    pick[:, 0] = False
    labels[pick] = ids[pick]
    mask = torch.ones(n, S, dtype=torch.long)
    mask[0, 12:] = 0
    labels[0, 12:] = -100
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
            "labels": labels, "sentence_order_label": torch.randint(0, 2, (n,), generator=g)}


def _split(batch, k):
    n = len(batch["input_ids"]) // k
    return [{key: v[i * n:(i + 1) * n] for key, v in batch.items()} for i in range(k)]


def _step(model, batches, settings=StepSettings()):
    opt = build_optimizer("lamb", model, lr=1e-3)
    out = train_step(model, opt, batches, lr=1e-3, loss_fn=_loss, count_fn=_counts, ctx=DistContext(),
                     settings=settings)
    return out


@pytest.mark.parametrize("k", [2, 4])
def test_accumulation_equals_one_big_batch(k):
    model = AlbertForPreTraining(get_preset("test"))
    other = copy.deepcopy(model)
    batch = _batch(8)
    big = _step(model, [batch])
    acc = _step(other, _split(batch, k))
    assert big["loss"] == pytest.approx(acc["loss"], rel=1e-6)
    assert big["grad_norm"] == pytest.approx(acc["grad_norm"], rel=1e-5)
    assert big["n_masked"] == acc["n_masked"]
    for (n, p), q in zip(model.named_parameters(), other.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=n)


def test_loss_matches_the_model_loss():
    model = AlbertForPreTraining(get_preset("test"))
    batch = _batch(4)
    with torch.no_grad():
        expected = float(model(**batch).loss)
    assert _step(model, [batch])["loss"] == pytest.approx(expected, rel=1e-6)


def test_step_clips_to_the_global_norm_and_reports_the_norm_before_clipping():
    """Official: tf.clip_by_global_norm(grads, 1.0) before each step; grad_norm is the unclipped norm."""
    x = torch.tensor([3.0, 4.0])  # the gradient of w·x, norm 5
    for clip_norm, expected in ((1.0, [-0.6, -0.8]), (None, [-3.0, -4.0])):
        model = nn.Linear(2, 1, bias=False)
        nn.init.zeros_(model.weight)
        out = train_step(model, torch.optim.SGD(model.parameters(), lr=1.0), [{"x": x}], lr=1.0,
                         loss_fn=lambda m, b, totals: (m(b["x"]).sum(), {}), count_fn=lambda b: {"n": 1.0},
                         ctx=DistContext(), settings=StepSettings(clip_norm=clip_norm))
        assert out["grad_norm"] == pytest.approx(5.0)
        torch.testing.assert_close(model.weight.detach()[0], torch.tensor(expected))

def _poison(model):
    with torch.no_grad():
        model.albert.project.weight[0, 0] = float("nan")


def test_nonfinite_step_is_skipped_and_weights_untouched():
    model = AlbertForPreTraining(get_preset("test"))
    _poison(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    out = _step(model, [_batch(4)])
    assert out["skipped"] == 1
    for n, p in model.named_parameters():
        assert torch.equal(before[n], p) or (torch.isnan(before[n]).any() and torch.equal(
            torch.nan_to_num(before[n]), torch.nan_to_num(p))), n
    assert all(p.grad is None for p in model.parameters())


def test_nonfinite_stop_raises_with_a_clear_message():
    model = AlbertForPreTraining(get_preset("test"))
    _poison(model)
    with pytest.raises(NonFiniteLossError, match="not updated"):
        _step(model, [_batch(4)], StepSettings(on_nonfinite="stop"))


def test_bf16_autocast_step_runs_on_cpu():
    model = AlbertForPreTraining(get_preset("test"))
    out = _step(model, [_batch(4)], StepSettings(precision="bf16"))
    assert out["skipped"] == 0 and out["loss"] > 0


def test_auto_precision_is_bf16_only_where_it_is_native(monkeypatch):
    from albertlm.train.loop import resolve_precision

    assert resolve_precision("fp32", torch.device("cpu")) == "fp32"
    assert resolve_precision("bf16", torch.device("cpu")) == "bf16"
    import builtins

    real_open = builtins.open

    def cpuinfo(flags):
        def fake(path, *a, **k):
            if path == "/proc/cpuinfo":
                import io
                return io.StringIO(f"processor\t: 0\nflags\t\t: {flags}\n")
            return real_open(path, *a, **k)
        return fake

    monkeypatch.setattr(builtins, "open", cpuinfo("fpu sse avx2 avx512f avx512_bf16"))
    assert resolve_precision("auto", torch.device("cpu")) == "bf16"
    monkeypatch.setattr(builtins, "open", cpuinfo("fpu sse avx2 avx512f avx512bw"))
    assert resolve_precision("auto", torch.device("cpu")) == "fp32"


def test_time_up_evaluates_that_step_and_stops():
    from albertlm.train.loop import Cadence, run_steps

    model = AlbertForPreTraining(get_preset("test"))
    evaluated, asked = [], []

    def time_up(done):
        asked.append(done)
        return done == 3

    steps = run_steps(model, build_optimizer("lamb", model, lr=1e-3), start=0, cadence=Cadence(10, 1, 100),
                      batches=lambda i: [_batch(2, seed=i)], lr=lambda i: 1e-3, loss_fn=_loss, count_fn=_counts,
                      ctx=DistContext(), settings=StepSettings(), on_log=lambda *a: None,
                      on_eval=lambda done: evaluated.append(done) or False, time_up=time_up)
    assert steps == 3 and evaluated == [3] and asked == [1, 2, 3]
