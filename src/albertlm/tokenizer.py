"""SentencePiece tokenizer with ALBERT's ids: training, encoding, word starts, Chinese mode.

The vocabulary is a SentencePiece unigram model trained with the official recipe (docs/design-notes.md,
"Tokenizer"): `<pad>`=0 `<unk>`=1 `[CLS]`=2 `[SEP]`=3 `[MASK]`=4, no BOS/EOS, character
coverage 0.99995. Text is pre-processed like the official ALBERT code before SentencePiece sees
it (collapse whitespace, `` and '' -> ", NFKD without combining marks unless accents are kept,
lower-case unless cased), so a trained directory (`spiece.model` + `tokenizer_config.json`)
gives the same ids through transformers' `AlbertTokenizer.from_pretrained(dir)` as through
`Tokenizer.load(dir)` on English text. Like transformers, the five special-token strings are
recognised when they appear literally in the text.

Chinese mode (albert_zh style): every CJK character is split off with spaces before
SentencePiece, so no piece ever joins two of them, and any bare "▁" piece that only stands for
those added spaces is dropped (one piece per character). Word starts, which drive whole-word
masking, then come from jieba's segmentation: all characters of a jieba word are masked together.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, groupby, islice
from pathlib import Path

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.utils import atomic_write_bytes, atomic_write_text
from albertlm.vocab import (CJK_RANGES, CLS_ID, CLS_TOKEN, HAN_RANGES, MASK_ID, MASK_TOKEN, PAD_ID,  # noqa: F401
                            PAD_TOKEN, SEP_ID, SEP_TOKEN, SPECIAL_TOKENS, UNK_ID, UNK_TOKEN, pair_inputs)

MODEL_FILE = "spiece.model"
CONFIG_FILE = "tokenizer_config.json"
CONFIG_VERSION = 1
DEFAULT_INPUT_SENTENCE_SIZE = 2_000_000  # sentences SentencePiece samples (bounds its memory)
_TRAIN_CHUNK_CHARS = 4096  # longer training sentences are cut at spaces (SentencePiece drops them)
_META = "\u2581"  # SentencePiece's word-boundary mark "▁"
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")
_SPECIAL_IDS = {token: i for i, token in enumerate(SPECIAL_TOKENS)}

# Chinese mode splits off every CJK character (vocab.CJK_RANGES); ideographs alone detect the language.
_HAN = HAN_RANGES
_CJK = CJK_RANGES
_CJK_RE = re.compile(f"([{_CJK}])")
_HAN_RE = re.compile(f"[{_HAN}]")
_CJK_GAP_RE = re.compile(f"(?<=[{_CJK}]) (?=[{_CJK}])")
# Characters str.split() takes for whitespace but SentencePiece's normaliser does not.
_ODD_SPACE_RE = re.compile("[\x0b\x1c-\x1f\x85]")


# ------------------------------------------------------------------------- pre-processing
@lru_cache(maxsize=1)
def _combining_marks() -> dict[int, None]:
    """str.translate table deleting every combining character (the official accent strip)."""
    return {cp: None for cp in range(0x110000) if unicodedata.combining(chr(cp))}


def preprocess_text(text: str, *, do_lower_case: bool = True, keep_accents: bool = False) -> str:
    """The official ALBERT text normalisation, applied before SentencePiece.

    Args:
        text: raw text.
        do_lower_case: lower-case (the paper's models are uncased).
        keep_accents: keep accents; otherwise NFKD and drop combining marks ("café" -> "cafe").
    Returns:
        normalised text with single spaces between words.
    """
    text = " ".join(text.split())
    if "``" in text or "''" in text:
        text = text.replace("``", '"').replace("''", '"')
    if not keep_accents and not text.isascii():  # ASCII has nothing to decompose: skip the work
        text = unicodedata.normalize("NFKD", text).translate(_combining_marks())
    return text.lower() if do_lower_case else text


def split_cjk(text: str) -> str:
    """Surround every CJK character with spaces, so SentencePiece keeps each one apart."""
    return _CJK_RE.sub(r" \1 ", text)


def looks_chinese(texts: Iterable[str], threshold: float = 0.5) -> bool:
    """True when more than `threshold` of the non-space characters of `texts` are CJK ideographs."""
    han = total = 0
    for text in texts:
        han += len(_HAN_RE.findall(text))
        total += sum(not ch.isspace() for ch in text)
    return total > 0 and han > threshold * total


@lru_cache(maxsize=1)
def _jieba():
    """Import jieba on first use (its import and dictionary load take about a second), quietly."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)  # it logs "Building prefix dict..." to stderr otherwise
    return jieba


# ------------------------------------------------------------------------------ training
@dataclass(frozen=True)
class TrainResult:
    """What `train_tokenizer` produced.

    Attributes:
        out_dir: directory holding spiece.model and tokenizer_config.json.
        vocab_size: pieces in the trained model (may be below the request, see `train_tokenizer`).
        requested_vocab_size: the size asked for.
        chinese: whether Chinese mode was used (forced or detected).
        sentences: sentences fed to the trainer (it samples at most `input_sentence_size`).
        seconds: wall time of the whole training, retries included.
    """

    out_dir: Path
    vocab_size: int
    requested_vocab_size: int
    chinese: bool
    sentences: int
    seconds: float


class _VocabTooHigh(Exception):
    def __init__(self, max_size: int):
        super().__init__(max_size)
        self.max_size = max_size  # the largest vocab_size SentencePiece says the corpus supports


def _replayable(sentences) -> Callable[[], Iterator[str]]:
    """Turn a callable / re-iterable / one-shot iterator into a function giving fresh passes."""
    if callable(sentences):
        return lambda: iter(sentences())
    if iter(sentences) is not sentences:  # a list, a Corpus, ...: iterate it again
        return lambda: iter(sentences)
    passes = iter([sentences])  # a one-shot iterator: one pass only

    def once() -> Iterator[str]:
        if (it := next(passes, None)) is None:
            raise AlbertlmError("the training sentences were a one-shot iterator and cannot be read "
                                "a second time; pass a list or a function returning an iterator")
        return it
    return once


def _chunks(text: str, limit: int) -> Iterator[str]:
    """Cut `text` into pieces of at most `limit` characters, at spaces where possible."""
    while len(text) > limit:
        cut = text.rfind(" ", 0, limit)
        cut = cut if cut > 0 else limit
        yield text[:cut]
        text = text[cut:].lstrip()
    if text:
        yield text


def _clean_sentencepiece_error(exc: BaseException) -> str:
    """SentencePiece's message without its C++ file/line/assertion prefix."""
    msg = " ".join(str(exc).split())
    m = re.match(r"^\w+: \S+\(\d+\) \[(.*?)\]\s*(.*)$", msg)
    return (m.group(2) or m.group(1)) if m else msg


def _train_once(sentences: Iterator[str], vocab_size: int, *, do_lower_case: bool,
                keep_accents: bool, chinese: bool, character_coverage: float,
                input_sentence_size: int, num_threads: int, seed: int) -> tuple[bytes, int]:
    """One SentencePiece training run; returns (model proto bytes, sentences fed)."""
    import sentencepiece as spm

    fed = 0
    failure: list[BaseException] = []

    def feed() -> Iterator[str]:
        nonlocal fed
        try:
            for sentence in sentences:
                text = preprocess_text(sentence, do_lower_case=do_lower_case, keep_accents=keep_accents)
                if chinese:
                    text = " ".join(split_cjk(text).split())
                for chunk in _chunks(text, _TRAIN_CHUNK_CHARS):
                    fed += 1
                    yield chunk
        except GeneratorExit:
            raise
        except BaseException as exc:  # noqa: BLE001 - SentencePiece would turn it into a RuntimeError string
            failure.append(exc)

    model = io.BytesIO()
    spm.set_random_generator_seed(seed)  # its sampling/shuffling RNG, seeded explicitly
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=feed(), model_writer=model, model_type="unigram",
            vocab_size=vocab_size, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=-1, eos_id=-1,
            control_symbols=[CLS_TOKEN, SEP_TOKEN, MASK_TOKEN],
            character_coverage=character_coverage, input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True, max_sentence_length=4 * _TRAIN_CHUNK_CHARS + 16,
            num_threads=num_threads, minloglevel=2)
    except RuntimeError as exc:
        if failure:
            raise failure[0] from None
        msg = _clean_sentencepiece_error(exc)
        if m := re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", msg):
            raise _VocabTooHigh(int(m.group(2))) from None
        if m := re.search(r"smaller than required_chars\. (\d+) vs (\d+)", msg):
            raise AlbertlmError(
                f"vocab_size {vocab_size} is too small: this corpus needs at least {m.group(2)} pieces "
                f"(its characters plus the special tokens)") from None
        if fed == 0 or "sentences_.empty()" in str(exc):
            raise AlbertlmError("no training text: every sentence was empty") from None
        raise AlbertlmError(f"SentencePiece training failed: {msg}") from None
    if failure:
        raise failure[0]
    return model.getvalue(), fed


def train_tokenizer(sentences: str | Iterable[str] | Callable[[], Iterable[str]], out_dir: str | os.PathLike,
                    vocab_size: int = 30000, *, do_lower_case: bool = True, keep_accents: bool = False,
                    chinese: bool | None = None, strict: bool = False,
                    character_coverage: float = 0.99995,
                    input_sentence_size: int = DEFAULT_INPUT_SENTENCE_SIZE,
                    num_threads: int | None = None, seed: int = 0,
                    log: Callable[[str], None] | None = None) -> TrainResult:
    """Train an ALBERT SentencePiece vocabulary and write `spiece.model` + `tokenizer_config.json`.

    Memory stays bounded: SentencePiece keeps a uniform sample of at most `input_sentence_size`
    sentences. If `vocab_size` is more than the corpus supports, SentencePiece says so and gives
    the largest possible size M; then a notice is logged and training is redone with M (two
    passes over the corpus), or with `strict` it is an AlbertlmError.

    Args:
        sentences: raw sentences: a list, a re-iterable, a function returning a fresh
            iterator (e.g. `Corpus(...).sentences`), or a corpus SPEC string such as "kjv". A
            one-shot iterator works but cannot be re-read for the oversize retry.
        out_dir: directory to write (created if needed); files are replaced atomically.
        vocab_size: pieces wanted, the five special tokens included.
        do_lower_case, keep_accents: pre-processing switches, recorded for encoding.
        chinese: True forces Chinese mode, False forbids it, None detects it from the first
            1,000 sentences (most characters CJK ideographs).
        strict: raise instead of shrinking an oversize `vocab_size`.
        character_coverage: share of characters covered by the vocabulary (official 0.99995).
        input_sentence_size: the trainer's sampling cap.
        num_threads: trainer threads (default: CPUs, at most 16).
        seed: seeds SentencePiece's sampling.
        log: receives one-line notices (default: print to stderr).
    Returns:
        a TrainResult.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise AlbertlmError(f"vocab_size must be > {len(SPECIAL_TOKENS)}, got {vocab_size}")
    if input_sentence_size <= 100:  # SentencePiece's own lower bound
        raise AlbertlmError(f"input_sentence_size must be > 100, got {input_sentence_size}")
    log = log or (lambda msg: print(msg, file=sys.stderr))
    num_threads = num_threads or min(16, os.cpu_count() or 1)
    if isinstance(sentences, str):  # a corpus SPEC such as "kjv"
        from albertlm.data.corpus import Corpus

        sentences = Corpus(sentences).sentences
    source = _replayable(sentences)
    start = time.perf_counter()
    first = source()
    if chinese is None:  # peek at the start of the corpus, then put it back in front
        head = list(islice(first, 1000))
        chinese = looks_chinese(head)
        if chinese:
            log("notice: most characters are CJK ideographs; training in Chinese mode "
                "(one piece per character)")
        first = chain(head, first)
    options = dict(do_lower_case=do_lower_case, keep_accents=keep_accents, chinese=chinese,
                   character_coverage=character_coverage, input_sentence_size=input_sentence_size,
                   num_threads=num_threads, seed=seed)
    actual = vocab_size
    try:
        proto, fed = _train_once(first, vocab_size, **options)
    except _VocabTooHigh as exc:
        if strict:
            raise AlbertlmError(f"vocab_size {vocab_size:,} is too large for this corpus; "
                                f"it supports at most {exc.max_size:,}") from None
        actual = exc.max_size
        log(f"notice: vocab_size {vocab_size:,} is too large for this corpus; "
            f"retraining with the largest size it supports, {actual:,}")
        try:
            proto, fed = _train_once(source(), actual, **options)
        except _VocabTooHigh as again:  # the corpus changed between passes
            raise AlbertlmError(f"vocab_size {actual:,} is still too large for this corpus; "
                                f"try {again.max_size:,}") from None
    if fed > input_sentence_size:
        log(f"notice: SentencePiece sampled {input_sentence_size:,} of {fed:,} sentences "
            f"(raise input_sentence_size to use more)")
    tokenizer = Tokenizer(proto, do_lower_case=do_lower_case, keep_accents=keep_accents,
                          chinese=chinese)
    tokenizer.save(out_dir, extra={"requested_vocab_size": vocab_size,
                                   "character_coverage": character_coverage,
                                   "trained_sentences": fed})
    return TrainResult(Path(out_dir), actual, vocab_size, chinese, fed, time.perf_counter() - start)


# ------------------------------------------------------------------------------ encoding
class Tokenizer:
    """An ALBERT SentencePiece tokenizer plus its pre-processing options.

    Args:
        model_proto: the serialized SentencePiece model (the bytes of spiece.model).
        do_lower_case, keep_accents: pre-processing (see `preprocess_text`).
        chinese: Chinese mode (one piece per CJK character, jieba word starts).
        num_threads: SentencePiece threads for batched encoding (-1: all cores).
        parse_special_tokens: map literal "[MASK]", "<unk>", ... in the text to their ids, as
            transformers does (the official ALBERT code does not).
        source: where the model came from, for error messages.
    """

    def __init__(self, model_proto: bytes, *, do_lower_case: bool = True, keep_accents: bool = False,
                 chinese: bool = False, num_threads: int = -1, parse_special_tokens: bool = True,
                 source: str = "spiece.model"):
        import sentencepiece as spm

        self.do_lower_case, self.keep_accents, self.chinese = do_lower_case, keep_accents, chinese
        self.num_threads, self.parse_special_tokens = num_threads, parse_special_tokens
        self._proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(self._proto)
        except Exception as exc:  # noqa: BLE001 - any failure means "not a SentencePiece model"
            raise AlbertlmError(f"{source}: not a SentencePiece model "
                                f"({_clean_sentencepiece_error(exc)})") from None
        n = self._sp.get_piece_size()
        self._pieces = [self._sp.id_to_piece(i) for i in range(n)]
        if tuple(self._pieces[:len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise AlbertlmError(f"{source}: ids 0-4 are {self._pieces[:5]}, not ALBERT's "
                                f"{list(SPECIAL_TOKENS)}")
        # A piece starts a word when it carries SentencePiece's "▁"; special tokens are words of
        # their own; <unk> stands for characters inside a word (SentencePiece emits "▁" apart).
        starts = np.array([p.startswith(_META) for p in self._pieces], dtype=bool)
        starts[[PAD_ID, CLS_ID, SEP_ID, MASK_ID]] = True
        starts[UNK_ID] = False
        self._word_start = starts
        self._meta_id = self._sp.piece_to_id(_META) if _META in self._pieces else -1
        self._buffers = self._find_buffer_batch()

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
        options = {"do_lower_case": True, "keep_accents": False, "chinese": False}
        if config_file is not None and config_file.is_file():
            try:
                config = json.loads(config_file.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise AlbertlmError(f"{config_file}: not valid JSON ({exc})") from None
            if not isinstance(config, dict):
                raise AlbertlmError(f"{config_file}: expected a JSON object")
            ours = config.get("albertlm") if isinstance(config.get("albertlm"), dict) else {}
            for key, value in (*((k, config.get(k)) for k in ("do_lower_case", "keep_accents")),
                               ("chinese", ours.get("chinese"))):
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
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise AlbertlmError(f"{out}: exists and is not a directory")
        config = {
            "tokenizer_class": "AlbertTokenizer", "do_lower_case": self.do_lower_case,
            "keep_accents": self.keep_accents, "model_max_length": 512,
            "albertlm": {"format_version": CONFIG_VERSION, "chinese": self.chinese,
                         "vocab_size": self.vocab_size, **(extra or {})},
        }
        try:
            atomic_write_bytes(out / MODEL_FILE, self._proto)
            atomic_write_text(out / CONFIG_FILE, json.dumps(config, indent=2) + "\n")
        except OSError as exc:
            raise AlbertlmError(f"{out}: cannot write the tokenizer ({exc.strerror or exc})") from None
        return out

    def __getstate__(self) -> dict:  # picklable for DataLoader workers
        return {"model_proto": self._proto, "do_lower_case": self.do_lower_case,
                "keep_accents": self.keep_accents, "chinese": self.chinese,
                "num_threads": self.num_threads, "parse_special_tokens": self.parse_special_tokens}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state.pop("model_proto"), **state)

    # ---- vocabulary
    @property
    def vocab_size(self) -> int:
        """Number of pieces, special tokens included."""
        return len(self._pieces)

    def __len__(self) -> int:
        return len(self._pieces)

    @property
    def word_start_table(self) -> np.ndarray:
        """bool [vocab_size]: whether a piece begins a word (outside Chinese mode)."""
        return self._word_start

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        """Pieces for ids (e.g. [2, 15] -> ["[CLS]", "▁the"])."""
        return [self._pieces[int(i)] for i in ids]

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        """Ids for pieces; unknown pieces map to UNK_ID."""
        return [self._sp.piece_to_id(t) for t in tokens]

    # ---- encoding
    def _prepare(self, text: str) -> str:
        return preprocess_text(text, do_lower_case=self.do_lower_case, keep_accents=self.keep_accents)

    def _prepare_batch(self, texts: Sequence[str], big: str) -> list[str]:
        """`preprocess_text` for a batch, done on one joined string (C speed, not per text).

        Whitespace is left to SentencePiece, which already treats every whitespace run as one
        space and trims both ends, except for a few characters mapped to a space here; the ids
        equal those of the per-text path (tested).
        """
        # big = "\x00".join(texts): NUL survives NFKD and lower(), and blocks `` across texts.
        if big.count("\x00") != len(texts) - 1:
            return [self._prepare(t) for t in texts]
        if ("`" in big and "``" in big) or "''" in big:
            big = big.replace("``", '"').replace("''", '"')
        if not self.keep_accents and not big.isascii():
            big = unicodedata.normalize("NFKD", big).translate(_combining_marks())
        if self.do_lower_case:
            big = big.lower()
        odd = any(c in big for c in "\x0b\x1c\x1d\x1e\x1f") if big.isascii() else _ODD_SPACE_RE.search(big)
        if odd:
            big = _ODD_SPACE_RE.sub(" ", big)
        return big.split("\x00")

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
            encoded = [self._chinese_pieces(*args, with_starts) for args in zip(chunks, spaced, mapped)]
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

    def _chinese_pieces(self, chunk: str, spaced: str, enc: dict,
                        with_starts: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Drop the bare "▁" pieces that only stand for spaces split_cjk added; jieba word starts.

        Args:
            chunk: pre-processed text; spaced: split_cjk(chunk), what SentencePiece encoded;
            enc: SentencePiece's offset mapping of `spaced` (character offsets).
        """
        ids = np.asarray(enc["ids"], dtype=np.int32)
        if ids.size == 0:
            return ids, np.zeros(0, dtype=bool) if with_starts else None
        n = len(spaced)
        codes = np.frombuffer(spaced.encode("utf-32-le"), dtype=np.uint32)
        # next_char[i]: index of the first non-space character at or after i (n if none), so a
        # piece is located by its first real character, whatever spaces its surface starts with.
        positions = np.where(codes != 32, np.arange(n), n)
        next_char = np.append(np.minimum.accumulate(positions[::-1])[::-1], n)
        spans = np.asarray(enc["offsets"], dtype=np.int64).reshape(-1, 2)
        begins, ends = np.minimum(spans[:, 0], n), np.minimum(spans[:, 1], n)
        first = next_char[begins]
        # Where split_cjk put each CJK character (the k-th one moved right by 2k + 1), and the
        # spaces it inserted on both sides of it.
        found = np.array([m.start() for m in _CJK_RE.finditer(chunk)], dtype=np.int64)
        placed = found + 2 * np.arange(found.size) + 1
        is_cjk, inserted = np.zeros(n + 1, dtype=bool), np.zeros(n + 1, dtype=bool)
        is_cjk[placed] = True
        inserted[placed - 1] = inserted[placed + 1] = True
        # A bare "▁" is noise when its whitespace was all inserted by us ("门,天" -> "门 , 天"),
        # or when it is SentencePiece's leading dummy "▁" in front of a CJK character.
        counts = np.concatenate([[0], np.cumsum(inserted[:n])])
        all_inserted = (ends > begins) & (counts[ends] - counts[begins] == ends - begins)
        dummy_before_cjk = np.zeros(ids.size, dtype=bool)
        dummy_before_cjk[:-1] = (ends[:-1] == begins[:-1]) & is_cjk[first[1:]]
        bare = (ids == self._meta_id) & (all_inserted | dummy_before_cjk)
        ids, first = ids[~bare], first[~bare]
        if not with_starts:
            return ids, None
        # Segment the unspaced text, then space each word as split_cjk spaced the whole text
        # (it acts character by character), giving the jieba word of every character of `spaced`.
        words = [split_cjk(w) for w in _jieba().lcut(chunk)]
        word_of_char = np.repeat(np.arange(len(words) + 1), [len(w) for w in words] + [1])
        if len(word_of_char) != n + 1:  # jieba returns its whole input in pieces; never expected
            raise RuntimeError("jieba segmentation does not cover the text")
        word = word_of_char[first]
        starts = np.empty(ids.size, dtype=bool)
        starts[0] = True
        starts[1:] = word[1:] != word[:-1]
        return ids, starts

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
        buffers = self._buffers(self._prepare_batch(texts, big), self.num_threads)  # int32 bytes
        np.cumsum(np.fromiter(map(len, buffers), dtype=np.int64, count=len(buffers)) // 4, out=offsets[1:])
        ids = np.frombuffer(b"".join(buffers), dtype=np.int32).copy()
        return ids, (self._word_start[ids] if word_starts else None), offsets

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """`encode` for many texts (one multi-threaded call); int32 arrays."""
        ids, _, offsets = self.encode_batch_packed(texts, word_starts=False)
        return np.split(ids, offsets[1:-1]) if len(texts) else []

    def encode_batch_with_word_starts(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """`encode_with_word_starts` for many texts (one multi-threaded call)."""
        if not len(texts):
            return []
        ids, starts, offsets = self.encode_batch_packed(texts)
        return list(zip(np.split(ids, offsets[1:-1]), np.split(starts, offsets[1:-1])))

    def encode(self, text: str) -> np.ndarray:
        """Token ids of one text, without [CLS]/[SEP].

        Returns:
            int32 [num_pieces].
        """
        return self.encode_batch_packed([text], word_starts=False)[0]

    def encode_with_word_starts(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Token ids plus which of them begin a word (for whole-word masking).

        A word is a whitespace-delimited run (its first piece carries SentencePiece's "▁"); each
        special token is a word of its own; in Chinese mode a word is a jieba word.

        Returns:
            (ids int32 [num_pieces], word_start bool [num_pieces]).
        """
        ids, starts, _ = self.encode_batch_packed([text])
        return ids, starts

    def build_inputs(self, a: Sequence[int], b: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]` with token types 0 then 1.

        Returns:
            (input_ids int32 [L], token_type_ids int32 [L]).
        """
        pair = pair_inputs(np.asarray(a), None if b is None else np.asarray(b))
        return pair["input_ids"].astype(np.int32), pair["token_type_ids"].astype(np.int32)

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        """Text for ids (of the pre-processed text: lower-cased etc. as the tokenizer saw it).

        Args:
            ids: token ids.
            skip_special_tokens: drop <pad>/[CLS]/[SEP]/[MASK]; otherwise they appear as text.
        """
        ids = [int(i) for i in ids]
        if bad := [i for i in ids if not 0 <= i < self.vocab_size]:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary (size {self.vocab_size})")
        parts: list[str] = []  # SentencePiece decodes control symbols to "": keep them apart
        for special, run in groupby(ids, key=lambda i: i in (PAD_ID, CLS_ID, SEP_ID, MASK_ID)):
            if not special:
                parts.append(self._sp.decode(list(run)))
            elif not skip_special_tokens:
                parts.extend(SPECIAL_TOKENS[i] for i in run)
        text = " ".join(p for p in parts if p)
        return _CJK_GAP_RE.sub("", text) if self.chinese else text


def train_command(inputs: Sequence[str], vocab_size: int, out_dir: str | os.PathLike, *,
                  cased: bool = False, keep_accents: bool = False, chinese: bool = False,
                  strict: bool = False, input_sentence_size: int = DEFAULT_INPUT_SENTENCE_SIZE,
                  text_key: str = "text", max_line_chars: int | None = None,
                  num_threads: int | None = None, seed: int = 0) -> int:
    """`albertlm tokenizer train`: read corpus SPECs, train, write `out_dir`, print a summary.

    Args:
        inputs: corpus SPEC strings (see albertlm.data.corpus), e.g. ["kjv"] or ["data/*.txt"].
        chinese: force Chinese mode; otherwise it is detected from the text.
        Others as in `train_tokenizer` and `Corpus`.
    Returns:
        the exit code (0); user errors raise AlbertlmError.
    """
    from tqdm import tqdm

    from albertlm.data.corpus import DEFAULT_MAX_LINE_CHARS, Corpus, format_corpus_stats

    corpus = Corpus(inputs, text_key=text_key, max_line_chars=max_line_chars or DEFAULT_MAX_LINE_CHARS)

    def sentences() -> Iterator[str]:  # a progress bar on a terminal only, never in logs
        return iter(tqdm(corpus.sentences(), desc="reading", unit=" sentences", leave=False,
                         disable=not sys.stderr.isatty()))

    result = train_tokenizer(sentences, out_dir, vocab_size, do_lower_case=not cased,
                             keep_accents=keep_accents, chinese=True if chinese else None,
                             strict=strict, input_sentence_size=input_sentence_size,
                             num_threads=num_threads, seed=seed)
    print(format_corpus_stats(corpus.stats), file=sys.stderr)
    mode = ", Chinese mode" if result.chinese else ""
    print(f"wrote {Path(out_dir) / MODEL_FILE} and {CONFIG_FILE}: {result.vocab_size:,} pieces "
          f"({'cased' if cased else 'lower-cased'}, accents {'kept' if keep_accents else 'stripped'}"
          f"{mode}) from {result.sentences:,} sentences in {result.seconds:.1f} s")
    return 0
