"""The SentencePiece vocabulary: `spiece.model` with ALBERT's ids, loading, saving, encoding.

The model is a SentencePiece unigram model trained with the official recipe
(docs/design-notes.md, "Tokenizer"). Text is normalised as the official ALBERT code does
(normalize.py) before SentencePiece sees it, so a trained directory (`spiece.model` plus
`tokenizer_config.json`) gives the same ids through transformers'
`AlbertTokenizer.from_pretrained(dir)` as through `Tokenizer.load(dir)` on English text. Like
transformers, the five special-token strings are recognised when they appear literally in the
text. Chinese mode: chinese.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from itertools import groupby
from pathlib import Path

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.tokenizer.base import CONFIG_FILE, PieceVocabulary, read_config
from albertlm.tokenizer.chinese import CJK_GAP_RE, chinese_pieces, split_cjk
from albertlm.tokenizer.normalize import preprocess_batch, preprocess_text
from albertlm.vocab import SPECIAL_TOKENS, SPIECE_IDS

MODEL_FILE = "spiece.model"
CONFIG_VERSION = 1
_META = "\u2581"  # SentencePiece's word-boundary mark "▁"
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")
_SPECIAL_IDS = {token: i for i, token in enumerate(SPECIAL_TOKENS)}


def clean_sentencepiece_error(exc: BaseException) -> str:
    """SentencePiece's message without its C++ file/line/assertion prefix."""
    msg = " ".join(str(exc).split())
    m = re.match(r"^\w+: \S+\(\d+\) \[(.*?)\]\s*(.*)$", msg)
    return (m.group(2) or m.group(1)) if m else msg


class Tokenizer(PieceVocabulary):
    """An ALBERT SentencePiece tokenizer plus its pre-processing options.

    Args:
        model_proto: the serialized SentencePiece model (the bytes of spiece.model).
        do_lower_case, keep_accents: pre-processing (see `preprocess_text`).
        chinese: Chinese mode (one piece per CJK character, jieba word starts).
        num_threads: SentencePiece threads for batched encoding (-1: all cores).
        parse_special_tokens: map literal "[MASK]", "<unk>", ... in the text to their ids, as
            transformers does (the official ALBERT code does not).
        split_digit_comma: Google's rule for a piece that ends in a digit and a comma ("▁7,"
            becomes "▁7" ","), as the official ALBERT code encodes; on for models converted
            from Google's checkpoints, off for our own vocabularies (docs/checkpoints.md).
        source: where the model came from, for error messages.
    """

    def __init__(self, model_proto: bytes, *, do_lower_case: bool = True, keep_accents: bool = False,
                 chinese: bool = False, num_threads: int = -1, parse_special_tokens: bool = True,
                 split_digit_comma: bool = False, source: str = "spiece.model"):
        import sentencepiece as spm

        self.do_lower_case, self.keep_accents, self.chinese = do_lower_case, keep_accents, chinese
        self.num_threads, self.parse_special_tokens = num_threads, parse_special_tokens
        self._proto = bytes(model_proto)
        self.special_ids = SPIECE_IDS  # ALBERT's layout, checked below
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(self._proto)
        except Exception as exc:  # noqa: BLE001 - any failure means "not a SentencePiece model"
            raise AlbertlmError(f"{source}: not a SentencePiece model "
                                f"({clean_sentencepiece_error(exc)})") from None
        n = self._sp.get_piece_size()
        self._pieces = [self._sp.id_to_piece(i) for i in range(n)]
        if tuple(self._pieces[:len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise AlbertlmError(f"{source}: ids 0-4 are {self._pieces[:5]}, not ALBERT's "
                                f"{list(SPECIAL_TOKENS)}")
        # A piece starts a word when it carries SentencePiece's "▁"; special tokens are words of
        # their own; <unk> stands for characters inside a word (SentencePiece emits "▁" apart).
        starts = np.array([p.startswith(_META) for p in self._pieces], dtype=bool)
        special = self.special_ids
        starts[[special.pad, special.cls, special.sep, special.mask]] = True
        starts[special.unk] = False
        self._word_start = starts
        self._meta_id = self._sp.piece_to_id(_META) if _META in self._pieces else -1
        self._buffers = self._find_buffer_batch()
        self.split_digit_comma = split_digit_comma
        self._digit_comma = np.array([len(p) > 1 and p[-1] == "," and p[-2].isdigit() for p in self._pieces],
                                     dtype=bool) if split_digit_comma else None
        self._digit_comma_ids: dict[int, np.ndarray] = {}  # piece id -> the ids it splits into

    def _find_buffer_batch(self) -> Callable[[list[str], int], list[bytes]]:
        """A batch encoder returning each text's ids as int32 bytes.

        SentencePiece's public batch API builds a Python int per piece, a large share of the
        encoding time; its C++ buffer method skips that. The method is private, so it is used
        only after giving the same ids as the public API on a probe.
        """
        def public(texts: list[str], threads: int) -> list[bytes]:
            return [np.asarray(a, np.int32).tobytes() for a in self._sp.encode(texts, num_threads=threads)]

        raw = getattr(getattr(self._sp, "_processor", None), "_EncodeAsBufferBatch", None)
        if raw is None:
            return public

        def fast(texts: list[str], threads: int) -> list[bytes]:
            # (inputs, threads, thread_pool, sampling, nbest, alpha, add_bos, add_eos, reverse)
            return [bytes(b) for b in raw(texts, threads, None, False, -1, 0.1, False, False, False)]
        probe = ["hello world", "", "a b c 123"]
        try:
            return fast if fast(probe, 1) == public(probe, 1) else public
        except Exception:  # noqa: BLE001 - a changed private signature: use the public API
            return public

    # ---- loading and saving
    @classmethod
    def load(cls, path: str | os.PathLike, **kwargs) -> Tokenizer:
        """Load a directory written by `train_tokenizer` / `save` (or a bare spiece.model file).

        A directory without tokenizer_config.json gets ALBERT's defaults (lower-cased, accents
        stripped, not Chinese), which fit Google's released spiece.model files. Keyword arguments
        (num_threads, parse_special_tokens, ...) go to the constructor.
        """
        path = Path(path)
        model_file, config_file = (path / MODEL_FILE, path / CONFIG_FILE) if path.is_dir() else (path, None)
        if not model_file.is_file():
            raise AlbertlmError(f"{path}: no {MODEL_FILE} (train one with `albertlm tokenizer train`)")
        options = {"do_lower_case": True, "keep_accents": False, "chinese": False, "split_digit_comma": False}
        if config_file is not None and config_file.is_file():
            config, ours = read_config(config_file)
            for key, value in (*((k, config.get(k)) for k in ("do_lower_case", "keep_accents")),
                               ("chinese", ours.get("chinese")), ("split_digit_comma", ours.get("split_digit_comma"))):
                if value is not None and not isinstance(value, bool):
                    raise AlbertlmError(f"{config_file}: field {key!r} must be true or false, got {value!r}")
                options[key] = options[key] if value is None else value
        return cls(model_file.read_bytes(), source=str(model_file), **{**options, **kwargs})

    def save(self, out_dir: str | os.PathLike, *, extra: dict | None = None) -> Path:
        """Write spiece.model and tokenizer_config.json (each atomically) into `out_dir`.

        The config carries the keys transformers reads (`tokenizer_class`, `do_lower_case`,
        `keep_accents`), so `AlbertTokenizer.from_pretrained(out_dir)` and `AutoTokenizer` work;
        our own fields live under "albertlm".
        """
        config = {
            "tokenizer_class": "AlbertTokenizer", "do_lower_case": self.do_lower_case,
            "keep_accents": self.keep_accents, "model_max_length": 512,
            "albertlm": {"format_version": CONFIG_VERSION, "chinese": self.chinese,
                         "split_digit_comma": self.split_digit_comma, "vocab_size": self.vocab_size,
                         **(extra or {})},
        }
        return self._write(out_dir, MODEL_FILE, self._proto, config)

    def _init_args(self) -> dict:
        return {"model_proto": self._proto, "do_lower_case": self.do_lower_case,
                "keep_accents": self.keep_accents, "chinese": self.chinese,
                "num_threads": self.num_threads, "parse_special_tokens": self.parse_special_tokens,
                "split_digit_comma": self.split_digit_comma}

    # ---- vocabulary
    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        """Ids for pieces; unknown pieces map to <unk>'s id."""
        return [self._sp.piece_to_id(t) for t in tokens]

    # ---- encoding
    def normalise_text(self, text: str) -> str:
        """The official ALBERT normalisation with this vocabulary's case and accent settings (`preprocess_text`)."""
        return self._prepare(text)

    def _prepare(self, text: str) -> str:
        return preprocess_text(text, do_lower_case=self.do_lower_case, keep_accents=self.keep_accents)

    def _prepare_batch(self, texts: Sequence[str]) -> list[str]:
        return preprocess_batch(texts, do_lower_case=self.do_lower_case, keep_accents=self.keep_accents)

    def _encode_each(self, texts: Sequence[str], with_starts: bool) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """The general path: literal special tokens and Chinese mode, text by text."""
        chunks: list[str] = []
        layout: list = []  # per text: a chunk index, or a list of chunk indices / -1 - special id
        for text in texts:
            if self.parse_special_tokens and ("[" in text or "<" in text) and _SPECIAL_RE.search(text):
                entry = []
                for j, part in enumerate(_SPECIAL_RE.split(text)):  # text, special, text, ...
                    if j % 2:
                        entry.append(-1 - _SPECIAL_IDS[part])
                    elif prepared := self._prepare(part):
                        entry.append(len(chunks))
                        chunks.append(prepared)
                layout.append(entry)
            else:
                layout.append(len(chunks))
                chunks.append(self._prepare(text))
        if self.chinese:
            spaced = [split_cjk(c) for c in chunks]
            mapped = self._sp.encode(spaced, return_type="offset_mapping", num_threads=self.num_threads)
            encoded = [chinese_pieces(chunk, spaced_chunk, enc, self._meta_id, with_starts)
                       for chunk, spaced_chunk, enc in zip(chunks, spaced, mapped)]
        else:
            arrays = self._sp.encode(chunks, num_threads=self.num_threads)
            encoded = [(ids := np.array(a, dtype=np.int32), self._word_start[ids] if with_starts else None)
                       for a in arrays]
        out = []
        for entry in layout:
            if isinstance(entry, int):
                out.append(encoded[entry])
                continue
            ids, starts = [np.zeros(0, np.int32)], [np.zeros(0, bool)]
            for item in entry:
                if item >= 0:
                    ids.append(encoded[item][0])
                    starts.append(encoded[item][1])
                else:  # a special token is a word of its own
                    ids.append(np.array([-1 - item], dtype=np.int32))
                    starts.append(np.ones(1, dtype=bool))
            out.append((np.concatenate(ids), np.concatenate(starts) if with_starts else None))
        return out

    def encode_batch_packed(self, texts: Sequence[str], *, word_starts: bool = True
                            ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Encode many texts in one multi-threaded SentencePiece call; the data build's fast path.

        Args:
            texts: N raw texts.
            word_starts: also return word starts (see `encode_with_word_starts`).
        Returns:
            (ids int32 [T], word_start bool [T] or None, offsets int64 [N+1]): text i's pieces
            are ids[offsets[i]:offsets[i+1]].
        """
        ids, starts, offsets = self._encode_packed(texts, word_starts)
        if self._digit_comma is not None:
            ids, starts, offsets = self._split_digit_commas(ids, starts, offsets)
        return ids, starts, offsets

    def _encode_packed(self, texts: Sequence[str], word_starts: bool
                       ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """`encode_batch_packed` before the digit-comma rule."""
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        big = "\x00".join(texts)
        # (Substring tests behind a one-character memchr are far cheaper than a regex scan.)
        specials = ("[" in big or "<" in big) and any(t in big for t in SPECIAL_TOKENS)
        if self.chinese or (specials and self.parse_special_tokens):
            parts = self._encode_each(texts, word_starts)
            np.cumsum([len(ids) for ids, _ in parts], out=offsets[1:])
            ids = np.concatenate([np.zeros(0, np.int32)] + [ids for ids, _ in parts])
            starts = np.concatenate([np.zeros(0, bool)] + [s for _, s in parts]) if word_starts else None
            return ids, starts, offsets
        buffers = self._buffers(self._prepare_batch(texts), self.num_threads)  # int32 bytes
        np.cumsum(np.fromiter(map(len, buffers), dtype=np.int64, count=len(buffers)) // 4, out=offsets[1:])
        ids = np.frombuffer(b"".join(buffers), dtype=np.int32).copy()
        return ids, (self._word_start[ids] if word_starts else None), offsets

    def _split_digit_commas(self, ids: np.ndarray, starts: np.ndarray | None, offsets: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Google's digit-comma rule on packed pieces (see `_digit_comma_pieces`).

        A split piece's first part keeps its word-start flag; the rest continue its word.
        """
        hits = np.flatnonzero(self._digit_comma[ids])
        if not len(hits):
            return ids, starts, offsets
        parts = [self._digit_comma_pieces(int(ids[h])) for h in hits]
        counts = np.ones(len(ids), dtype=np.int64)
        counts[hits] = [len(p) for p in parts]
        begin = np.concatenate([[0], np.cumsum(counts)])  # new position of every old piece (and the end)
        new_ids = np.repeat(ids, counts)
        new_starts = np.repeat(starts, counts) if starts is not None else None
        for h, part in zip(hits, parts):
            new_ids[begin[h]:begin[h] + len(part)] = part
            if new_starts is not None:
                new_starts[begin[h] + 1:begin[h] + len(part)] = False
        return new_ids, new_starts, begin[offsets]

    def _digit_comma_pieces(self, piece_id: int) -> np.ndarray:
        """The ids a piece ending in a digit and a comma becomes under the official ALBERT rule.

        The piece without its comma and without any "▁" is encoded again; if the piece did not
        start a word, the "▁" SentencePiece puts in front of that encoding is removed (a bare "▁"
        piece is dropped); the comma follows as a piece of its own. Pieces missing from the
        vocabulary become <unk>, as the official PieceToId does.
        """
        cached = self._digit_comma_ids.get(piece_id)
        if cached is None:
            piece = self._pieces[piece_id]
            parts = self._sp.encode(piece[:-1].replace(_META, ""), out_type=str)
            if not piece.startswith(_META) and parts and parts[0].startswith(_META):
                parts = parts[1:] if parts[0] == _META else [parts[0][1:], *parts[1:]]
            parts.append(piece[-1])
            cached = np.array([self._sp.piece_to_id(p) for p in parts], dtype=np.int32)
            self._digit_comma_ids[piece_id] = cached
        return cached

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        """Text for ids (of the pre-processed text: lower-cased etc. as the tokenizer saw it).

        Args:
            ids: token ids.
            skip_special_tokens: drop <pad>/[CLS]/[SEP]/[MASK]; otherwise they appear as text.
        """
        ids = self._checked_ids(ids)
        parts: list[str] = []  # SentencePiece decodes control symbols to "": keep them apart
        s = self.special_ids
        for special, run in groupby(ids, key=lambda i: i in (s.pad, s.cls, s.sep, s.mask)):
            if not special:
                parts.append(self._sp.decode(list(run)))
            elif not skip_special_tokens:
                parts.extend(SPECIAL_TOKENS[i] for i in run)
        text = " ".join(p for p in parts if p)
        return CJK_GAP_RE.sub("", text) if self.chinese else text
