"""Parameter, FLOP and communication accounting, exact and analytic, from an AlbertConfig alone.

ALBERT's two reductions (paper §3.1) shrink the *parameter* count: the factorized embedding turns
O(V·H) into O(V·E + E·H), and cross-layer sharing stores one layer's weights instead of L. They do
not shrink the *compute*: every layer application still runs a full H-wide layer (paper §4.3,
Table 2: ALBERT-xxlarge trains ~3x slower than BERT-large with 70% of its parameters). What the
parameter count does cut is memory and the gradient that data-parallel training all-reduces each
step (paper §3.1, "lower communication").

`albertlm params` prints all three for every preset and the paper's ablation grids (Tables 1, 3, 4).
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict, dataclass

from albertlm.analysis.results import AccountingRow, to_plain
from albertlm.config import PRESETS, AlbertConfig
from albertlm.errors import AlbertlmError

SEQ_LEN = 512
"""Sequence length of the FLOP columns: the paper's pretraining length."""
MASKED_FRACTION = 0.15
"""Share of positions the MLM head runs on (paper §4.1: 15% of tokens are masked)."""
BATCH_TOKENS = 4096 * SEQ_LEN
"""Tokens per pretraining step: batch 4096 of 512-token sequences (paper §4.1)."""
PAPER_TOLERANCE_M = 2.0
"""How far (in millions) the analytic count may sit from the paper's rounded figure."""


# ---------------------------------------------------------------------------- parameter counts
@dataclass(frozen=True)
class ParamCount:
    """Distinct trainable parameters of one config, part by part (shared/tied ones once)."""

    embeddings: int
    """Word V×E + position P×W + token type T×W tables and their LayerNorm (2W), where W is
    `config.embedding_width`; albert_zh's layout adds its bias-free word projection E·H (W = H)."""
    projection: int
    """E→H projection E·H + H (HF and our model keep it even when E == H; TF omits it then); 0 in
    albert_zh's layout, which projects the words instead."""
    attention_block: int
    """One attention block: fused QKV 3H²+3H, output H²+H, LayerNorm 2H."""
    num_attention_blocks: int
    """Distinct attention blocks under the sharing strategy."""
    ffn_block: int
    """One FFN block: up H·I+I, down I·H+H, LayerNorm 2H."""
    num_ffn_blocks: int
    """Distinct FFN blocks under the sharing strategy."""
    pooler: int
    """Pooler H·H + H."""
    mlm_head: int
    """MLM head: dense H·W+W, LayerNorm 2W, output bias V (decoder tied to the word table)."""
    sop_head: int
    """SOP classifier 2H + 2."""

    @property
    def attention(self) -> int:
        return self.attention_block * self.num_attention_blocks

    @property
    def ffn(self) -> int:
        return self.ffn_block * self.num_ffn_blocks

    @property
    def backbone(self) -> int:
        """AlbertModel: embeddings + projection + distinct blocks + pooler (no pretraining heads)."""
        return self.embeddings + self.projection + self.attention + self.ffn + self.pooler

    @property
    def with_heads(self) -> int:
        """AlbertForPreTraining: the backbone plus the MLM and SOP heads."""
        return self.backbone + self.mlm_head + self.sop_head


def count_parameters(config: AlbertConfig) -> ParamCount:
    """Count parameters analytically, without building the model.

    Args:
        config: the model's shape and sharing strategy.
    Returns:
        ParamCount; `.backbone` equals `AlbertModel(config).num_parameters()` and `.with_heads`
        equals `AlbertForPreTraining(config).num_parameters()`.
    """
    V, E, H, I = config.vocab_size, config.embedding_size, config.hidden_size, config.intermediate_size
    P, T, W = config.max_position_embeddings, config.type_vocab_size, config.embedding_width
    word_projection = E * H if config.projects_words else 0
    return ParamCount(
        embeddings=V * E + word_projection + (P + T) * W + 2 * W,
        projection=0 if config.projects_words else E * H + H,
        attention_block=4 * H * H + 4 * H + 2 * H,
        num_attention_blocks=config.num_attention_blocks,
        ffn_block=2 * H * I + I + H + 2 * H,
        num_ffn_blocks=config.num_ffn_blocks,
        pooler=H * H + H,
        mlm_head=H * W + W + 2 * W + V,
        sop_head=2 * H + 2,
    )


# ---------------------------------------------------------------------------- compute and communication
def flops_per_token(config: AlbertConfig, seq_len: int = SEQ_LEN, training: bool = True,
                    mlm_fraction: float = MASKED_FRACTION) -> float:
    """FLOPs per token of one pretraining step (training) or one forward pass.

    Convention (Kaplan et al. 2020): a multiply-add is 2 FLOPs, the backward pass costs twice the
    forward, so training is 6 and a forward pass 2 FLOPs per weight applied per token. Only matmul
    weights count; biases, LayerNorm, GELU, softmax and embedding lookups are left out. Shared
    weights count once per *application* (sharing saves parameters, not compute, paper §4.3).
    Terms per token:
      - E→H projection E·H (of the summed embeddings, or of the words in albert_zh's layout);
      - per layer application 4H² (attention) + 2H·I (FFN), plus attention scores QKᵀ and the
        context AV over all S keys: 2·S·H FLOPs each forward, i.e. 4·S·H, times 3 when training;
      - MLM head H·W + E·V (the tied decoder is a matmul too; W·E more through albert_zh's tied
        word projection) on `mlm_fraction` of the positions,
        as our model runs it only on the labelled ones (default 15%; the official recipe's cap of
        20 predictions per 512 tokens is 0.039, and 1.0 gives dense logits);
      - pooler H² and SOP head 2H once per sequence, i.e. divided by S.
    tests/test_params.py checks this exactly against torch.utils.flop_counter on a tiny model.

    Args:
        config: the model's shape.
        seq_len: S, the sequence length the attention terms assume.
        training: forward + backward (x3) when True, forward only otherwise.
        mlm_fraction: share of positions the MLM head runs on; 0 leaves it out.
    Returns:
        FLOPs per token (a float because of the per-sequence and per-mask terms).
    """
    E, H, I, V = config.embedding_size, config.hidden_size, config.intermediate_size, config.vocab_size
    W = config.embedding_width
    calls = config.num_layer_calls
    weights = E * H + calls * (4 * H * H + 2 * H * I)
    # MLM head H→W, then back to E through the tied word projection when there is one (albert_zh)
    back = W * E if config.projects_words else 0
    weights += mlm_fraction * (H * W + back + E * V) + (H * H + 2 * H) / seq_len
    attention = calls * 4 * seq_len * H
    factor = 3 if training else 1
    return factor * (2 * weights + attention)


def allreduce_bytes(config: AlbertConfig, dtype_bytes: int = 4, heads: bool = True) -> int:
    """Bytes of gradient that data-parallel training all-reduces every step.

    One gradient per *distinct* parameter, so sharing divides it by up to L (paper §3.1):
    ALBERT-large sends ~18M x 4 B = 71 MB where BERT-large sends ~336M x 4 B = 1.35 GB. It does not
    depend on the batch size. A ring all-reduce moves about 2(n-1)/n times this per rank.

    Args:
        config: the model's shape.
        dtype_bytes: bytes per gradient element: 4 for fp32 gradients, 2 for bf16.
        heads: include the MLM and SOP heads (pretraining) or only the backbone.
    Returns:
        Bytes per step.
    """
    count = count_parameters(config)
    return (count.with_heads if heads else count.backbone) * dtype_bytes


# ---------------------------------------------------------------------------- the paper's grids
def paper_rows() -> list[tuple[str, str, AlbertConfig, float | None]]:
    """(table, name, config, the paper's printed parameter figure in millions or None).

    Table 1 for the presets (None where the paper prints none); Tables 3 and 4 vary E and the
    sharing strategy of the ALBERT-base shape (H=768, L=12, 12 heads, I=3072, V=30000).
    """
    table1 = {"bert-base": 108, "bert-large": 334, "albert-base": 12, "albert-large": 18,
              "albert-xlarge": 60, "albert-xxlarge": 235}
    rows = [("1", name, config, table1.get(name)) for name, config in PRESETS.items()]
    base = PRESETS["albert-base"]
    table3 = {("none", 64): 87, ("none", 128): 89, ("none", 256): 93, ("none", 768): 108,
              ("all", 64): 10, ("all", 128): 12, ("all", 256): 16, ("all", 768): 31}
    for (sharing, E), figure in table3.items():
        rows.append(("3", f"t3-e{E}-{sharing}", base.replace(embedding_size=E, sharing=sharing), figure))
    table4 = {(768, "all"): 31, (768, "attention"): 83, (768, "ffn"): 57, (768, "none"): 108,
              (128, "all"): 12, (128, "attention"): 64, (128, "ffn"): 38, (128, "none"): 89}
    for (E, sharing), figure in table4.items():
        rows.append(("4", f"t4-e{E}-{sharing}", base.replace(embedding_size=E, sharing=sharing), figure))
    return rows


# The paper's figures match the *backbone* count (embeddings + E→H + distinct layers + pooler, no
# heads), all within 2M. The one exception:
XXLARGE_NOTE = ("albert-xxlarge: the arithmetic gives 222.6M (HF and Keras agree for the released "
                "model); the paper prints 235M in Table 1 and 233M in its text.")


def accounting(seq_len: int = SEQ_LEN, batch_tokens: int = BATCH_TOKENS) -> list[AccountingRow]:
    """One record per preset and ablation row: counts, the paper's figure, FLOPs, communication.

    Args:
        seq_len: S for the FLOP columns; capped at each config's max_position_embeddings.
        batch_tokens: tokens per training step for `train_flops_per_step`.
    Returns:
        One AccountingRow per row of `paper_rows`, in its order. `infer_flops_per_token` is the
        backbone's forward pass (no MLM head); `train_flops_per_token` a full pretraining step.
    """
    records = []
    for table, name, config, figure in paper_rows():
        count = count_parameters(config)
        S = min(seq_len, config.max_position_embeddings)
        train = flops_per_token(config, S, training=True)
        diff = None if figure is None else count.backbone / 1e6 - figure
        records.append(AccountingRow(
            table=table, name=name, layers=config.num_hidden_layers, hidden=config.hidden_size,
            embedding=config.embedding_size, sharing=config.sharing, backbone=count.backbone,
            with_heads=count.with_heads, breakdown={**asdict(count), "attention": count.attention, "ffn": count.ffn},
            paper_M=figure, diff_M=None if diff is None else round(diff, 3),
            within_tolerance=None if diff is None else abs(diff) <= PAPER_TOLERANCE_M,
            note=XXLARGE_NOTE if name == "albert-xxlarge" else None, seq_len=S, train_flops_per_token=train,
            infer_flops_per_token=flops_per_token(config, S, training=False, mlm_fraction=0.0),
            batch_tokens=batch_tokens, train_flops_per_step=train * batch_tokens,
            allreduce_bytes_fp32=allreduce_bytes(config, 4), allreduce_bytes_bf16=allreduce_bytes(config, 2)))
    return records


def format_table(records: list[AccountingRow]) -> str:
    """Aligned plain-text table (fits 100 columns) with the conventions as footnotes."""
    header = ("name", "L", "H", "E", "sharing", "backbone", "+heads", "paper", "diff", "GF/tok", "PF", "MB")
    rows, groups = [], {"1": "Table 1 and presets", "3": "Table 3: E x sharing, ALBERT-base shape",
                        "4": "Table 4: sharing strategies, ALBERT-base shape"}
    for r in records:
        flag = "*" if r.within_tolerance is False else ""
        rows.append((r.table, (
            r.name + flag, str(r.layers), str(r.hidden), str(r.embedding), r.sharing,
            f"{r.backbone:,}", f"{r.with_heads:,}",
            "" if r.paper_M is None else f"{r.paper_M}M",
            "" if r.diff_M is None else f"{r.diff_M:+.1f}",
            f"{r.train_flops_per_token / 1e9:.2f}", f"{r.train_flops_per_step / 1e15:.1f}",
            f"{r.allreduce_bytes_fp32 / 1e6:.1f}")))
    widths = [max(len(h), *(len(cells[i]) for _, cells in rows)) for i, h in enumerate(header)]

    def line(cells: tuple[str, ...]) -> str:
        return " ".join(c.ljust(w) if i in (0, 4) else c.rjust(w)
                        for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out, last = [line(header)], None
    for table, cells in rows:
        if table != last:
            out.append(f"-- {groups[table]}")
            last = table
        out.append(line(cells))
    short = sorted({(r.name, r.seq_len) for r in records if r.seq_len != SEQ_LEN})
    batch = records[0].batch_tokens if records else BATCH_TOKENS
    out += [
        "",
        "backbone = embeddings + E->H projection (kept even when E == H, as HF) + distinct layers +",
        "  pooler; +heads adds the MLM head (decoder tied) and the SOP head. paper = the printed figure;",
        f"  diff = backbone - paper, in M: every figure is within {PAPER_TOLERANCE_M:g}M except those marked *.",
        *textwrap.wrap(XXLARGE_NOTE, 96, initial_indent="* ", subsequent_indent="  "),
        f"GF/tok = training GFLOPs per token at S={SEQ_LEN}"
        + (" (" + ", ".join(f"{n}: S={s}" for n, s in short) + ")" if short else "")
        + f", MLM head on {MASKED_FRACTION:.0%} of positions;",
        "  6 FLOPs per matmul weight per application (sharing saves no compute) + attention 12*S*H.",
        f"PF = training PFLOPs per step of {batch:,} tokens. MB = fp32 gradient all-reduced per",
        "  data-parallel step (distinct parameters x 4 B, 1 MB = 1e6 B; half that with bf16 gradients).",
    ]
    return "\n".join(out)


def params_command(as_json: bool = False, batch_tokens: int | None = None, seq_len: int = SEQ_LEN) -> int:
    """`albertlm params`: print the accounting table (or JSON) for every preset and ablation row.

    Args:
        as_json: print a JSON list of objects instead of the table.
        batch_tokens: tokens per step for the FLOPs-per-step column; None means 4096 x 512.
        seq_len: S for the FLOP columns.
    Returns:
        0, the exit status.
    """
    if batch_tokens is not None and batch_tokens <= 0:
        raise AlbertlmError(f"--batch-tokens must be a positive integer, got {batch_tokens}")
    records = accounting(seq_len=seq_len, batch_tokens=batch_tokens or BATCH_TOKENS)
    print(json.dumps(to_plain(records), indent=2) if as_json else format_table(records))
    return 0
