"""How fast a network learns to read a masked token off its visible neighbour: the unigram plateau in a bottle.

    python -m experiments.neighbour_task                                   # ALBERT, official init, no warmup
    python -m experiments.neighbour_task --token-type zero --projection unit --warmup 50 --seq-len 16
    python -m experiments.neighbour_task --reference                       # torch's post-LN encoder

Sequences of random tokens in pairs (a a b b c c ...) after [CLS]; the first token of three pairs
is replaced by [MASK], so the answer is always the token right after it. A network that attends to
its neighbour solves it; one that has not learned to sits at log(V) loss. The script reports the
first step at which the running accuracy (10 steps) passes 50%, or none, and the final accuracy,
for each seed, as one line of JSON (the results envelope of benchmarks/harness.py; lines appended to
benchmarks/results/neighbour-task/results.jsonl make its table). docs/pretraining.md explains what it
showed. Runs on one CPU thread, ~10-60 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from torch import nn

from albertlm import AlbertForPreTraining, get_preset
from albertlm.vocab import CLS_ID, IGNORE_INDEX, MASK_ID, NUM_SPECIAL
from albertlm.optim import build_optimizer
from benchmarks.harness import envelope


def batch(g: torch.Generator, B: int, S: int, V: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and labels [B, S]: pairs of random tokens, the first of three pairs masked."""
    x = torch.randint(NUM_SPECIAL, V, (B, S // 2), generator=g).repeat_interleave(2, dim=1)  # [B, S]
    x[:, 0] = CLS_ID
    pos = torch.randint(1, S // 2, (B, 3), generator=g) * 2  # [B, 3]: first token of a pair
    rows = torch.arange(B)[:, None]
    labels = torch.full_like(x, IGNORE_INDEX)
    labels[rows, pos] = x[rows, pos]
    ids = x.clone()
    ids[rows, pos] = MASK_ID
    return ids, labels


class Reference(nn.Module):
    """torch's post-LN nn.TransformerEncoder with ALBERT's N(0, 0.02) init and tied decoder, no E→H projection."""

    def __init__(self, V: int, H: int, L: int, heads: int, S: int):
        super().__init__()
        self.word, self.position, self.norm = nn.Embedding(V, H), nn.Embedding(S, H), nn.LayerNorm(H)
        layer = nn.TransformerEncoderLayer(H, heads, 4 * H, dropout=0.0, batch_first=True, activation="gelu")
        self.layers = nn.ModuleList([layer] * L)  # all shared
        self.dense, self.head_norm, self.bias = nn.Linear(H, H), nn.LayerNorm(H), nn.Parameter(torch.zeros(V))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.MultiheadAttention):
                nn.init.normal_(m.in_proj_weight, 0.0, 0.02)
                nn.init.zeros_(m.in_proj_bias)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.word(ids) + self.position(torch.arange(ids.shape[1])))  # [B, S, H]
        for layer in self.layers:
            h = layer(h)
        h = h[labels != IGNORE_INDEX]  # [N, H]
        return self.head_norm(nn.functional.gelu(self.dense(h))) @ self.word.weight.T + self.bias  # [N, V]


def run(args: argparse.Namespace, seed: int) -> dict:
    torch.manual_seed(seed)
    if args.reference:
        model = Reference(args.vocab, args.hidden, args.layers, args.heads, args.seq_len)
    else:
        config = get_preset("albert-tiny", vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                            num_attention_heads=args.heads, intermediate_size=4 * args.hidden,
                            embedding_size=args.embedding)
        model = AlbertForPreTraining(config)
        model.init_embeddings(args.position, args.token_type, args.projection)
    optimizer = build_optimizer("adamw", model, lr=args.lr)
    g = torch.Generator().manual_seed(1000 + seed)
    accs = []
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / args.warmup) if args.warmup else args.lr
        ids, labels = batch(g, args.batch, args.seq_len, args.vocab)
        if args.reference:
            logits = model(ids, labels)
        else:
            logits = model(ids, labels=labels).prediction_logits  # [N, V]
        targets = labels[labels != IGNORE_INDEX]
        loss = nn.functional.cross_entropy(logits.float(), targets)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        accs.append(float((logits.argmax(-1) == targets).float().mean()))
    solved = next((i for i in range(len(accs) - 9) if sum(accs[i:i + 10]) / 10 > 0.5), None)
    return {"seed": seed, "solved_at_step": solved, "final_accuracy": sum(accs[-20:]) / 20}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reference", action="store_true", help="torch's post-LN encoder instead of ALBERT")
    p.add_argument("--position", default="normal", choices=["normal", "sinusoidal"])
    p.add_argument("--token-type", default="normal", choices=["normal", "zero"])
    p.add_argument("--projection", default="normal", choices=["normal", "unit"])
    p.add_argument("--warmup", type=int, default=0, help="linear warmup steps (0: none)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--embedding", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=200)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seeds", type=int, nargs="*", default=[0])
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    results = [run(args, s) for s in args.seeds]
    print(json.dumps(envelope("experiments.neighbour_task", argv, {"settings": vars(args), "results": results},
                              started=started)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
