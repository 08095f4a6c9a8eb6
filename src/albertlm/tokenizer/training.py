"""Training a SentencePiece vocabulary with ALBERT's ids, from any iterable of sentences.

The official recipe (docs/design-notes.md, "Tokenizer"): a unigram model, `<pad>` 0, `<unk>` 1,
`[CLS]`/`[SEP]`/`[MASK]` as control symbols, no BOS/EOS, character coverage 0.99995, on text
normalised as encoding normalises it. Reading a corpus is the caller's job (data.corpus), so this
module depends on no part of the data pipeline.
"""

from __future__ import annotations

import io
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.tokenizer.chinese import looks_chinese, split_cjk
from albertlm.tokenizer.normalize import preprocess_text
from albertlm.tokenizer.spiece import Tokenizer, clean_sentencepiece_error
from albertlm.vocab import CLS_TOKEN, MASK_TOKEN, PAD_ID, SEP_TOKEN, SPECIAL_TOKENS, UNK_ID

DEFAULT_INPUT_SENTENCE_SIZE = 2_000_000  # sentences SentencePiece samples (bounds its memory)
_TRAIN_CHUNK_CHARS = 4096  # longer training sentences are cut at spaces (SentencePiece drops them)


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
        msg = clean_sentencepiece_error(exc)
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


def _check_train_args(sentences: object, vocab_size: int, input_sentence_size: int) -> None:
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise AlbertlmError(f"vocab_size must be > {len(SPECIAL_TOKENS)}, got {vocab_size}")
    if input_sentence_size <= 100:  # SentencePiece's own lower bound
        raise AlbertlmError(f"input_sentence_size must be > 100, got {input_sentence_size}")
    if isinstance(sentences, str):  # a lone string would be read as its characters
        raise AlbertlmError(f"train_tokenizer takes sentences, not the string {sentences[:40]!r}; for a corpus "
                            "SPEC pass Corpus(spec).sentences")


def _detect_chinese(first: Iterator[str], log: Callable[[str], None]) -> tuple[bool, Iterator[str]]:
    """Peek at the first 1,000 sentences, then put them back in front of the rest."""
    head = list(islice(first, 1000))
    chinese = looks_chinese(head)
    if chinese:
        log("notice: most characters are CJK ideographs; training in Chinese mode (one piece per character)")
    return chinese, chain(head, first)


def _train_fitting(source: Callable[[], Iterator[str]], first: Iterator[str], vocab_size: int, strict: bool,
                   log: Callable[[str], None], options: dict) -> tuple[bytes, int, int]:
    """Train at `vocab_size`; if the corpus supports fewer pieces, retrain at its maximum (or raise, `strict`).

    Returns:
        (model proto, sentences fed, the vocabulary size trained).
    """
    try:
        proto, fed = _train_once(first, vocab_size, **options)
        return proto, fed, vocab_size
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
    return proto, fed, actual


def train_tokenizer(sentences: Iterable[str] | Callable[[], Iterable[str]], out_dir: str | os.PathLike,
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
        sentences: raw sentences: a list, a re-iterable, or a function returning a fresh
            iterator (for a corpus SPEC such as "kjv": `data.corpus.Corpus(spec).sentences`). A
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
    _check_train_args(sentences, vocab_size, input_sentence_size)
    log = log or (lambda msg: print(msg, file=sys.stderr))
    source = _replayable(sentences)
    start = time.perf_counter()
    first = source()
    if chinese is None:
        chinese, first = _detect_chinese(first, log)
    options = dict(do_lower_case=do_lower_case, keep_accents=keep_accents, chinese=chinese,
                   character_coverage=character_coverage, input_sentence_size=input_sentence_size,
                   num_threads=num_threads or min(16, os.cpu_count() or 1), seed=seed)
    proto, fed, actual = _train_fitting(source, first, vocab_size, strict, log, options)
    if fed > input_sentence_size:
        log(f"notice: SentencePiece sampled {input_sentence_size:,} of {fed:,} sentences "
            f"(raise input_sentence_size to use more)")
    tokenizer = Tokenizer(proto, do_lower_case=do_lower_case, keep_accents=keep_accents,
                          chinese=chinese)
    tokenizer.save(out_dir, extra={"requested_vocab_size": vocab_size,
                                   "character_coverage": character_coverage,
                                   "trained_sentences": fed})
    return TrainResult(Path(out_dir), actual, vocab_size, chinese, fed, time.perf_counter() - start)
