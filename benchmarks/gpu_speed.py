"""Training and inference speed on a CUDA GPU, albertlm against transformers, with MFU.

For each preset: a pretraining step (forward, backward, AdamW step) and a forward pass, bf16 autocast,
batch x 512 tokens, for our AlbertForPreTraining and transformers' (the same weights, loaded from
one directory), timed with CUDA events as the median of `--repeats` after warm-up. MFU is
the model FLOPs per second (analysis/params.flops_per_token: 6 per weight per token for training,
2 for inference, attention scores included) over the GPU's peak bf16 rate (`--peak-tflops`;
the H200's dense bf16 peak, 989 TFLOP/s, by default).

    python -m benchmarks.gpu_speed --out gpu-speed.json

Output: the results envelope (benchmarks/harness.py) in --out.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from albertlm import AlbertForPreTraining, get_preset
from albertlm.analysis.params import flops_per_token
from benchmarks.harness import envelope, write_result

SEED = 0


def _batch(config, batch: int, seq: int, device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(5, config.vocab_size, (batch, seq), generator=g)
    labels = torch.full_like(ids, -100)
    picks = torch.rand(batch, seq, generator=g) < 0.15
    labels[picks] = ids[picks]
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device),
            "token_type_ids": torch.zeros_like(ids).to(device), "labels": labels.to(device),
            "sentence_order_label": torch.randint(0, 2, (batch,), generator=g).to(device)}


def _time(fn, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return statistics.median(times)


def measure(preset: str, batch: int, seq: int, repeats: int, peak: float) -> dict:
    import transformers

    device = torch.device("cuda")
    config = get_preset(preset, max_position_embeddings=max(512, seq))
    torch.manual_seed(SEED)
    ours = AlbertForPreTraining(config)
    with tempfile.TemporaryDirectory() as d:
        ours.save_pretrained(d)
        theirs = transformers.AlbertForPreTraining.from_pretrained(d, attn_implementation="sdpa")
    data = _batch(config, batch, seq, device)  # both classes take the same keyword arguments
    tokens = batch * seq
    row = {"preset": preset, "batch": batch, "seq_len": seq, "parameters": ours.num_parameters()}
    for name, model in (("albertlm", ours), ("transformers", theirs)):
        model = model.to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def train():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(**data).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        def infer():
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                model(input_ids=data["input_ids"], attention_mask=data["attention_mask"])

        model.train()
        train_s = _time(train, repeats)
        model.eval()
        infer_s = _time(infer, repeats)
        row[name] = {
            "train_seconds": train_s, "train_tokens_per_s": tokens / train_s,
            "train_mfu": flops_per_token(config, seq, training=True) * tokens / train_s / (peak * 1e12),
            "infer_seconds": infer_s, "infer_tokens_per_s": tokens / infer_s,
            "infer_mfu": flops_per_token(config, seq, training=False) * tokens / infer_s / (peak * 1e12),
            "peak_memory_bytes": torch.cuda.max_memory_allocated()}
        model.to("cpu")
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    row["train_speedup_vs_transformers"] = row["transformers"]["train_seconds"] / row["albertlm"]["train_seconds"]
    row["infer_speedup_vs_transformers"] = row["transformers"]["infer_seconds"] / row["albertlm"]["infer_seconds"]
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=["albert-base", "albert-large", "bert-base"])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's dense bf16 peak (H200: 989)")
    p.add_argument("--out", default="gpu-speed.json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.gpu_speed needs a CUDA device")
    started = time.perf_counter()
    result = {"peak_tflops": args.peak_tflops, "rows": []}
    for preset in args.presets:
        row = measure(preset, args.batch, args.seq_len, args.repeats, args.peak_tflops)
        result["rows"].append(row)
        a, h = row["albertlm"], row["transformers"]
        print(f"{preset}: train {a['train_tokens_per_s']:,.0f} tok/s (MFU {a['train_mfu']:.1%}) vs transformers "
              f"{h['train_tokens_per_s']:,.0f} ({row['train_speedup_vs_transformers']:.2f}x); inference "
              f"{a['infer_tokens_per_s']:,.0f} tok/s vs {h['infer_tokens_per_s']:,.0f} "
              f"({row['infer_speedup_vs_transformers']:.2f}x)", flush=True)
    write_result(envelope("benchmarks.gpu_speed", argv, result, started=started), args.out)


if __name__ == "__main__":
    main()
