"""Checkpoints: complete or absent (never torn), pointers, pruning, exact restore."""

import os

import pytest
import torch

from albertlm.checkpoint import best_checkpoint, latest_checkpoint, load_checkpoint, save_checkpoint
from albertlm.config import get_preset
from albertlm.errors import AlbertlmError
from albertlm.model import AlbertForPreTraining
from albertlm.optim import build_optimizer


def _model_and_opt():
    model = AlbertForPreTraining(get_preset("test"))
    opt = build_optimizer("lamb", model, lr=1e-3)
    ids = torch.randint(5, 128, (2, 8))
    model(ids, labels=ids, sentence_order_label=torch.tensor([0, 1])).loss.backward()
    opt.step()
    return model, opt


def test_save_load_restores_everything(tmp_path):
    model, opt = _model_and_opt()
    torch.manual_seed(123)
    save_checkpoint(tmp_path, 5, model, opt, {"data": {"epoch": 1, "position": 7}}, metric=0.3)
    expected_draw = torch.rand(3)
    other, other_opt = AlbertForPreTraining(get_preset("test")), None
    other_opt = build_optimizer("lamb", other, lr=1e-3)
    state = load_checkpoint(latest_checkpoint(tmp_path), other, other_opt)
    assert state["step"] == 5 and state["data"] == {"epoch": 1, "position": 7}
    for (n, p), q in zip(model.state_dict().items(), other.state_dict().values()):
        assert torch.equal(p, q), n
    assert torch.equal(torch.rand(3), expected_draw)  # the RNG continues where it was saved
    s1, s2 = opt.state_dict()["state"], other_opt.state_dict()["state"]
    assert s1.keys() == s2.keys()
    for k in s1:
        for name in s1[k]:
            assert torch.equal(torch.as_tensor(s1[k][name]), torch.as_tensor(s2[k][name]))


def test_keep_last_and_best(tmp_path):
    model, opt = _model_and_opt()
    for step, metric in [(1, 0.5), (2, 0.1), (3, 0.2), (4, 0.3)]:
        save_checkpoint(tmp_path, step, model, opt, {}, keep_last=2, metric=metric)
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*"))
    assert names == ["step-00000001", "step-00000003", "step-00000004"]  # best (0.5) kept
    assert best_checkpoint(tmp_path).name == "step-00000001"
    assert latest_checkpoint(tmp_path).name == "step-00000004"


def test_a_crash_mid_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    model, opt = _model_and_opt()
    save_checkpoint(tmp_path, 1, model, opt, {"marker": "old"})
    real_rename = os.rename

    def dying_rename(src, dst):  # the process "dies" when the new checkpoint would appear
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "rename", dying_rename)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, model, opt, {"marker": "new"})
    monkeypatch.setattr(os, "rename", real_rename)
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt.name == "step-00000001"
    fresh = AlbertForPreTraining(get_preset("test"))
    assert load_checkpoint(ckpt, fresh)["marker"] == "old"
    assert not (tmp_path / "checkpoints" / "step-00000002").exists()


def test_wrong_model_is_refused(tmp_path):
    model, opt = _model_and_opt()
    save_checkpoint(tmp_path, 1, model, opt, {})
    bigger = AlbertForPreTraining(get_preset("test", hidden_size=64))
    with pytest.raises(AlbertlmError, match="another network"):
        load_checkpoint(latest_checkpoint(tmp_path), bigger)


def test_no_checkpoint(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    with pytest.raises(AlbertlmError, match="trainer.json"):
        load_checkpoint(tmp_path, AlbertForPreTraining(get_preset("test")))
