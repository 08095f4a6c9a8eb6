"""Model surgery: the paper's shapes cut out of a pretrained, unshared, E = H teacher (no training).

Three operations, each taking an `AlbertModel` and returning a new one whose outputs stay as close
to the input model's as the smaller shape allows; `albertlm compress` then distils what is lost.

**The factorized embedding** (paper §3.1: V×E + E×H instead of V×H). ALBERT sums word, position
and type vectors at width E, normalises them there, then projects E→H; the teacher sums and
normalises at H. LayerNorm at H only sees the centred sum s - mean(s), divided by its norm. If Q
[H, E-1] is an orthonormal basis of a subspace holding the centred sums, and M [E, E-1] an
orthonormal basis of the vectors of R^E whose entries sum to zero, then with the tables mapped
by R = M Qᵀ (every centred H-wide row r becomes R r), the student's LayerNorm at E sees a
zero-mean vector of the same norm (up to the part of the sum outside Q's span), and a projection
P = diag(γ) Q Mᵀ sqrt(H / E) with bias β gives back the teacher's LayerNorm output exactly (the teacher's
own H→H projection, the identity in an imported BERT, is folded into P). With
E = H the subspace is all of the centred space and nothing is lost. Q is the top E-1 right
singular vectors of the centred sums of real inputs (`embedding_sums`: the (word, position, type)
triples of text the teacher will see), so the frequent words and the early positions are what
the subspace keeps. Measured on all-MiniLM-L6-v2 at E = 128 with nothing trained (docs/compress.md):
STS-B 86.15 against the teacher's 86.72 with this basis, 77.36 with a basis that weighs every
vocabulary entry alike.

**Cross-layer sharing** (paper §3.1, Table 4): G groups replace L layers; group g's block starts
from the teacher's layers it stands for (layers g·L/G .. (g+1)·L/G - 1): their mean ("average"),
the first of them ("stepwise", the layer at every L/G-th step), or a fresh draw ("random").

**FFN pruning**: one shared block pruned prunes every layer application. The FFN neurons kept are
those of largest importance, the mean absolute activation on sample inputs times the norm of the
neuron's output column (`ffn_importance`); the block's up rows, their biases and the down columns
of the others are dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal, get_args

import torch
from torch import nn

from albertlm.config import AlbertConfig
from albertlm.errors import AlbertlmError
from albertlm.model import AlbertModel

ShareInit = Literal["average", "stepwise", "random"]
SHARE_INITS: tuple[str, ...] = get_args(ShareInit)


def zero_sum_basis(E: int) -> torch.Tensor:
    """M [E, E-1]: orthonormal columns orthogonal to the all-ones vector (a Helmert basis), float64.

    Column j-1 (j = 1..E-1) is (1, ..., 1, -j, 0, ..., 0) / sqrt(j (j + 1)) with j ones: fixed,
    needs no random draw, and any vector it maps to has entries that sum to zero.
    """
    if E < 2:
        raise AlbertlmError(f"embedding size {E}: a factorized embedding needs at least 2 columns")
    M = torch.zeros(E, E - 1, dtype=torch.float64)
    for j in range(1, E):
        M[:j, j - 1] = 1.0
        M[j, j - 1] = -float(j)
        M[:, j - 1] /= math.sqrt(j * (j + 1))
    return M


@torch.no_grad()
def embedding_sums(model: AlbertModel, batches: Iterable[dict[str, torch.Tensor]]) -> torch.Tensor:
    """The centred H-wide sums word + position + type of every real token of `batches`: [T, H] float64.

    Each batch holds input_ids [B, S], attention_mask [B, S] and token_type_ids [B, S].
    """
    emb = model.embeddings
    if emb.word_project is not None:
        raise AlbertlmError("the teacher has albert_zh's embedding layout; factorize a model with E == H")
    rows = []
    for batch in batches:
        ids, mask, types = batch["input_ids"], batch["attention_mask"].bool(), batch["token_type_ids"]
        x = emb.word(ids) + emb.position(torch.arange(ids.shape[1])) + emb.token_type(types)  # [B, S, H]
        rows.append(x[mask].double())  # [T, H]
    if not rows:
        raise AlbertlmError("no sample text to choose the embedding subspace from")
    x = torch.cat(rows)
    return x - x.mean(dim=1, keepdim=True)


def factorize_embeddings(model: AlbertModel, embedding_size: int, sums: torch.Tensor) -> AlbertModel:
    """The same network with a V×E word table and an E→H projection (see the module docstring).

    Args:
        model: a backbone with E == H (an imported BERT, or any unfactorized ALBERT).
        embedding_size: E, 2 <= E <= H.
        sums: `embedding_sums` of sample inputs, [T, H], T >= E - 1.
    Returns:
        A new AlbertModel in eval mode: the encoder and pooler copied, the embeddings factorized.
    """
    config = model.config
    H = config.hidden_size
    if config.embedding_size != H:
        raise AlbertlmError(f"the model is factorized already (embedding_size {config.embedding_size}, hidden_size "
                            f"{H}); compress starts from a model with embedding_size == hidden_size")
    if not 2 <= embedding_size <= H:
        raise AlbertlmError(f"--embedding-size {embedding_size} must be between 2 and the hidden size {H}")
    if sums.shape[0] < embedding_size - 1:
        raise AlbertlmError(f"{sums.shape[0]} sample tokens cannot fix a {embedding_size}-wide embedding; give more text")
    Q = torch.linalg.svd(sums, full_matrices=False).Vh[: embedding_size - 1].T  # [H, E-1]
    M = zero_sum_basis(embedding_size)  # [E, E-1]
    R = M @ Q.T  # [E, H]: a centred H-wide row -> its E-wide image

    emb = model.embeddings
    centred = {name: table.weight.detach().double() - table.weight.detach().double().mean(1, keepdim=True)
               for name, table in (("word", emb.word), ("position", emb.position), ("token_type", emb.token_type))}
    gamma, beta = emb.norm.weight.detach().double(), emb.norm.bias.detach().double()
    state = {k: v for k, v in model.state_dict().items() if not k.startswith(("embeddings.", "project."))}
    for name, rows in centred.items():
        state[f"embeddings.{name}.weight"] = (rows @ R.T).float()  # [rows, E]
    state["embeddings.norm.weight"] = torch.ones(embedding_size)
    state["embeddings.norm.bias"] = torch.zeros(embedding_size)
    # LN_E's output is sqrt(E) times a unit vector; LN_H's is sqrt(H) times one, scaled by gamma; then the
    # teacher's own E->H map (the identity for an imported BERT) follows, so it is folded in
    unnormalise = gamma[:, None] * (Q @ M.T) * math.sqrt(H / embedding_size)  # [H, E]
    W, b = model.project.weight.detach().double(), model.project.bias.detach().double()  # [H, H], [H]
    state["project.weight"] = (W @ unnormalise).float()
    state["project.bias"] = (W @ beta + b).float()
    student = AlbertModel(config.replace(embedding_size=embedding_size), add_pooling_layer=model.pooler is not None)
    student.load_state_dict(state, strict=True)
    return student.eval()


def parse_sharing(text: str, num_layers: int) -> tuple[str, int]:
    """--sharing all | groups:N | none -> (AlbertConfig.sharing, num_hidden_groups)."""
    if text == "all":
        return "all", 1
    if text == "none":
        return "none", num_layers
    if text.startswith("groups:"):
        try:
            groups = int(text[len("groups:"):])
        except ValueError:
            groups = 0
        if groups < 1 or num_layers % groups:
            raise AlbertlmError(f"--sharing {text}: N must be a positive divisor of the teacher's {num_layers} layers")
        return "all", groups
    raise AlbertlmError(f"--sharing {text!r}: choose all, groups:N or none")


def share_layers(model: AlbertModel, groups: int, init: str, generator: torch.Generator) -> AlbertModel:
    """The same network with G groups of shared blocks in place of L unshared layers.

    Args:
        model: a backbone with sharing none (one block per layer).
        groups: G, a divisor of L; layer i then runs group i // (L / G) (AlbertConfig.block_schedule).
        init: "average", "stepwise" or "random" (see the module docstring).
        generator: draws the random init (and nothing else).
    Returns:
        A new AlbertModel in eval mode.
    """
    config = model.config
    L = config.num_hidden_layers
    if init not in SHARE_INITS:
        raise AlbertlmError(f"--init {init!r}: choose one of {', '.join(SHARE_INITS)}")
    if config.num_attention_blocks != L or config.num_ffn_blocks != L or config.inner_group_num != 1:
        raise AlbertlmError("the model shares layers already; compress starts from an unshared model (sharing none)")
    if groups < 1 or L % groups:
        raise AlbertlmError(f"{groups} groups do not divide the model's {L} layers")
    shared = config.replace(sharing="all" if groups < L else "none", num_hidden_groups=groups)
    student = AlbertModel(shared, add_pooling_layer=model.pooler is not None)
    source = model.state_dict()
    state = {k: v for k, v in source.items() if not k.startswith("encoder.")}
    span = L // groups
    for g in range(groups):
        layers = range(g * span, (g + 1) * span) if init == "average" else [g * span]
        for part in ("attention", "ffn"):
            for name in (k for k in student.state_dict() if k.startswith(f"encoder.{part}.{g}.")):
                rest = name[len(f"encoder.{part}.{g}."):]
                if init == "random":
                    state[name] = _fresh(rest, source[f"encoder.{part}.0.{rest}"], config, generator)
                else:
                    state[name] = torch.stack([source[f"encoder.{part}.{i}.{rest}"] for i in layers]).mean(0)
    student.load_state_dict(state, strict=True)
    return student.eval()


def _fresh(name: str, like: torch.Tensor, config: AlbertConfig, generator: torch.Generator) -> torch.Tensor:
    """The official init of one block tensor: LayerNorm weights 1, biases 0, weights N(0, initializer_range)."""
    if name.endswith("bias"):
        return torch.zeros_like(like)
    if name.startswith("norm."):
        return torch.ones_like(like)
    return torch.randn(like.shape, generator=generator, dtype=like.dtype) * config.initializer_range


@torch.no_grad()
def ffn_importance(model: AlbertModel, batches: Iterable[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
    """Per FFN block, the importance of each neuron: mean |activation| over real tokens x ||down column||.

    Returns:
        One tensor [I] per FFN block (float64), higher = more important.
    """
    blocks = model.encoder.ffn
    sums = [torch.zeros(model.config.intermediate_size, dtype=torch.float64) for _ in blocks]
    count = [0]
    hooks = []
    keep: list[torch.Tensor] = []

    def hook(index):
        def record(module, inputs, output):
            act = output[keep[0]] if output.dim() == 3 else output  # [T, I]
            sums[index] += act.abs().double().sum(0)
        return record

    for j, block in enumerate(blocks):
        hooks.append(block.up.register_forward_hook(_after_activation(block, hook(j))))
    try:
        for batch in batches:
            keep[:] = [batch["attention_mask"].bool()]
            model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            count[0] += int(keep[0].sum())
    finally:
        for h in hooks:
            h.remove()
    if not count[0]:
        raise AlbertlmError("no sample text to rank the FFN neurons on")
    return [s / count[0] * block.down.weight.detach().double().norm(dim=0) for s, block in zip(sums, blocks)]


def _after_activation(block: nn.Module, record):
    """A forward hook on `block.up` that reports the activation of its output, as the FFN computes it."""
    def hook(module, inputs, output):
        record(module, inputs, block.act(output))
    return hook


def prune_ffn(model: AlbertModel, size: int, importance: list[torch.Tensor]) -> AlbertModel:
    """The same network with `size` FFN neurons per block, the most important ones (in their order).

    Args:
        model: any backbone.
        size: the new intermediate_size, 1 <= size <= the current one.
        importance: `ffn_importance` of the model, one [I] tensor per FFN block.
    Returns:
        A new AlbertModel in eval mode.
    """
    config = model.config
    if not 1 <= size <= config.intermediate_size:
        raise AlbertlmError(f"--ffn-size {size} must be between 1 and the model's intermediate_size "
                            f"{config.intermediate_size}")
    if size == config.intermediate_size:
        return model
    student = AlbertModel(config.replace(intermediate_size=size), add_pooling_layer=model.pooler is not None)
    state = dict(model.state_dict())
    for j, scores in enumerate(importance):
        kept = torch.topk(scores, size).indices.sort().values  # [size], in the original order
        p = f"encoder.ffn.{j}."
        state[p + "up.weight"] = state[p + "up.weight"][kept].clone()
        state[p + "up.bias"] = state[p + "up.bias"][kept].clone()
        state[p + "down.weight"] = state[p + "down.weight"][:, kept].clone()
    student.load_state_dict(state, strict=True)
    return student.eval()
