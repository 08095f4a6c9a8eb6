"""The WordPiece vocabulary: a BERT `vocab.txt`, as Google's Chinese ALBERT models and albert_zh use.

Encoding is the `tokenizers` library's: BertNormalizer (clean text, a space around every CJK
character, accents stripped when lower-casing, lower-casing) + BertPreTokenizer (whitespace and
punctuation) + the WordPiece model (greedy longest match, `##` continuations, a word of over 100
characters or with an unmatched rest becomes [UNK]). Those are the pieces transformers'
`BertTokenizer` is built from, so ids equal its ids for the same vocab.txt and options.

Special ids come from the file: each special token is looked up by its text ([PAD], [UNK], [CLS],
[SEP], [MASK], or the names tokenizer_config.json gives). Entries that are a name in brackets
(`[unused7]`, `<S>`) can never come out of text, since BertPreTokenizer splits brackets off as
punctuation: they are `SpecialIds.reserved`, never a random replacement when masking.

Word starts (whole-word masking): a piece starts a word unless it begins with `##`; in Chinese
mode a piece that is a CJK ideograph starts a word only where jieba starts a word, so all
characters of one jieba word are masked together (docs/checkpoints.md, "Vocabularies").
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.tokenizer.base import CONFIG_FILE, PieceVocabulary, read_config
from albertlm.tokenizer.chinese import CJK_GAP_RE, HAN_RE, jieba
from albertlm.vocab import SpecialIds

VOCAB_FILE = "vocab.txt"
CONFIG_VERSION = 1
MAX_CHARS_PER_WORD = 100
"""Longer words become [UNK] (BERT's max_input_chars_per_word)."""
SPECIAL_NAMES = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
"""BERT's special tokens; tokenizer_config.json's `<name>_token` fields may rename them."""
CHINESE_SHARE = 0.3
"""Without a recorded choice, Chinese mode is on when more than this share of the entries (special
and reserved ones aside) are CJK ideographs (Google's Chinese vocab.txt: about two thirds; the
English ones: a few percent)."""
BOM = "\ufeff"
"""The byte-order mark some editors put at the start of a UTF-8 file."""
_RESERVED_RE = re.compile(r"^(\[[^\[\]\s]+\]|<[^<>\s]+>)$")


def read_vocab_file(path: Path) -> list[str]:
    """The entries of a vocab.txt, one per line, id = line number (BERT's `load_vocab`).

    A file that starts with a UTF-8 byte-order mark is refused rather than read past: transformers'
    BertTokenizer keeps the mark as part of the first entry ("\\ufeff[PAD]"), then adds a [PAD] of
    its own beyond the model's rows, so the same file would mean two vocabularies.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise AlbertlmError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise AlbertlmError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if text.startswith(BOM):
        raise AlbertlmError(f"{path}: starts with a UTF-8 byte-order mark, which transformers' BertTokenizer "
                            "reads as part of the first entry; remove those 3 bytes (EF BB BF) and load it again")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last entry
    if not lines:
        raise AlbertlmError(f"{path}: an empty vocabulary")
    return lines


def _entry_ids(pieces: Sequence[str], specials: set[str], source: str) -> dict[str, int]:
    """{entry: id}; a repeated entry maps to its last line, as BERT's load_vocab does, except a
    special token, which is refused naming both lines.

    A repeated ordinary piece only leaves its earlier line's id unused, in transformers as here, so
    ids stay those the model was trained with. A repeated special token ("[CLS]" on line 20 too)
    would silently move its id to the later line: the vocabulary was edited after training, or is
    another model's.
    """
    ids: dict[str, int] = {}
    for i, piece in enumerate(pieces):
        if piece in specials and piece in ids:
            raise AlbertlmError(f"{source}: lines {ids[piece] + 1} and {i + 1} both hold {piece!r}; a special "
                                "token must appear once (its line number is its id)")
        ids[piece] = i
    return ids


class WordPieceTokenizer(PieceVocabulary):
    """A BERT WordPiece vocabulary with the `Vocabulary` interface (tokenizer/base.py).

    Args:
        pieces: the vocab.txt entries; id = position.
        do_lower_case: lower-case (and, unless strip_accents says otherwise, strip accents).
        strip_accents: None follows do_lower_case (as BertTokenizer).
        tokenize_chinese_chars: one piece per CJK character (BERT's default, True).
        chinese: Chinese mode: jieba word starts (None: from the vocabulary, see CHINESE_SHARE).
        parse_special_tokens: map literal "[MASK]", "[CLS]", ... in the text to their ids, as
            transformers does (the data build turns it off: text is text).
        special_names: {pad, unk, cls, sep, mask: token text} overriding SPECIAL_NAMES.
        source: where the vocabulary came from, for error messages.
    """

    def __init__(self, pieces: Sequence[str], *, do_lower_case: bool = True, strip_accents: bool | None = None,
                 tokenize_chinese_chars: bool = True, chinese: bool | None = None,
                 parse_special_tokens: bool = True, special_names: dict[str, str] | None = None,
                 source: str = VOCAB_FILE):
        self._pieces = list(pieces)
        self.do_lower_case, self.strip_accents = do_lower_case, strip_accents
        self.tokenize_chinese_chars, self.parse_special_tokens = tokenize_chinese_chars, parse_special_tokens
        self.special_names = {**SPECIAL_NAMES, **(special_names or {})}
        self.source = source
        self._ids = _entry_ids(self._pieces, set(self.special_names.values()), source)
        missing = [name for name in self.special_names.values() if name not in self._ids]
        if missing:
            raise AlbertlmError(f"{source}: no {', '.join(missing)} entry (a BERT vocab.txt lists "
                                f"{', '.join(SPECIAL_NAMES.values())})")
        named = {field: self._ids[name] for field, name in self.special_names.items()}
        reserved = tuple(i for i, p in enumerate(self._pieces) if _RESERVED_RE.match(p) and i not in named.values())
        self.special_ids = SpecialIds(**named, reserved=reserved)
        if chinese is None:
            han = sum(1 for p in self._pieces if len(p.removeprefix("##")) == 1 and HAN_RE.match(p.removeprefix("##")))
            chinese = han > CHINESE_SHARE * (len(self._pieces) - len(self.special_ids.excluded))
        self.chinese = chinese
        self._word_start = np.array([not p.startswith("##") for p in self._pieces], dtype=bool)
        self._specials = frozenset({named["pad"], named["cls"], named["sep"], named["mask"]})  # skipped by decode
        self._tok = self._build()

    def _build(self):
        """The `tokenizers` pipeline BertTokenizer uses (normaliser, pre-tokenizer, WordPiece model)."""
        from tokenizers import Tokenizer as Pipeline
        from tokenizers import decoders, models, normalizers, pre_tokenizers

        tok = Pipeline(models.WordPiece(self._ids, unk_token=self.special_names["unk"],
                                        max_input_chars_per_word=MAX_CHARS_PER_WORD))
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=self.tokenize_chinese_chars,
                                                    strip_accents=self.strip_accents, lowercase=self.do_lower_case)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
        if self.parse_special_tokens:
            from tokenizers import AddedToken

            tok.add_special_tokens([AddedToken(name, normalized=False) for name in self.special_names.values()])
        return tok

    # ---- loading and saving
    @classmethod
    def load(cls, path: str | os.PathLike, **kwargs) -> WordPieceTokenizer:
        """Load a directory with vocab.txt [+ tokenizer_config.json] (or a bare vocab.txt file).

        tokenizer_config.json's `do_lower_case` (default True, as BertTokenizer), `strip_accents`,
        `tokenize_chinese_chars`, `<name>_token` fields and our "albertlm" fields are read; keyword
        arguments (parse_special_tokens, ...) go to the constructor.
        """
        path = Path(path)
        vocab_file, config_file = (path / VOCAB_FILE, path / CONFIG_FILE) if path.is_dir() else (path, None)
        if not vocab_file.is_file():
            raise AlbertlmError(f"{path}: no {VOCAB_FILE}")
        options: dict = {}
        if config_file is not None and config_file.is_file():
            options = _read_config(config_file)
        return cls(read_vocab_file(vocab_file), source=str(vocab_file), **{**options, **kwargs})

    def save(self, out_dir: str | os.PathLike, *, extra: dict | None = None) -> Path:
        """Write vocab.txt and tokenizer_config.json (each atomically) into `out_dir`.

        The config carries what transformers reads (`tokenizer_class` BertTokenizer, `do_lower_case`,
        the special tokens), so `BertTokenizer.from_pretrained(out_dir)` and `AutoTokenizer` work;
        our own fields live under "albertlm".
        """
        config = {
            "tokenizer_class": "BertTokenizer", "do_lower_case": self.do_lower_case,
            "strip_accents": self.strip_accents, "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "model_max_length": 512,
            **{f"{field}_token": name for field, name in self.special_names.items()},
            "albertlm": {"format_version": CONFIG_VERSION, "vocabulary": "wordpiece", "chinese": self.chinese,
                         "vocab_size": self.vocab_size, **(extra or {})},
        }
        return self._write(out_dir, VOCAB_FILE, "".join(p + "\n" for p in self._pieces).encode("utf-8"), config)

    def _init_args(self) -> dict:
        return {"pieces": self._pieces, "do_lower_case": self.do_lower_case, "strip_accents": self.strip_accents,
                "tokenize_chinese_chars": self.tokenize_chinese_chars, "chinese": self.chinese,
                "parse_special_tokens": self.parse_special_tokens, "special_names": self.special_names,
                "source": self.source}

    # ---- vocabulary
    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        """Ids for pieces; unknown pieces map to [UNK]'s id."""
        return [self._ids.get(t, self.special_ids.unk) for t in tokens]

    # ---- encoding
    def normalise_text(self, text: str) -> str:
        """BERT's normaliser with this vocabulary's settings (as `tokenizers` applies it), whitespace collapsed."""
        return " ".join(self._tok.normalizer.normalize_str(text).split())

    def _encodings(self, texts: Sequence[str]):
        return self._tok.encode_batch(list(texts), add_special_tokens=False)

    def _starts(self, text: str, enc) -> np.ndarray:
        """Word starts of one encoding: not `##`; in Chinese mode, CJK pieces where jieba starts a word."""
        ids = np.asarray(enc.ids, dtype=np.int64)
        starts = self._word_start[ids]  # indexing by an array gives a copy
        if not self.chinese or not HAN_RE.search(text):
            return starts
        word_begins, at = set(), 0
        for word in jieba().lcut(text):
            word_begins.add(at)
            at += len(word)
        if at != len(text):  # jieba returns its whole input in pieces; never expected
            raise RuntimeError("jieba segmentation does not cover the text")
        for k, (begin, end) in enumerate(enc.offsets):
            if starts[k] and end > begin and HAN_RE.match(text[begin]) and ids[k] not in self._specials:
                starts[k] = begin in word_begins
        return starts

    def encode_batch_packed(self, texts: Sequence[str], *, word_starts: bool = True
                            ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Encode many texts in one multi-threaded `tokenizers` call; the data build's fast path.

        Args:
            texts: N raw texts.
            word_starts: also return word starts (see the module docstring).
        Returns:
            (ids int32 [T], word_start bool [T] or None, offsets int64 [N+1]): text i's pieces
            are ids[offsets[i]:offsets[i+1]].
        """
        encodings = self._encodings(texts)
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum([len(e.ids) for e in encodings], out=offsets[1:])
        ids = np.fromiter((i for e in encodings for i in e.ids), dtype=np.int32, count=int(offsets[-1]))
        if not word_starts:
            return ids, None, offsets
        if self.chinese:
            starts = np.concatenate([np.zeros(0, bool)] + [self._starts(t, e) for t, e in zip(texts, encodings)])
        else:
            starts = self._word_start[ids]
        return ids, starts, offsets

    def encode_batch_with_offsets(self, texts: Sequence[str]) -> list[tuple[np.ndarray, list[tuple[int, int]]]]:
        """Ids and each piece's character span [start, end) in its original text (exact, from tokenizers).

        Returns:
            [(ids int32 [n], [(start, end)] * n)] per text.
        """
        return [(np.asarray(e.ids, dtype=np.int32), [tuple(o) for o in e.offsets]) for e in self._encodings(texts)]

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        """Text for ids (normalised as the tokenizer saw it: lower-cased etc.); `##` pieces joined.

        Args:
            ids: token ids.
            skip_special_tokens: drop [PAD]/[CLS]/[SEP]/[MASK]; otherwise they appear as text.
        """
        ids = self._checked_ids(ids)
        tokens = [self._pieces[i] for i in ids if not (skip_special_tokens and i in self._specials)]
        text = self._tok.decoder.decode(tokens) if tokens else ""
        return CJK_GAP_RE.sub("", text) if self.chinese else text


def _read_config(config_file: Path) -> dict:
    """Constructor options from a tokenizer_config.json (transformers' fields and ours)."""
    config, ours = read_config(config_file)
    options: dict = {}
    for key, value, nullable in (("do_lower_case", config.get("do_lower_case"), False),
                                 ("strip_accents", config.get("strip_accents"), True),
                                 ("tokenize_chinese_chars", config.get("tokenize_chinese_chars"), False),
                                 ("chinese", ours.get("chinese"), False)):
        if value is None:
            continue
        if not isinstance(value, bool):
            raise AlbertlmError(f"{config_file}: field {key!r} must be true or false"
                                f"{' or null' if nullable else ''}, got {value!r}")
        options[key] = value
    names = {}
    for field in SPECIAL_NAMES:
        value = config.get(f"{field}_token")
        if isinstance(value, dict):  # transformers' serialised AddedToken
            value = value.get("content")
        if value is not None:
            if not isinstance(value, str) or not value:
                raise AlbertlmError(f"{config_file}: field '{field}_token' must be a token string, got {value!r}")
            names[field] = value
    if names:
        options["special_names"] = names
    return options
