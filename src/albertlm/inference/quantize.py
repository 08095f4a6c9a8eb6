"""Dynamic int8 quantization of the Linear layers, for CPU inference.

Every Linear weight is stored as int8 with one scale per output row; each activation is quantized
to int8 on the fly, the product runs in int8 with int32 accumulation and the result comes back in
fp32. Embeddings, LayerNorms, attention scores and the MLM decoder (tied to the word embedding,
a matrix, not a Linear module) stay fp32.

ALBERT applies one block to several layers (`AlbertConfig.block_schedule`). The encoder holds each
distinct block once in its ModuleLists and indexes them by the schedule, so a quantizer that walks
the module tree swaps each shared Linear once and every application uses the swapped one.
`quantize_int8` checks this after the fact: no fp32 Linear may remain, and the quantized state may
not be larger than the fp32 one (a copy per application would multiply it).

Two backends, chosen by measurement (docs/benchmarks.md, "int8 and ONNX"):
  fbgemm   torch.ao.quantization.quantize_dynamic, PyTorch's fbgemm/oneDNN int8 kernels. PyTorch
           marks this API deprecated (it still ships in torch 2.13); its kernels were 2.4-3.1x
           faster than torchao's on the AVX-512 CPU of the benchmarks, so it is the default. Its
           deprecation notice is passed on as one warning of ours, not hidden.
  torchao  torchao.quantization.quantize_ with Int8DynamicActivationInt8WeightConfig, the
           maintained API (pip install torchao). Same arithmetic; on CPU its eager path spends
           most of its time converting int32 results back, so it gains less.
"""

from __future__ import annotations

import copy
import io
import typing
import warnings

import torch
from torch import nn

from albertlm.errors import AlbertlmError

Int8Backend = typing.Literal["fbgemm", "torchao"]
"""The int8 kernels (see the module docstring); the first is the default."""
INT8_BACKENDS: tuple[str, ...] = typing.get_args(Int8Backend)


def quantize_int8(model: nn.Module, backend: str = "fbgemm") -> nn.Module:
    """An inference-only copy of `model` with dynamic int8 Linear layers; `model` is untouched.

    Args:
        model: any albertlm module on the CPU, in fp32.
        backend: "fbgemm" (default, fastest on x86 CPUs) or "torchao" (the maintained API); see
            the module docstring.
    Returns:
        the quantized copy in eval mode. Its logits differ from the fp32 model's by the int8
        rounding (about 1e-2 relative); its state_dict is not the HF layout: keep the original
        for saving.
    Raises:
        AlbertlmError: unknown backend, a model that is not fp32 on the CPU, torchao missing, or a
            Linear left in fp32 after quantization.
    """
    if backend not in INT8_BACKENDS:
        raise AlbertlmError(f"int8 backend must be one of {', '.join(INT8_BACKENDS)}, got {backend!r}")
    if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in model.parameters()):
        raise AlbertlmError("int8 quantization takes an fp32 model on the CPU (--device cpu)")
    fp32_bytes = state_bytes(model)
    qmodel = copy.deepcopy(model).eval()
    if backend == "torchao":
        _quantize_torchao(qmodel)
    else:
        qmodel = _quantize_fbgemm(qmodel)
    left = [name for name, m in qmodel.named_modules() if isinstance(m, nn.Linear) and not is_int8_linear(m)]
    if left:
        raise AlbertlmError(f"int8 ({backend}): {len(left)} Linear layer(s) stayed fp32, first {left[0]}")
    if state_bytes(qmodel) > fp32_bytes:
        raise AlbertlmError(f"int8 ({backend}): the quantized model holds more bytes than the fp32 one; "
                            "shared layers were copied")
    return qmodel


def _quantize_fbgemm(model: nn.Module) -> nn.Module:
    """torch.ao's dynamic quantization; its deprecation notices become one warning of ours."""
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        qmodel = quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    notices = [str(w.message).splitlines()[0] for w in caught if issubclass(w.category, (DeprecationWarning,
                                                                                         FutureWarning, UserWarning))]
    if notices:
        warnings.warn(f"int8 backend fbgemm uses torch.ao.quantization.quantize_dynamic, which PyTorch has "
                      f"deprecated ({notices[0]}); it is kept as the default because its CPU kernels are the "
                      "fastest measured (docs/benchmarks.md); backend 'torchao' uses the maintained API",
                      FutureWarning, stacklevel=3)
    return qmodel


def _quantize_torchao(model: nn.Module) -> None:
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except ImportError:
        raise AlbertlmError("int8 backend torchao needs torchao: pip install 'albertlm[int8]'") from None
    quantize_(model, Int8DynamicActivationInt8WeightConfig())  # every nn.Linear, in place, each module once


def is_int8_linear(module: nn.Module) -> bool:
    """Whether `module` is a Linear whose weight is int8 (either backend)."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

    if isinstance(module, DynamicQuantizedLinear):
        return True
    qdata = getattr(getattr(module, "weight", None), "qdata", None)  # torchao's Int8Tensor
    return isinstance(module, nn.Linear) and isinstance(qdata, torch.Tensor) and qdata.dtype == torch.int8


def state_bytes(model: nn.Module) -> int:
    """Bytes of `model`'s state_dict as torch.save writes it (shared tensors stored once; packed int8
    weights and quantized tensor types included)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()
