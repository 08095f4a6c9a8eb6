"""AlbertConfig: the model's shape, with Hugging Face field names, plus the paper's sharing strategy.

`config.json` is the contract with the Hugging Face ecosystem: every field below carries the name and
default of transformers' `AlbertConfig` (the defaults describe albert-xxlarge), so a config written
by `save_pretrained` maps 1:1. Our extensions are `sharing`, the cross-layer parameter sharing
strategy of the paper's Table 4, `embedding_layout` (albert_zh's), and `classifier_pooling` (a
sentence-level head's pooling; written only when it is not ALBERT's own).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

from albertlm.errors import AlbertlmError, ConfigError
from albertlm.utils import atomic_write_text, check_field_types, read_bytes

SHARING_STRATEGIES = ("all", "attention", "ffn", "none")
EMBEDDING_LAYOUTS = ("albert", "albert_zh")
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")
"""The values of `problem_type` (transformers accepts these and no other)."""
CLASSIFIER_POOLINGS = ("cls", "mean")
PRETRAINING_KEY = "albertlm_pretraining"
"""config.json entry recording how a pretraining run trained the weights (an rtd run: {"token_objective":
"rtd", ...}); absent for masked-LM runs."""
"""The values of `classifier_pooling`: ALBERT's pooler on [CLS], or the mean of the real tokens."""
ACTIVATIONS = ("gelu_new", "gelu", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu", "swish", "tanh")

# Keys that released TF-era configs carry and nothing reads; accepted and dropped.
_TF_LEFTOVERS = ("down_scale_factor", "gap_size", "net_structure_type", "num_memory_blocks",
                 # BERT-era keys in albert_zh's and Chinese releases' configs
                 "directionality", "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers",
                 "pooler_size_per_head", "pooler_type")
# Keys transformers writes that say nothing about the model's shape.
_HF_BOOKKEEPING = (
    "model_type", "architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
    "output_hidden_states", "output_attentions", "return_dict", "use_cache", "layer_types",
)

# Upper bounds on the sizes, far above any real model (albert-xxlarge: H=4096, I=16384, 12 layers;
# the largest released vocabularies hold about 250k pieces), so that a typo or a corrupt file is
# refused at once instead of becoming a multi-terabyte allocation or an hour-long loop.
MAX_WIDTH = 1 << 18
"""Largest hidden_size, embedding_size, intermediate_size and num_attention_heads (262144: 16 x xxlarge's FFN)."""
MAX_ROWS = 1 << 24
"""Largest vocab_size, max_position_embeddings, type_vocab_size and num_labels (16.7M table rows)."""
MAX_LAYER_CALLS = 1024
"""Largest num_hidden_layers x inner_group_num (the paper's deepest ALBERT has 24 layers)."""
_SIZE_LIMITS = {
    "vocab_size": MAX_ROWS, "embedding_size": MAX_WIDTH, "hidden_size": MAX_WIDTH,
    "num_hidden_layers": MAX_LAYER_CALLS, "num_hidden_groups": MAX_LAYER_CALLS,
    "num_attention_heads": MAX_WIDTH, "intermediate_size": MAX_WIDTH, "inner_group_num": MAX_LAYER_CALLS,
    "max_position_embeddings": MAX_ROWS, "type_vocab_size": MAX_ROWS, "num_labels": MAX_ROWS,
}


class Size(int):
    """An int that remembers the config field it was read from (`AlbertConfig.size`).

    Key tables build their expected shapes from these, so a shape check that fails can name the
    field behind each wrong dimension (`shape_note`) instead of guessing from the values.
    """

    field: str

    def __new__(cls, value: int, field: str) -> "Size":
        size = super().__new__(cls, value)
        size.field = field
        return size


def shape_note(expected: tuple[int, ...], actual: tuple[int, ...]) -> str:
    """" (intermediate_size=38)": the fields behind the dimensions of `expected` that `actual` lacks."""
    if len(expected) != len(actual):
        return ""
    fields = [f"{d.field}={int(d)}" for d, a in zip(expected, actual) if d != a and isinstance(d, Size)]
    return f" ({', '.join(fields)})" if fields else ""


@dataclass(frozen=True)
class AlbertConfig:
    """Shape and hyper-parameters of an ALBERT (or BERT-shaped) network."""

    vocab_size: int = 30000
    """V: rows of the word-embedding table."""
    embedding_size: int = 128
    """E: width of the factorized embedding (paper §3.1); E == H gives BERT's un-factorized layout."""
    hidden_size: int = 4096
    """H: width of the transformer layers."""
    num_hidden_layers: int = 12
    """L: number of layer applications (each runs `inner_group_num` inner layers)."""
    num_hidden_groups: int = 1
    """G: number of distinct layer groups; layer i uses group int(i / (L / G))."""
    num_attention_heads: int = 64
    """Attention heads; must divide hidden_size."""
    intermediate_size: int = 16384
    """FFN inner width (4H in the paper)."""
    inner_group_num: int = 1
    """Layers inside one group, run in order at every application of the group."""
    hidden_act: str = "gelu_new"
    """FFN and MLM-head activation; gelu_new is GELU in its tanh form, as the official code."""
    hidden_dropout_prob: float = 0.0
    """Dropout on embeddings and block outputs (0 in the final ALBERT models, paper §4.7)."""
    attention_probs_dropout_prob: float = 0.0
    """Dropout on attention probabilities."""
    max_position_embeddings: int = 512
    """Rows of the learned position table: the longest input."""
    type_vocab_size: int = 2
    """Segment (token type) ids: 0 for segment A, 1 for segment B."""
    initializer_range: float = 0.02
    """Std of the normal initialisation of weights."""
    layer_norm_eps: float = 1e-12
    """LayerNorm epsilon."""
    classifier_dropout_prob: float = 0.1
    """Dropout before fine-tuning classifiers."""
    pad_token_id: int = 0
    """<pad> id."""
    bos_token_id: int = 2
    """[CLS] id."""
    eos_token_id: int = 3
    """[SEP] id."""
    tie_word_embeddings: bool = True
    """The MLM decoder reuses the word-embedding table (always true for ALBERT)."""
    sharing: str = "all"
    """Cross-layer sharing (paper Table 4): all, attention, ffn or none."""
    embedding_layout: str = "albert"
    """Where E→H sits: "albert" after the E-wide sum, "albert_zh" on the word vectors (brightmart/albert_zh)."""
    num_labels: int = 2
    """Outputs of a fine-tuning classifier (the SOP head always has 2)."""
    id2label: dict[int, str] | None = None
    """Optional label names of a fine-tuned classifier."""
    problem_type: str | None = None
    """single_label_classification, multi_label_classification or regression (fine-tuning)."""
    classifier_pooling: str = "cls"
    """What a sentence-level head classifies: "cls", the pooler tanh(Linear(h[CLS])) (ALBERT's, and the
    only one transformers knows), or "mean", the mean of the last layer over the non-padding tokens (no
    pooler). Ours, like `sharing`; transformers refuses to load a "mean" head (interop/hf.py)."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Unknown config.json keys, kept so a round trip loses nothing."""

    def __post_init__(self) -> None:
        self._check_types()  # before the normalisation below compares them
        # `sharing="none"` with the default single group means one group per layer: normalise so
        # that HF's group scheme (num_hidden_groups == num_hidden_layers) expresses it.
        if self.sharing == "none" and self.num_hidden_groups == 1 and self.num_hidden_layers > 1:
            object.__setattr__(self, "num_hidden_groups", self.num_hidden_layers)
        if self.id2label is not None:
            object.__setattr__(self, "id2label", {int(k): str(v) for k, v in self.id2label.items()})
        self.validate()

    # ------------------------------------------------------------------ validation
    def _check_types(self) -> None:
        """int fields hold ints (not bools), float fields finite numbers, tie_word_embeddings a bool."""
        try:
            check_field_types(self)
        except AlbertlmError as exc:
            raise ConfigError(str(exc)) from None
        if not isinstance(self.tie_word_embeddings, bool):
            raise ConfigError(f"tie_word_embeddings must be true or false, got {self.tie_word_embeddings!r}")

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid field.

        `__post_init__` checks the types first (`_check_types`: no bool, NaN or infinity gets this
        far); the ranges below are written so that a NaN would fail them too. Sizes are bounded by
        MAX_WIDTH, MAX_ROWS and MAX_LAYER_CALLS, each far above any real model: a config beyond them
        is a typo or a corrupt file, and refusing it here costs nothing, where building it would
        allocate terabytes (or loop for minutes over `block_schedule`).
        """
        for name, limit in _SIZE_LIMITS.items():
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
            if not value <= limit:
                raise ConfigError(f"{name} {value} is above albertlm's limit of {limit}; no real model "
                                  "is this large (a typo or a corrupt config?)")
        if not self.num_layer_calls <= MAX_LAYER_CALLS:
            raise ConfigError(f"num_hidden_layers x inner_group_num = {self.num_layer_calls} layer applications "
                              f"is above albertlm's limit of {MAX_LAYER_CALLS}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{name} must be a probability in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"{name} must be a finite positive number, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})")
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(f"hidden_act {self.hidden_act!r} is unknown; choose one of {', '.join(ACTIVATIONS)}")
        if self.embedding_layout not in EMBEDDING_LAYOUTS:
            raise ConfigError(f"embedding_layout {self.embedding_layout!r} is unknown; "
                              f"choose one of {', '.join(EMBEDDING_LAYOUTS)}")
        if self.sharing not in SHARING_STRATEGIES:
            raise ConfigError(f"sharing {self.sharing!r} is unknown; choose one of {', '.join(SHARING_STRATEGIES)}")
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            raise ConfigError(f"problem_type {self.problem_type!r} is unknown; "
                              f"choose one of {', '.join(PROBLEM_TYPES)}")
        if self.classifier_pooling not in CLASSIFIER_POOLINGS:
            raise ConfigError(f"classifier_pooling {self.classifier_pooling!r} is unknown; "
                              f"choose one of {', '.join(CLASSIFIER_POOLINGS)}")
        if self.id2label is not None and sorted(self.id2label) != list(range(self.num_labels)):
            raise ConfigError(f"id2label must name the ids 0 to {self.num_labels - 1} (num_labels={self.num_labels}), "
                              f"got ids {sorted(self.id2label)}")
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise ConfigError(f"{name} must be an id in [0, vocab_size={self.vocab_size}), got {value!r}")
        L, G, K = self.num_hidden_layers, self.num_hidden_groups, self.inner_group_num
        if self.sharing == "all":
            if G > L:
                raise ConfigError(f"num_hidden_groups ({G}) must not exceed num_hidden_layers ({L})")
            if L % G:
                # HF computes int(i / (L / G)) and TF int(i / L * G): they disagree unless G divides L.
                raise ConfigError(f"num_hidden_groups ({G}) must divide num_hidden_layers ({L})")
            if G == L and K == 1 and L > 1:
                raise ConfigError("num_hidden_groups == num_hidden_layers with sharing='all' shares "
                                  "nothing; say sharing='none'")
        elif self.sharing == "none":
            if G != L or K != 1:
                raise ConfigError(f"sharing='none' needs num_hidden_groups == num_hidden_layers ({L}) "
                                  f"and inner_group_num == 1, got num_hidden_groups={G}, inner_group_num={K}")
        else:  # attention / ffn: one shared half, one half per layer
            if G != 1 or K != 1:
                raise ConfigError(f"sharing={self.sharing!r} needs num_hidden_groups == 1 and "
                                  f"inner_group_num == 1, got {G} and {K}")

    # ------------------------------------------------------------------ derived shape
    @property
    def num_layer_calls(self) -> int:
        """Layer applications per forward pass: L x inner_group_num."""
        return self.num_hidden_layers * self.inner_group_num

    def block_schedule(self) -> list[tuple[int, int]]:
        """For every layer application, (attention block index, FFN block index).

        Blocks are numbered in HF's order: block j is group j // inner_group_num, inner layer
        j % inner_group_num. Under `all` and `none` both halves of a layer use the same index;
        under `attention` (`ffn`) the attention (FFN) half is block 0 everywhere.
        """
        L, G, K = self.num_hidden_layers, self.num_hidden_groups, self.inner_group_num
        schedule = []
        for i in range(L):
            if self.sharing == "attention":
                schedule.append((0, i))
            elif self.sharing == "ffn":
                schedule.append((i, 0))
            else:
                group = int(i / (L / G))  # HF's formula; equal to TF's when G divides L
                schedule.extend((group * K + k, group * K + k) for k in range(K))
        return schedule

    @property
    def projects_words(self) -> bool:
        """True when E→H is applied to the word vectors alone, without bias, before the sum ("albert_zh")."""
        return self.embedding_layout == "albert_zh"

    @property
    def embedding_width(self) -> int:
        """W: width of the position and token-type tables, the embedding LayerNorm and the MLM transform.

        E under "albert" (the paper's §3.1: everything before the projection is E-wide); H under
        "albert_zh", whose word vectors are projected to H before positions and segments are added.
        """
        return getattr(self, self._width_field)

    @property
    def _width_field(self) -> str:
        """The field `embedding_width` reads."""
        return "hidden_size" if self.projects_words else "embedding_size"

    def size(self, name: str) -> "Size":
        """A size field (or "embedding_width") as an int that remembers its field, for shape messages."""
        field = self._width_field if name == "embedding_width" else name
        return Size(getattr(self, field), field)

    @property
    def num_attention_blocks(self) -> int:
        """Distinct attention blocks (parameters) in the encoder."""
        return 1 + max(a for a, _ in self.block_schedule())

    @property
    def num_ffn_blocks(self) -> int:
        """Distinct FFN blocks (parameters) in the encoder."""
        return 1 + max(f for _, f in self.block_schedule())

    # ------------------------------------------------------------------ (de)serialisation
    def replace(self, **changes: Any) -> "AlbertConfig":
        """A copy with some fields changed (validated)."""
        if "sharing" in changes and "num_hidden_groups" not in changes and changes["sharing"] != "none":
            # Switching away from `none` restores the single-group layout.
            changes.setdefault("num_hidden_groups", 1)
        if changes.get("sharing") == "none" and "num_hidden_groups" not in changes:
            changes["num_hidden_groups"] = changes.get("num_hidden_layers", self.num_hidden_layers)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The config.json content, in transformers' layout plus `sharing` and `embedding_layout`, and
        `classifier_pooling` when it is not "cls" (so every other config.json is as before it existed)."""
        out: dict[str, Any] = dict(self.extra)
        for f in dataclasses.fields(self):
            if f.name == "extra" or (f.name == "classifier_pooling" and self.classifier_pooling == "cls"):
                continue
            out[f.name] = getattr(self, f.name)
        out["model_type"] = "albert"
        num_labels = out.pop("num_labels")
        id2label = out.pop("id2label") or {i: f"LABEL_{i}" for i in range(num_labels)}
        out["id2label"] = {str(k): v for k, v in id2label.items()}
        out["label2id"] = {v: k for k, v in id2label.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> "AlbertConfig":
        """Build from a config.json dict; TF leftovers and HF bookkeeping keys are ignored.

        A dict without `sharing` (any config written by transformers) is read with HF's group
        scheme: one group per layer means `none`, anything else `all`.
        """
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
        if data.get("model_type", "albert") != "albert":
            raise ConfigError(f"{source}: model_type is {data['model_type']!r}, expected 'albert'")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if key in names:
                kwargs[key] = value
            elif key in _TF_LEFTOVERS or key in _HF_BOOKKEEPING or key == "label2id":
                continue
            else:
                extra[key] = value
        if "id2label" in kwargs and kwargs["id2label"] is not None:
            try:
                kwargs["id2label"] = {int(k): v for k, v in kwargs["id2label"].items()}
            except (AttributeError, ValueError) as exc:
                raise ConfigError(f"{source}: id2label must map integer ids to names") from exc
            kwargs.setdefault("num_labels", len(kwargs["id2label"]))
            if all(v == f"LABEL_{k}" for k, v in kwargs["id2label"].items()):
                kwargs["id2label"] = None
        if "sharing" not in kwargs:
            L = kwargs.get("num_hidden_layers", cls.num_hidden_layers)
            G = kwargs.get("num_hidden_groups", cls.num_hidden_groups)
            K = kwargs.get("inner_group_num", cls.inner_group_num)
            one_per_layer = G == L and K == 1 and isinstance(L, int) and L > 1  # a wrong type: refused below
            kwargs["sharing"] = "none" if one_per_layer else "all"
        try:
            return cls(**kwargs, extra=extra)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        except TypeError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def to_json_file(self, path: str | os.PathLike) -> None:
        """Write config.json atomically."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "AlbertConfig":
        """Read config.json; errors name the file."""
        return cls.from_dict(read_json_file(path), source=str(path))


def read_json_file(path: str | os.PathLike) -> Any:
    """Parse a JSON config file; every way reading it can fail is a one-line ConfigError naming it."""
    raw = read_bytes(path, "config file", ConfigError)
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deeply") from None


# ---------------------------------------------------------------------- presets
def _albert(hidden: int, layers: int, heads: int, ffn: int) -> AlbertConfig:
    return AlbertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=ffn, embedding_size=128, vocab_size=30000, sharing="all")


def _bert(hidden: int, layers: int, heads: int, ffn: int) -> AlbertConfig:
    return AlbertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=ffn, embedding_size=hidden, vocab_size=30000, sharing="none")


PRESETS: dict[str, AlbertConfig] = {
    # The released v2 shapes (official README); E=128, V=30000, gelu_new, no dropout.
    "albert-base": _albert(768, 12, 12, 3072),
    "albert-large": _albert(1024, 24, 16, 4096),
    "albert-xlarge": _albert(2048, 24, 16, 8192),
    "albert-xxlarge": _albert(4096, 12, 64, 16384),
    # BERT of the paper's Table 1: E == H, nothing shared (heads H/64).
    "bert-base": _bert(768, 12, 12, 3072),
    "bert-large": _bert(1024, 24, 16, 4096),
    "bert-xlarge": _bert(2048, 24, 32, 8192),
    # brightmart/albert_zh's tiny shape, for CPU pretraining.
    "albert-tiny": AlbertConfig(hidden_size=312, num_hidden_layers=4, num_attention_heads=12,
                                intermediate_size=1248, embedding_size=128, vocab_size=30000),
    # The quick recipe's model: BERT-Mini's shape (L=4, H=256, 4 heads; Turc et al. 2019) with
    # ALBERT's factorized E=128 embedding and all layers shared: 2.0M parameters with heads at V=8000.
    "albert-mini": AlbertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                intermediate_size=1024, embedding_size=128, vocab_size=30000),
    # BERT-Small's shape (L=4, H=512, 8 heads; Turc et al. 2019) with ALBERT's E=128 and all layers
    # shared: about 2.5x albert-tiny's compute a token, for runs given more time than the default.
    "albert-small": AlbertConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                                 intermediate_size=2048, embedding_size=128, vocab_size=30000),
    # Small enough for unit tests.
    "test": AlbertConfig(vocab_size=128, embedding_size=16, hidden_size=32, num_hidden_layers=3,
                         num_attention_heads=4, intermediate_size=37, max_position_embeddings=64),
}


def get_preset(name: str, **overrides: Any) -> AlbertConfig:
    """A named preset, optionally with fields changed (e.g. vocab_size, sharing)."""
    try:
        config = PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None
    return config.replace(**overrides) if overrides else config
