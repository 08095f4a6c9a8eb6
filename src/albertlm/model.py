"""The ALBERT network, top to bottom as in the paper (Lan et al., ICLR 2020, §3).

    input ids ──► word (V×E) + position (P×E) + type (2×E) embeddings ──► LayerNorm        §3.1
              ──► E→H projection (the factorized embedding)                              §3.1
                  (albert_zh's layout projects the word vectors alone, E→H without bias, and
                  sums H-wide positions and types: `AlbertConfig.embedding_width` says which)
              ──► L layer applications; which parameters each one uses is the sharing     §3.1
                  strategy (`AlbertConfig.block_schedule`): all, attention, ffn, none
              ──► pooler: tanh(Linear(h[CLS]))
    heads:        MLM  H→W, activation, LayerNorm, back through the tied word path to V + bias
                  SOP  Linear(H→2): 0 = segments in order, 1 = swapped                    §3.2

Every layer is post-LN as in BERT: x = LN(x + Attn(x)); x = LN(x + FFN(x)).
Module names here are readable; the Hugging Face key names live in `interop/hf.py`.
The model is a plain single-device module: parallelism, activation checkpointing, compilation and
precision are applied from outside (`albertlm.distributed`).
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from albertlm.config import AlbertConfig
from albertlm.vocab import IGNORE_INDEX


def activation(name: str):
    """The activation function `name` (one of config.ACTIVATIONS)."""
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return lambda x: F.gelu(x, approximate="tanh")  # the official code's tanh form
    return {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "swish": F.silu, "tanh": torch.tanh}[name]


# ---------------------------------------------------------------------------- embeddings
class Embeddings(nn.Module):
    """Word + position + token-type lookups summed at width W, then LayerNorm (paper §3.1).

    W is `config.embedding_width`: E in ALBERT, whose E→H projection follows (AlbertModel.project);
    H in albert_zh's layout, whose word vectors alone go E→H (`word_project`, no bias) first.
    """

    def __init__(self, config: AlbertConfig):
        super().__init__()
        E, W = config.embedding_size, config.embedding_width
        self.word = nn.Embedding(config.vocab_size, E)
        self.word_project = nn.Linear(E, W, bias=False) if config.projects_words else None
        self.position = nn.Embedding(config.max_position_embeddings, W)
        self.token_type = nn.Embedding(config.type_vocab_size, W)
        self.norm = nn.LayerNorm(W, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                position_ids: torch.Tensor | None) -> torch.Tensor:
        """input_ids [B, S] -> embeddings [B, S, W]."""
        S = input_ids.shape[1]
        if position_ids is None:
            # eager calls only: an export or compile traces symbolic lengths, which the check would pin
            if not (torch.compiler.is_compiling() or torch.jit.is_tracing()) and S > self.position.num_embeddings:
                raise ValueError(f"an input of {S} tokens is longer than the model's max_position_embeddings "
                                 f"({self.position.num_embeddings})")
            position_ids = torch.arange(S, device=input_ids.device)  # [S], broadcast over B
        x = self.words(input_ids) + self.position(position_ids)  # [B, S, W]
        x = x + (self.token_type.weight[0] if token_type_ids is None else self.token_type(token_type_ids))
        return self.dropout(self.norm(x))

    def words(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [B, S] -> word vectors [B, S, W] (through `word_project` when there is one)."""
        x = self.word(input_ids)  # [B, S, E]
        return x if self.word_project is None else self.word_project(x)

    def unproject(self, y: torch.Tensor) -> torch.Tensor:
        """y [..., W] -> [..., E]: back through the transpose of `word_project` (tied), if any."""
        return y if self.word_project is None else y @ self.word_project.weight  # weight [W, E]


# ---------------------------------------------------------------------------- the two halves of a layer
class SelfAttention(nn.Module):
    """Multi-head self-attention block: LN(x + W_o · attn(W_qkv · x)). One fused QKV matmul.

    Two input layouts, the same arithmetic per real token:
      - padded: x [B, S, H] with mask None (nothing padded) or bool [B, 1, 1, S] (True = attend);
      - packed: x [T, H], the real tokens of every sequence one after another, with mask the list
        of sequence lengths (summing to T). The projections then run on real tokens only, and each
        sequence attends over its own tokens: no padding, no mask (`AlbertModel.forward(..., unpad=True)`).
    """

    def __init__(self, config: AlbertConfig):
        super().__init__()
        H = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.qkv = nn.Linear(H, 3 * H)  # rows: query, key, value
        self.out = nn.Linear(H, H)
        self.norm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.attn_dropout = config.attention_probs_dropout_prob
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | list[int] | None) -> torch.Tensor:
        """x [B, S, H] with mask None or bool [B, 1, 1, S]; or packed x [T, H] with mask = lengths -> x's shape."""
        qkv = self.qkv(x)  # [..., 3H]: query, key, value side by side
        if isinstance(mask, list):  # packed: one attention per sequence
            a = torch.cat([self.attend(part[None], None)[0] for part in qkv.split(mask)])  # [T, H]
        else:
            a = self.attend(qkv, mask)  # [B, S, H]
        return self.norm(x + self.dropout(self.out(a)))

    def attend(self, qkv: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """qkv [B, S, 3H], mask None or bool [B, 1, 1, S] -> attention output [B, S, H].

        q, k and v stay views of the projection (no copy); their gradients come back in the same
        [B, S, nh, hd] memory layout, so the backward pass re-joins them with one contiguous cat.

        On CPU a bf16/fp16 qkv (autocast casts SDPA down) is attended in fp32 instead: PyTorch's CPU
        flash-attention backward is 4-5x slower in bf16 than in fp32 at small shapes (albert-tiny
        16x64: 25 ms against 5 ms per layer, a third of the whole bf16 step; docs/pretraining.md).
        The projections around it stay in bf16.
        """
        if qkv.device.type == "cpu" and qkv.dtype in (torch.bfloat16, torch.float16):
            with torch.autocast("cpu", enabled=False):
                return self.attend(qkv.float(), mask).to(qkv.dtype)
        B, S, _ = qkv.shape
        q, k, v = (t.view(B, S, self.num_heads, -1).transpose(1, 2) for t in qkv.chunk(3, dim=-1))  # [B, nh, S, hd]
        a = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.attn_dropout if self.training else 0.0)  # [B, nh, S, hd]
        return a.transpose(1, 2).reshape(B, S, -1)  # [B, S, nh*hd]


class FeedForward(nn.Module):
    """Position-wise FFN block: LN(x + W_down · act(W_up · x))."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = activation(config.hidden_act)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, S, H] -> [B, S, H]."""
        return self.norm(x + self.dropout(self.down(self.act(self.up(x)))))


# ---------------------------------------------------------------------------- encoder with sharing
class Encoder(nn.Module):
    """L layer applications over a pool of attention and FFN blocks (paper §3.1, Table 4).

    `all` keeps one block pair per group (G = 1: a single pair reused by every layer), `none` one
    per layer, `attention` one attention block for all layers and an FFN block per layer, `ffn` the
    reverse. `config.block_schedule()` lists which pair each application uses.
    """

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.schedule = config.block_schedule()
        self.attention = nn.ModuleList(SelfAttention(config) for _ in range(config.num_attention_blocks))
        self.ffn = nn.ModuleList(FeedForward(config) for _ in range(config.num_ffn_blocks))

    def forward(self, h: torch.Tensor, mask: torch.Tensor | list[int] | None,
                output_hidden_states: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """h [B, S, H] (or packed [T, H], mask = lengths; see SelfAttention) -> (h of the same shape,
        (input, output of every application) if asked)."""
        states = [h] if output_hidden_states else None
        for i in range(len(self.schedule)):
            h = self.layer(i, h, mask)
            if states is not None:
                states.append(h)
        return h, (tuple(states) if states is not None else None)

    def layer(self, i: int, h: torch.Tensor, mask: torch.Tensor | list[int] | None) -> torch.Tensor:
        """Layer application i alone: h [B, S, H] (or packed [T, H]) -> the same shape.

        `forward` is these applications in order; a caller that looks at every layer's output
        before running the next (early exit) steps through them one at a time.
        """
        a, f = self.schedule[i]
        return self.ffn[f](self.attention[a](h, mask))


def attention_bias(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """[B, S] of 1 (token) / 0 (padding) -> bool [B, 1, 1, S] for SDPA, or None when nothing is padded.

    Without padding no mask is passed at all, which lets SDPA pick its fastest kernel. While the
    model is being exported (torch.export, ONNX tracing) the mask is always kept: the graph must
    serve padded batches too, whatever the example batch looked like.
    """
    if attention_mask is None:
        return None
    exporting = getattr(torch.compiler, "is_exporting", lambda: False)()  # torch >= 2.5
    if not (exporting or torch.jit.is_tracing()) and bool(attention_mask.all()):
        return None
    return attention_mask.bool()[:, None, None, :]


# ---------------------------------------------------------------------------- outputs
@dataclass
class AlbertModelOutput:
    last_hidden_state: torch.Tensor
    """[B, S, H]."""
    pooler_output: torch.Tensor | None = None
    """[B, H]: tanh(Linear(h[CLS])); None without a pooler."""
    hidden_states: tuple[torch.Tensor, ...] | None = None
    """Projected embeddings then the output of every layer application: 1 + L x inner_group_num of [B, S, H]."""


@dataclass
class AlbertForPreTrainingOutput:
    loss: torch.Tensor | None = None
    """mlm_loss + sop_loss, of those whose labels were given."""
    mlm_loss: torch.Tensor | None = None
    """Mean cross-entropy over the labelled positions."""
    sop_loss: torch.Tensor | None = None
    """Mean cross-entropy of the sentence-order head."""
    prediction_logits: torch.Tensor | None = None
    """Dense [B, S, V] when `prediction_mask` is None; else sparse [N, V], one row per True entry of
    `prediction_mask` in row-major (batch, then position) order."""
    prediction_mask: torch.Tensor | None = None
    """bool [B, S]: the positions whose logits were computed (labels != -100), or None when dense."""
    sop_logits: torch.Tensor | None = None
    """[B, 2]: 0 = in order, 1 = swapped."""
    hidden_states: tuple[torch.Tensor, ...] | None = None
    """As AlbertModelOutput.hidden_states."""


# ---------------------------------------------------------------------------- shared plumbing
class PreTrainedAlbert(nn.Module):
    """Initialisation and Hugging Face directory I/O shared by every ALBERT model class."""

    config: AlbertConfig
    unpads = False
    """forward takes `unpad=True` (the encoder on the real tokens only) and gives the same loss with it."""

    def init_weights(self) -> None:
        """Normal(0, initializer_range) weights, zero biases, unit LayerNorms (official init)."""
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, MLMHead):
                nn.init.zeros_(module.bias)

    def init_embeddings(self, position: str = "normal", token_type: str = "normal", projection: str = "normal") -> None:
        """Start the embedding tables and the E→H projection elsewhere than the official init.

        The architecture is unchanged and every table still trains; only the starting point moves.
        With the official init (all N(0, 0.02)) the input of the first layer is the projection of a
        LayerNorm output through a 0.02-scale matrix, about 0.02·sqrt(E) = 0.23 in scale for E=128, and
        every position carries the same segment vector, as large as the word and position parts.
        Positions then look alike to attention, and a small post-LN ALBERT sits on the unigram plateau
        for thousands of steps before attention learns to look at neighbours (docs/pretraining.md
        measures it). Each option removes one cause:

        Args:
            position: "normal" (official) or "sinusoidal": sines and cosines (Vaswani et al. 2017,
                §3.5) scaled to the same per-entry std, so the dot product of two positions
                depends on their offset from the first step.
            token_type: "normal" (official) or "zero": segments start equal and the table learns
                what distinguishes them, instead of starting as a shared offset of every token.
            projection: "normal" (official) or "unit": the E→H matrix starts at std 1/sqrt(E), so
                the first layer sees inputs of unit scale, as every later layer does after its
                LayerNorm.
        """
        for name, value, allowed in (("position", position, ("normal", "sinusoidal")),
                                     ("token_type", token_type, ("normal", "zero")),
                                     ("projection", projection, ("normal", "unit"))):
            if value not in allowed:
                raise ValueError(f"init_embeddings: {name} must be one of {', '.join(allowed)}, got {value!r}")
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, Embeddings):
                if position == "sinusoidal":
                    table = module.position.weight
                    P, E = table.shape
                    pos = torch.arange(P, dtype=torch.float64)[:, None]  # [P, 1]
                    freq = torch.exp(-math.log(10000.0) * torch.arange(0, E, 2, dtype=torch.float64) / E)  # [E/2]
                    angles = pos * freq  # [P, E/2]
                    sinus = torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(P, -1)[:, :E]  # [P, E]
                    with torch.no_grad():
                        table.copy_((sinus * math.sqrt(2.0) * std).to(table.dtype))
                if token_type == "zero":
                    nn.init.zeros_(module.token_type.weight)
            if isinstance(module, AlbertModel) and projection == "unit" and isinstance(module.project, nn.Linear):
                nn.init.normal_(module.project.weight, mean=0.0, std=1.0 / math.sqrt(self.config.embedding_size))

    def num_parameters(self) -> int:
        """Distinct trainable parameters (shared and tied ones counted once)."""
        return sum(p.numel() for p in self.parameters())

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs):
        """Load a directory written by `save_pretrained` here or in transformers.

        Reads config.json and model.safetensors (or a legacy pytorch_model.bin, with
        weights_only=True); see `albertlm.interop.hf.load_pretrained` for the options.
        """
        from albertlm.interop.hf import load_pretrained  # interop sits above the model

        return load_pretrained(cls, path, **kwargs)

    def save_pretrained(self, path: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """Write config.json + model.safetensors that transformers' classes load.

        `state_dict` (our names) replaces the module's own tensors, e.g. one gathered from FSDP shards.
        """
        from albertlm.interop.hf import save_pretrained

        save_pretrained(self, path, state_dict=state_dict)

    def load_state_from(self, path: str | Path) -> None:
        """Load a directory `save_pretrained` wrote into this model, every weight required (training resume)."""
        from albertlm.interop.hf import load_state_into

        load_state_into(self, path)


# ---------------------------------------------------------------------------- the backbone
class AlbertModel(PreTrainedAlbert):
    """Embeddings → E→H projection → encoder → pooler."""

    def __init__(self, config: AlbertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        # E→H, paper §3.1; albert_zh's embeddings are H-wide already (their words were projected)
        self.project = nn.Identity() if config.projects_words else nn.Linear(config.embedding_size, config.hidden_size)
        self.encoder = Encoder(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if add_pooling_layer else None
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                output_hidden_states: bool = False, unpad: bool = False) -> AlbertModelOutput:
        """Encode a batch.

        Args:
            input_ids: [B, S] token ids.
            attention_mask: [B, S], 1 for tokens and 0 for padding; None means no padding.
            token_type_ids: [B, S] segment ids; None means all segment A.
            position_ids: [B, S] or [S]; None means 0..S-1.
            output_hidden_states: also return the input and output of every layer application.
            unpad: when the batch has padding, run the encoder on the real tokens only (packed
                [T, H], attention per sequence): the same values at real tokens (up to float
                rounding), zeros at padded positions, and work in proportion to the real tokens
                rather than B x S. Faster for batches of mixed lengths.
        Returns:
            AlbertModelOutput with last_hidden_state [B, S, H] and pooler_output [B, H].
        """
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # [B, S, W]
        mask = attention_bias(attention_mask)  # None when nothing is padded
        if unpad and mask is not None:
            B, S, _ = x.shape
            keep = attention_mask.bool()  # [B, S]
            lengths = keep.sum(1).tolist()  # real tokens of each sequence
            index = keep.flatten().nonzero().squeeze(1)  # [T]: positions of the real tokens in B x S
            h = self.project(x.flatten(0, 1).index_select(0, index))  # [T, H], sequence after sequence
            h, states = self.encoder(h, lengths, output_hidden_states)
            h = repad(h, index, B, S)  # [B, S, H], zeros at padding
            states = tuple(repad(s, index, B, S) for s in states) if states is not None else None
        else:
            h = self.project(x)  # [B, S, H]
            h, states = self.encoder(h, mask, output_hidden_states)
        pooled = self.pool(h) if self.pooler is not None else None  # [B, H]
        return AlbertModelOutput(last_hidden_state=h, pooler_output=pooled, hidden_states=states)

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
              position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's input: embeddings then the E→H projection, input_ids [B, S] -> [B, S, H]."""
        return self.project(self.embeddings(input_ids, token_type_ids, position_ids))

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        """The pooler on a layer's output: tanh(Linear(h[:, 0])), h [B, S, H] -> [B, H]."""
        return torch.tanh(self.pooler(h[:, 0]))


def repad(packed: torch.Tensor, index: torch.Tensor, B: int, S: int) -> torch.Tensor:
    """packed [T, H], index [T] (flat positions in B x S) -> [B, S, H], zeros at the other positions."""
    out = packed.new_zeros(B * S, packed.shape[-1]).index_copy(0, index, packed)  # [B*S, H]
    return out.view(B, S, -1)  # [B, S, H]


# ---------------------------------------------------------------------------- pretraining heads
class MLMHead(nn.Module):
    """H→W dense, activation, LayerNorm, then the tied path back to the vocabulary plus its own bias.

    W is `config.embedding_width` (E in ALBERT). The way back is the input path transposed: the
    word projection W→E when the layout has one (albert_zh), then the word table E→V.
    """

    def __init__(self, config: AlbertConfig):
        super().__init__()
        W = config.embedding_width
        self.dense = nn.Linear(config.hidden_size, W)
        self.act = activation(config.hidden_act)
        self.norm = nn.LayerNorm(W, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, h: torch.Tensor, embeddings: Embeddings) -> torch.Tensor:
        """h [..., H] -> logits [..., V], decoding through `embeddings`' tied tables."""
        y = embeddings.unproject(self.norm(self.act(self.dense(h))))  # [..., E]
        return F.linear(y, embeddings.word.weight, self.bias)  # [..., V]


class AlbertForPreTraining(PreTrainedAlbert):
    """The backbone with the masked-LM and sentence-order heads (paper §3.2, §4.1)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config)
        self.mlm = MLMHead(config)
        self.sop = nn.Linear(config.hidden_size, 2)  # always 2-way, whatever num_labels says
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, sentence_order_label: torch.Tensor | None = None,
                output_hidden_states: bool = False, dense_logits: bool = False,
                unpad: bool = False) -> AlbertForPreTrainingOutput:
        """Run the backbone and both heads.

        Args:
            input_ids, attention_mask, token_type_ids, position_ids: as AlbertModel.forward.
            labels: [B, S] target ids, -100 where no prediction is made. When given, the MLM head
                runs only on the labelled positions (same loss as dense, a fraction of the cost)
                and `prediction_logits` is sparse [N, V] unless `dense_logits`.
            sentence_order_label: [B], 0 = in order, 1 = swapped.
            output_hidden_states: also return every layer's hidden state.
            dense_logits: compute [B, S, V] logits even when labels are given.
            unpad: run the encoder on the real tokens only (see AlbertModel.forward).
        Returns:
            AlbertForPreTrainingOutput.
        """
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, unpad)
        h = out.last_hidden_state  # [B, S, H]
        tied = self.albert.embeddings  # the decoder reuses the word table (and word projection)
        sop_logits = self.sop(out.pooler_output)  # [B, 2]

        mlm_loss = sop_loss = None
        prediction_mask = None
        if labels is not None and not dense_logits:
            prediction_mask = labels != IGNORE_INDEX  # [B, S]
            logits = self.mlm(h[prediction_mask], tied)  # [N, V]
            targets = labels[prediction_mask]  # [N]
        else:
            logits = self.mlm(h, tied)  # [B, S, V]
            targets = labels.reshape(-1) if labels is not None else None
        if targets is not None:
            if targets.numel() and bool((targets != IGNORE_INDEX).any()):
                mlm_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets,
                                           ignore_index=IGNORE_INDEX)
            else:  # nothing to predict in this batch: a zero that keeps the graph connected
                mlm_loss = logits.sum() * 0.0
        if sentence_order_label is not None:
            sop_loss = F.cross_entropy(sop_logits.float(), sentence_order_label.reshape(-1))
        losses = [x for x in (mlm_loss, sop_loss) if x is not None]
        loss = sum(losses[1:], losses[0]) if losses else None
        return AlbertForPreTrainingOutput(
            loss=loss, mlm_loss=mlm_loss, sop_loss=sop_loss, prediction_logits=logits,
            prediction_mask=prediction_mask, sop_logits=sop_logits, hidden_states=out.hidden_states)
