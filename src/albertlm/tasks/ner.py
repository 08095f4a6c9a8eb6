"""Named-entity recognition: CoNLL-style token-per-line files and CLUENER JSON.

    read_conll     `token ... tag` per line (space or tab separated), blank line between
                   sentences, `-DOCSTART-` lines dropped; `.gz` read directly. IOB1 tags
                   (CoNLL-2003) become BIO (an I-X that does not continue an X entity becomes B-X;
                   BIO passes unchanged). Weibo NER's tokens carry a word-segmentation position
                   (`科0`, `a10`): `strip_segpos` removes it.
    read_cluener   JSON lines `{"text", "label": {type: {mention: [[start, end]]}}}`, end inclusive,
                   one token per character.

A sentence with a malformed line (one field, a tag that is neither O nor B-/I-/E-/S-TYPE) is
skipped whole and reported once by its first bad line (tasks/common.py).

Every word is encoded on its own; the tag is trained and predicted on its first piece (the other
pieces get -100), as transformers' token-classification examples do. A sentence longer than the
input is cut into consecutive chunks, so every word gets a prediction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.tasks.common import Feature, FeatureSettings, RowErrors, encode_words, numbered_lines
from albertlm.tasks.metrics import iob1_to_bio
from albertlm.utils import atomic_write_text
from albertlm.vocab import IGNORE_INDEX

_TAG_RE = re.compile(r"^(O|[BIES]-\S+)$")
_SEGPOS_RE = re.compile(r"\d+$")


@dataclass
class TokenExample:
    """One sentence: tokens and their tags."""

    guid: str
    tokens: list[str]
    tags: list[str] | None = None
    """BIO tags, one per token; None when unknown."""


def read_conll(path: str | Path, *, token_col: int = 0, tag_col: int = -1, strip_segpos: bool = False,
               strict: bool = False) -> list[TokenExample]:
    """Read a CoNLL-style file (see the module docstring).

    Args:
        path: the file (`.gz` allowed).
        token_col, tag_col: field indices of the token and its tag.
        strip_segpos: drop trailing digits from every token (Weibo NER), keeping at least one character.
        strict: raise on the first malformed line.
    Returns:
        One example per sentence, tags converted to BIO.
    """
    path = Path(path)
    errors = RowErrors(path, strict)
    out: list[TokenExample] = []
    tokens: list[str] = []
    tags: list[str] = []
    bad: tuple[int, str] | None = None
    start = 0

    def flush() -> None:
        nonlocal tokens, tags, bad
        if bad is not None:
            errors(*bad)
        elif tokens:
            out.append(TokenExample(f"{path.name}-{start}", tokens, iob1_to_bio(tags)))
        tokens, tags, bad = [], [], None

    for n, line in numbered_lines(path):
        fields = line.split("\t") if "\t" in line else line.split()
        if not line.strip() or fields[0] == "-DOCSTART-":
            flush()
            continue
        if not tokens and bad is None:
            start = n
        if len(fields) < 2:
            bad = bad or (n, f"expected a token and a tag, found {len(fields)} field(s)")
            continue
        try:
            token, tag = fields[token_col].strip(), fields[tag_col].strip()
        except IndexError:
            bad = bad or (n, f"no field {token_col} / {tag_col} in {len(fields)} fields")
            continue
        if not _TAG_RE.match(tag):
            bad = bad or (n, f"tag {tag!r} is not O or B-/I-/E-/S-TYPE")
            continue
        if strip_segpos:
            token = _SEGPOS_RE.sub("", token) or token[0]
        tokens.append(token)
        tags.append(tag)
    flush()
    errors.finish(len(out))
    if not out:
        raise AlbertlmError(f"{path}: no sentences")
    return out


def read_cluener(path: str | Path, strict: bool = False) -> list[TokenExample]:
    """Read CLUENER 2020 JSON lines into character tokens with BIO tags (see the module docstring).

    A record whose mention text disagrees with its span, or whose spans overlap, is malformed.
    """
    path = Path(path)
    errors = RowErrors(path, strict)
    out: list[TokenExample] = []
    for n, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            text = rec["text"]
            chars = list(text)
            labelled = isinstance(rec.get("label"), dict)
            tags = ["O"] * len(chars)
            for typ, mentions in (rec.get("label") or {}).items():
                for mention, spans in mentions.items():
                    for s, e in spans:
                        if text[s:e + 1] != mention:
                            raise ValueError(f"span [{s}, {e}] is {text[s:e + 1]!r}, not {mention!r}")
                        if any(t != "O" for t in tags[s:e + 1]):
                            raise ValueError(f"span [{s}, {e}] of {mention!r} overlaps another entity")
                        tags[s:e + 1] = [f"B-{typ}"] + [f"I-{typ}"] * (e - s)
        except json.JSONDecodeError as exc:
            errors(n, f"invalid JSON ({exc.msg})")
            continue
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            errors(n, str(exc) if isinstance(exc, ValueError) else f"malformed record ({type(exc).__name__}: {exc})")
            continue
        if not chars:
            errors(n, "empty text")
            continue
        out.append(TokenExample(str(rec.get("id", f"{path.name}-{n}")), chars, tags if labelled else None))
    errors.finish(len(out))
    if not out:
        raise AlbertlmError(f"{path}: no sentences")
    return out


def tag_list(examples: Sequence[TokenExample]) -> list[str]:
    """The tag set of some examples: O first, then by entity type, B before I (stable ids)."""
    tags = {t for e in examples for t in (e.tags or [])}
    rest = sorted(tags - {"O"}, key=lambda t: (t[2:], t[0]))
    return ["O", *rest]


def ner_features(examples: Sequence[TokenExample], tokenizer, labels: Sequence[str],
                 settings: FeatureSettings) -> list[Feature]:
    """`[CLS] pieces [SEP]` per sentence (or per chunk of a long one), tags on first pieces.

    Returns:
        Features with input_ids, token_type_ids [S], labels int [S] (-100 off first pieces, and
        for tags the label set lacks) and meta: words (first, last+1 word of the chunk) and
        first_piece int [words] (the position of each word's first piece).
    """
    label2id = {t: i for i, t in enumerate(labels)}
    flat = [t for e in examples for t in e.tokens]
    encoded = [ids for ids, _ in encode_words(tokenizer, flat)]
    room = settings.max_seq_length - 2
    cls, sep = tokenizer.special_ids.cls, tokenizer.special_ids.sep
    features, k = [], 0
    for i, ex in enumerate(examples):
        words = encoded[k:k + len(ex.tokens)]
        k += len(ex.tokens)
        begin = 0
        while begin < len(words):
            end, used = begin, 0
            while end < len(words) and (end == begin or used + len(words[end]) <= room):
                used += len(words[end])
                end += 1
            pieces = [w[:room] for w in words[begin:end]]  # a single over-long word is cut
            first = np.cumsum([1] + [len(p) for p in pieces[:-1]])  # after [CLS]
            ids = np.concatenate([[cls], *pieces, [sep]]).astype(np.int64)
            inputs = {"input_ids": ids, "token_type_ids": np.zeros(len(ids), dtype=np.int64)}
            if ex.tags is not None:
                lab = np.full(len(ids), IGNORE_INDEX, dtype=np.int64)
                lab[first] = [label2id.get(t, IGNORE_INDEX) for t in ex.tags[begin:end]]
                inputs["labels"] = lab
            features.append(Feature(inputs, i, {"words": (begin, end), "first_piece": first}))
            begin = end
    return features


DECODINGS = ("valid", "argmax")
"""How word tags are chosen from the head's logits: `valid` (the default) takes the most probable tag
sequence that is well formed (`allowed_transitions`), `argmax` each word's most probable tag on its own,
as transformers' token-classification pipeline does."""


def allowed_transitions(labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which tag sequences are well formed, for BIO and IOBES tag sets (or a mix, type by type).

    An I-X or E-X continues an X entity, so it may follow only B-X or I-X and never start a sentence.
    Where the tag set has E-X, an X entity must also be closed: B-X and I-X are then followed only by I-X
    or E-X and never end a sentence. A type without E- tags is BIO: its entity may end anywhere.

    Returns:
        (start [L], transition [L, L] indexed [previous, current], end [L]) boolean masks.
    """
    parts = [(t[0], t[2:]) if t != "O" else ("O", "") for t in labels]
    closed = {typ for kind, typ in parts if kind == "E"}
    n = len(labels)
    start = np.array([kind not in ("I", "E") for kind, _ in parts])
    end = np.array([not (kind in ("B", "I") and typ in closed) for kind, typ in parts])
    transition = np.zeros((n, n), dtype=bool)
    for i, (pk, pt) in enumerate(parts):
        open_ = pk in ("B", "I")
        for j, (ck, ct) in enumerate(parts):
            if ck in ("I", "E"):
                transition[i, j] = open_ and pt == ct
            else:
                transition[i, j] = not (open_ and pt in closed)
    return start, transition, end


def constrained_decode(scores: np.ndarray, start: np.ndarray, transition: np.ndarray,
                       end: np.ndarray) -> list[int]:
    """The tag ids of highest total score among the sequences the masks allow (Viterbi).

    Args:
        scores: [words, L] log-probabilities of each tag at each word.
        start, transition, end: `allowed_transitions`' masks.
    Returns:
        One tag id per word; each word's argmax when no sequence is allowed (a tag set without O).
    """
    n = len(scores)
    if n == 0:
        return []
    neg = np.float64(-np.inf)
    trans = np.where(transition, 0.0, neg)
    best = np.where(start, scores[0], neg)
    back = np.zeros((n, scores.shape[1]), dtype=np.int64)
    for i in range(1, n):
        total = best[:, None] + trans  # [previous, current]
        back[i] = total.argmax(0)
        best = total[back[i], np.arange(len(best))] + scores[i]
    best = np.where(end, best, neg)
    if not np.isfinite(best.max()):
        return [int(j) for j in scores.argmax(-1)]
    path = [int(best.argmax())]
    for i in range(n - 1, 0, -1):
        path.append(int(back[i, path[-1]]))
    return path[::-1]


def ner_predictions(examples: Sequence[TokenExample], features: Sequence[Feature],
                    logits: Sequence[np.ndarray], labels: Sequence[str], decoding: str = "valid") -> list[list[str]]:
    """Per-feature logits [S, num_labels] → one tag per word of every example.

    A sentence cut into chunks is decoded whole, so an entity may run across a chunk boundary.

    Args:
        decoding: one of `DECODINGS`.
    """
    if decoding not in DECODINGS:
        raise ValueError(f"decoding {decoding!r} is not one of {', '.join(DECODINGS)}")
    words: list[np.ndarray | None] = [None] * len(examples)
    for f, lg in zip(features, logits):
        begin, end = f.meta["words"]
        lg = np.asarray(lg, dtype=np.float64)[f.meta["first_piece"]]
        if words[f.example] is None:
            words[f.example] = np.zeros((len(examples[f.example].tokens), lg.shape[-1]))
        words[f.example][begin:end] = lg
    masks = allowed_transitions(labels) if decoding == "valid" else None
    out = []
    for e, lg in zip(examples, words):
        if lg is None:  # no feature: every word O, as before
            out.append(["O"] * len(e.tokens))
            continue
        if masks is None:
            ids = lg.argmax(-1)
        else:
            logp = lg - lg.max(-1, keepdims=True)
            logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
            ids = constrained_decode(logp, *masks)
        out.append([labels[j] for j in ids])
    return out


def write_predictions(path: str | Path, examples: Sequence[TokenExample], predictions: Sequence[Sequence[str]]) -> None:
    """conlleval's input: `token gold predicted` per line, a blank line between sentences."""
    lines = []
    for ex, pred in zip(examples, predictions):
        gold = ex.tags or ["O"] * len(ex.tokens)
        lines += [f"{t if t.strip() else '_'} {g} {p}" for t, g, p in zip(ex.tokens, gold, pred)]
        lines.append("")
    atomic_write_text(path, "\n".join(lines))
