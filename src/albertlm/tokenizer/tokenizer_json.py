"""A `tokenizer.json` (the `tokenizers` library's file) as a vocabulary: what transformers 5 and
sentence-transformers save for ALBERT and BERT tokenizers instead of spiece.model or vocab.txt.

auto.py uses it only for a directory that holds neither of those files. The ids are the file's own
pipeline (normaliser, pre-tokenizer, model), so they are exactly the ids transformers computes from
the same file; [CLS] and [SEP] are added by `build_inputs` (the file's post-processor, truncation
and padding are not used). The special tokens are named by tokenizer_config.json (`cls_token`, ...)
or, without it, are ALBERT's (<pad>, <unk>) or BERT's ([PAD], [UNK]) names, whichever the file has.

Word starts (whole-word masking): a piece starts a word when it begins with SentencePiece's "▁"
(a Unigram or BPE model) or does not begin with the continuation prefix (a WordPiece model, "##").
There is no Chinese mode (no jieba word starts). Bracketed entries of a WordPiece file ([unused7])
are reserved ids, as in wordpiece.py, and so is any id the file leaves unused.

`bert_wordpiece` reads a WordPiece file the other way, as transformers' BertTokenizer does: its
entries with tokenizer_config.json's settings, as a `WordPieceTokenizer` (what a BERT import uses).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.tokenizer.base import CONFIG_FILE, PieceVocabulary, read_config
from albertlm.tokenizer.wordpiece import _RESERVED_RE, WordPieceTokenizer, _read_config
from albertlm.vocab import SpecialIds

JSON_FILE = "tokenizer.json"
GAP_ENTRY = "[unused_gap{}]"
"""The entry `bert_wordpiece` puts at an id a tokenizer.json leaves unused (bracketed: no text gives it)."""
_META = "\u2581"  # SentencePiece's word-boundary mark "▁"
_NAMES = {"pad": ("<pad>", "[PAD]"), "unk": ("<unk>", "[UNK]"), "cls": ("[CLS]",), "sep": ("[SEP]",),
          "mask": ("[MASK]",)}
"""Each special token's usual names (ALBERT's first), tried when tokenizer_config.json names none."""


def _configured_names(config: dict, config_file: Path) -> dict[str, str]:
    """The `<name>_token` fields of a tokenizer_config.json (a string or transformers' AddedToken object)."""
    names = {}
    for field in _NAMES:
        value = config.get(f"{field}_token")
        if isinstance(value, dict):
            value = value.get("content")
        if value is not None:
            if not isinstance(value, str) or not value:
                raise AlbertlmError(f"{config_file}: field '{field}_token' must be a token string, got {value!r}")
            names[field] = value
    return names


class TokenizerJsonVocabulary(PieceVocabulary):
    """The `Vocabulary` interface (base.py) over a tokenizer.json.

    Args:
        text: the file's JSON text.
        special_names: {pad, unk, cls, sep, mask: token text}; a field left out takes its usual names.
        parse_special_tokens: map the file's special tokens written literally in the text to their
            ids, as transformers does; False encodes them as ordinary text (the data build).
        config: the tokenizer_config.json fields, written back by `save`.
        source: the file, for messages.
    """

    chinese = False

    def __init__(self, text: str, *, special_names: dict[str, str] | None = None, parse_special_tokens: bool = True,
                 config: dict | None = None, source: str = JSON_FILE):
        from tokenizers import Tokenizer as Pipeline

        self._text, self.source = text, source
        self.parse_special_tokens = parse_special_tokens
        self._config = dict(config or {})
        try:
            data = json.loads(text)
            if not parse_special_tokens:
                data["added_tokens"] = [t for t in data.get("added_tokens", []) if not t.get("special")]
            tok = Pipeline.from_str(json.dumps(data))
        except Exception as exc:  # noqa: BLE001 - JSONDecodeError, the Rust parser's Exception
            raise AlbertlmError(f"{source}: not a tokenizers file ({str(exc).splitlines()[0]})") from None
        tok.no_truncation()
        tok.no_padding()
        self._tok = tok
        vocab = tok.get_vocab(with_added_tokens=True)  # {piece: id}
        if not vocab:
            raise AlbertlmError(f"{source}: an empty vocabulary")
        # A vocab.txt with a repeated line converts to a file whose earlier id is unused: a gap, kept
        # (the ids are the model's rows) as a reserved id no text encodes to.
        self._pieces = [""] * (max(vocab.values()) + 1)
        for piece, i in vocab.items():
            self._pieces[i] = piece
        gaps = set(range(len(self._pieces))) - set(vocab.values())
        self.special_names = self._special_names(vocab, special_names or {})
        named = {field: vocab[name] for field, name in self.special_names.items()}
        model = data.get("model") or {}
        if model.get("type") == "WordPiece":
            prefix = model.get("continuing_subword_prefix") or "##"
            starts = np.array([not p.startswith(prefix) for p in self._pieces], dtype=bool)
            bracketed = {i for i, p in enumerate(self._pieces) if _RESERVED_RE.match(p)}
        else:
            starts = np.array([p.startswith(_META) for p in self._pieces], dtype=bool)
            bracketed = set()
        self.special_ids = SpecialIds(**named, reserved=tuple(sorted((bracketed | gaps) - set(named.values()))))
        starts[[named["pad"], named["cls"], named["sep"], named["mask"]]] = True
        self._word_start = starts
        self._specials = frozenset({named["pad"], named["cls"], named["sep"], named["mask"]})

    def _special_names(self, vocab: dict[str, int], given: dict[str, str]) -> dict[str, str]:
        names = {}
        for field, usual in _NAMES.items():
            candidates = (given[field],) if field in given else usual
            found = next((name for name in candidates if name in vocab), None)
            if found is None:
                raise AlbertlmError(f"{self.source}: no {' or '.join(candidates)} entry for the {field} token")
            names[field] = found
        return names

    # ---- loading and saving
    @classmethod
    def load(cls, path: str | os.PathLike, **kwargs) -> TokenizerJsonVocabulary:
        """Load a directory with tokenizer.json [+ tokenizer_config.json] (or a bare tokenizer.json).

        Keyword arguments (parse_special_tokens) go to the constructor.
        """
        path = Path(path)
        json_file, config_file = (path / JSON_FILE, path / CONFIG_FILE) if path.is_dir() else (path, None)
        if not json_file.is_file():
            raise AlbertlmError(f"{path}: no {JSON_FILE}")
        config: dict = {}
        names: dict[str, str] = {}
        if config_file is not None and config_file.is_file():
            config, _ = read_config(config_file)
            names = _configured_names(config, config_file)
        try:
            text = json_file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise AlbertlmError(f"{json_file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        return cls(text, special_names=names, config=config, source=str(json_file), **kwargs)

    def save(self, out_dir: str | os.PathLike, *, extra: dict | None = None) -> Path:
        """Write tokenizer.json and tokenizer_config.json (each atomically) into `out_dir`: the file as it
        was read, and the config it came with plus our fields under "albertlm"."""
        ours = {**(self._config.get("albertlm") or {}), "vocabulary": "tokenizer-json", "vocab_size": self.vocab_size,
                **(extra or {})}
        config = {**self._config, **{f"{f}_token": n for f, n in self.special_names.items()}, "albertlm": ours}
        return self._write(out_dir, JSON_FILE, self._text.encode("utf-8"), config)

    def _init_args(self) -> dict:
        return {"text": self._text, "special_names": self.special_names, "parse_special_tokens":
                self.parse_special_tokens, "config": self._config, "source": self.source}

    # ---- vocabulary
    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        """Ids for pieces; unknown pieces map to the unk token's id."""
        return [i if (i := self._tok.token_to_id(t)) is not None else self.special_ids.unk for t in tokens]

    # ---- encoding
    def encode_batch_packed(self, texts: Sequence[str], *, word_starts: bool = True
                            ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Encode many texts in one multi-threaded `tokenizers` call.

        Returns:
            (ids int32 [T], word_start bool [T] or None, offsets int64 [N+1]): text i's pieces
            are ids[offsets[i]:offsets[i+1]].
        """
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum([len(e.ids) for e in encodings], out=offsets[1:])
        ids = np.fromiter((i for e in encodings for i in e.ids), dtype=np.int32, count=int(offsets[-1]))
        return ids, (self._word_start[ids] if word_starts else None), offsets

    def encode_batch_with_offsets(self, texts: Sequence[str]) -> list[tuple[np.ndarray, list[tuple[int, int]]]]:
        """Ids and each piece's character span [start, end) in its original text (from tokenizers)."""
        return [(np.asarray(e.ids, dtype=np.int32), [tuple(o) for o in e.offsets])
                for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        """Text for ids, through the file's decoder."""
        ids = self._checked_ids(ids)
        return self._tok.decode([i for i in ids if not (skip_special_tokens and i in self._specials)],
                                skip_special_tokens=False)


def bert_wordpiece(path: str | os.PathLike, **kwargs) -> WordPieceTokenizer:
    """A directory's WordPiece tokenizer.json read as transformers' BertTokenizer reads it: the file's
    entries, with tokenizer_config.json's settings as `WordPieceTokenizer.load` reads them (do_lower_case
    true unless it says otherwise), whatever the file's own normaliser says: BertTokenizer rebuilds the
    normaliser from those settings (transformers 4's fast tokenizer and 5's alike). This class, by
    contrast, runs the file's pipeline as it is.

    An id the file leaves unused (a vocab.txt line repeated further down, converted) becomes a
    bracketed entry (GAP_ENTRY) that no text produces, so that every id keeps its row.

    Args:
        path: the directory.
        **kwargs: for the WordPieceTokenizer constructor (parse_special_tokens, ...).
    Raises:
        AlbertlmError: no tokenizer.json, one that cannot be read, or one whose model is not WordPiece.
    """
    from tokenizers import Tokenizer as Pipeline

    json_file, config_file = Path(path) / JSON_FILE, Path(path) / CONFIG_FILE
    try:
        text = json_file.read_text(encoding="utf-8")
        model_type = (json.loads(text).get("model") or {}).get("type")
        vocab = Pipeline.from_str(text).get_vocab(with_added_tokens=True)  # {piece: id}
    except OSError as exc:
        raise AlbertlmError(f"{json_file}: cannot read ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001 - UnicodeDecodeError, JSONDecodeError, the Rust parser's Exception
        raise AlbertlmError(f"{json_file}: not a tokenizers file ({str(exc).splitlines()[0]})") from None
    if model_type != "WordPiece" or not vocab:
        raise AlbertlmError(f"{json_file}: its model is {model_type!r}, not a WordPiece vocabulary")
    pieces = [GAP_ENTRY.format(i) for i in range(max(vocab.values()) + 1)]
    for piece, i in vocab.items():
        pieces[i] = piece
    options = _read_config(config_file) if config_file.is_file() else {}
    return WordPieceTokenizer(pieces, source=str(json_file), **{**options, **kwargs})
