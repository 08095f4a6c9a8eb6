"""int8 quantization of the Linear layers: each shared block is quantized once and used by every
layer application, the quantized state is smaller (never a copy per layer), and a small trained
classifier predicts the same labels in int8 as in fp32."""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
from torch import nn

from albertlm.config import get_preset
from albertlm.errors import AlbertlmError
from albertlm.heads import AlbertForSequenceClassification
from albertlm.inference.quantize import INT8_BACKENDS, is_int8_linear, quantize_int8, state_bytes
from albertlm.model import FeedForward, SelfAttention

# torchao, the maintained backend, is an optional extra: test it where it is installed
BACKENDS = tuple(b for b in INT8_BACKENDS if b != "torchao" or importlib.util.find_spec("torchao"))


def quantize(model: nn.Module, backend: str) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # fbgemm's deprecation notice, tested below
        return quantize_int8(model, backend)


def trace_calls(model: nn.Module, inputs: dict) -> list[nn.Module]:
    """Every module called in one forward pass, in call order."""
    calls: list[nn.Module] = []
    handles = [m.register_forward_pre_hook(lambda mod, args: calls.append(mod)) for m in model.modules()]
    with torch.no_grad():
        model(**inputs)
    for h in handles:
        h.remove()
    return calls


def linear_like(m: nn.Module) -> bool:
    return isinstance(m, nn.Linear) or is_int8_linear(m) or type(m).__name__ == "Linear"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sharing, groups", [("all", 1), ("all", 2), ("attention", 1), ("none", 1)])
def test_every_applied_linear_is_the_one_quantized_copy(backend, sharing, groups):
    config = get_preset("test", num_hidden_layers=4, sharing=sharing, num_hidden_groups=groups)
    model = AlbertForSequenceClassification(config).eval()
    q = quantize(model, backend)
    ids = torch.randint(0, config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    calls = trace_calls(q, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})

    linears = [m for m in calls if linear_like(m)]
    assert linears and all(is_int8_linear(m) for m in linears)
    originals = {id(m) for m in model.modules() if isinstance(m, nn.Linear)}
    assert len({id(m) for m in linears}) == len(originals)  # every Linear used, none duplicated
    # Along the schedule, each application runs the quantized block the schedule names.
    encoder = q.albert.encoder
    schedule = config.block_schedule()
    assert [m for m in calls if isinstance(m, SelfAttention)] == [encoder.attention[a] for a, _ in schedule]
    assert [m for m in calls if isinstance(m, FeedForward)] == [encoder.ffn[f] for _, f in schedule]
    for block in (*encoder.attention, *encoder.ffn):
        assert all(is_int8_linear(m) for m in block.children() if linear_like(m))


@pytest.mark.parametrize("backend", BACKENDS)
def test_quantizing_does_not_multiply_the_bytes(backend):
    sizes = {}
    for layers in (1, 12):
        model = AlbertForSequenceClassification(get_preset("test", num_hidden_layers=layers)).eval()
        sizes[layers] = state_bytes(model), state_bytes(quantize(model, backend))
    assert sizes[1] == sizes[12]  # sharing all layers: the layer count costs no bytes, fp32 or int8
    fp32, int8 = sizes[12]
    assert int8 < fp32
    model = AlbertForSequenceClassification(get_preset("test", num_hidden_layers=12, sharing="none")).eval()
    assert state_bytes(quantize(model, backend)) < 0.6 * state_bytes(model)  # ~1/4 for the weights, plus fp32 biases, LayerNorms, scales


def test_a_linear_left_fp32_is_refused():
    class MyLinear(nn.Linear):  # torch.ao swaps exact nn.Linear types only, so this one would stay fp32
        pass

    model = AlbertForSequenceClassification(get_preset("test")).eval()
    model.classifier = MyLinear(model.config.hidden_size, 2)
    with pytest.raises(AlbertlmError, match="stayed fp32.*classifier"):
        quantize(model, "fbgemm")


def test_bad_requests_are_one_line():
    model = AlbertForSequenceClassification(get_preset("test")).eval()
    with pytest.raises(AlbertlmError, match="backend must be one of"):
        quantize_int8(model, "int4")
    with pytest.raises(AlbertlmError, match="fp32 model on the CPU"):
        quantize_int8(model.to(torch.bfloat16), "fbgemm")


def test_the_deprecated_backend_says_so():
    model = AlbertForSequenceClassification(get_preset("test")).eval()
    with pytest.warns(FutureWarning, match="deprecated"):
        quantize_int8(model, "fbgemm")


@pytest.mark.parametrize("backend", BACKENDS)
def test_int8_predictions_agree_with_fp32_on_a_trained_model(trained_classifier, backend):
    model, ids, labels = trained_classifier
    with torch.no_grad():
        fp32 = model(ids).logits
        int8 = quantize(model, backend)(ids).logits
    assert (fp32.argmax(-1) == labels).float().mean() > 0.9  # the model did learn the task
    assert (int8.argmax(-1) == fp32.argmax(-1)).float().mean() >= 0.97
    assert not torch.equal(int8, fp32)  # it really ran in int8
