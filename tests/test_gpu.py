"""The CUDA paths: bf16 and fp16 (with the gradient scaler) training steps, the flash attention
kernel against the math kernel, torch.compile, and DDP over nccl. Skipped without a GPU; run by
`benchmarks/gpu_check.sh` on a machine that has one."""

import os
import subprocess
import sys

import pytest
import torch

from albertlm import AlbertForPreTraining, get_preset
from albertlm.distributed import DistContext
from albertlm.train.loop import StepSettings, make_scaler, resolve_precision, train_step

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _batch(config, device, B=4, S=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (B, S), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, 5:S:7] = ids[:, 5:S:7]
    mask = torch.ones_like(ids)
    mask[0, S // 2:] = 0  # one padded row
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "labels": labels.to(device),
            "token_type_ids": torch.zeros_like(ids).to(device),
            "sentence_order_label": torch.randint(0, 2, (B,), generator=g).to(device)}


def _loss(model, batch, totals):
    out = model(**batch)
    return out.loss, {"loss_sum": float(out.loss.detach())}


def _counts(batch):
    return {"examples": float(len(batch["input_ids"]))}


def _steps(precision, steps=3):
    device = torch.device("cuda")
    torch.manual_seed(0)
    config = get_preset("test")
    model = AlbertForPreTraining(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    settings = StepSettings(precision=precision, clip_norm=1.0)
    scaler = make_scaler(settings, device)
    ctx = DistContext(device=device)
    losses = []
    for k in range(steps):
        m = train_step(model, optimizer, [_batch(config, device, seed=k)], lr=1e-3, loss_fn=_loss, count_fn=_counts,
                       ctx=ctx, settings=settings, scaler=scaler)
        losses.append(m["loss"])
    return losses, scaler


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_steps_follow_fp32(precision):
    reference, _ = _steps("fp32")
    losses, scaler = _steps(precision)
    assert (scaler is not None) == (precision == "fp16")  # fp16 needs the gradient scaler, bf16 does not
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses == pytest.approx(reference, rel=0.05)  # the same training, up to half-precision rounding


def test_auto_precision_is_bf16_on_a_bf16_gpu():
    if torch.cuda.is_bf16_supported():
        assert resolve_precision("auto", torch.device("cuda")) == "bf16"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_flash_attention_matches_the_math_kernel(dtype):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    config = get_preset("test", num_attention_heads=4, max_position_embeddings=128)  # S=128 below
    model = AlbertForPreTraining(config).cuda().to(dtype).eval()
    batch = _batch(config, torch.device("cuda"), S=128)
    batch.pop("attention_mask")  # the flash kernel takes no mask: unpadded input
    with torch.no_grad():
        with sdpa_kernel([SDPBackend.MATH]):
            ref = model(**batch).prediction_logits.float()
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # raises if the kernel cannot take our inputs
            out = model(**batch).prediction_logits.float()
    assert torch.allclose(out, ref, atol=3e-2, rtol=3e-2)


def test_compiled_model_matches_eager_on_cuda():
    from albertlm.distributed import maybe_compile

    torch.manual_seed(0)
    config = get_preset("test")
    model = AlbertForPreTraining(config).cuda().eval()
    batch = _batch(config, torch.device("cuda"))
    with torch.no_grad():
        eager = model(**batch).loss
        compiled = maybe_compile(model, True)(**batch).loss
    assert torch.allclose(eager, compiled, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="DDP over nccl needs two GPUs")
def test_ddp_over_nccl_trains(tmp_path):
    corpus = tmp_path / "c.txt"
    from conftest import write_story_corpus

    write_story_corpus(corpus, documents=60)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "albertlm.cli", "pretrain",
           "--preset", "test", "--corpus", str(corpus), "--vocab-size", "64", "--max-seq-length", "64",
           "--batch-size", "8", "--steps", "6", "--curriculum-steps", "0", "--device", "cuda",
           "--out-dir", str(tmp_path), "--name", "ddp", "--no-progress"]
    done = subprocess.run(cmd, env={**os.environ}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (tmp_path / "ddp" / "model" / "model.safetensors").exists()
