"""Splitting a paragraph into sentences, for corpora given one document per line (the `docs` format).

A rule-based splitter: a sentence ends at ., ! or ? (and the CJK 。！？) followed by space or a
closing quote or bracket, except after the common abbreviations and initialisms listed here.
"""

from __future__ import annotations

import re

# Words ending in "." that do not end a sentence (compared lower-cased, without the final ".").
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt rev hon gen col lt sgt capt gov sen rep pres vs etc cf al "
    "fig figs no nos vol vols pp ed eds ca approx inc ltd co corp dept est jan feb mar apr jun "
    "jul aug sep sept oct nov dec e.g i.e u.s u.k u.n a.m p.m ph.d viz".split())
_INITIALISM = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")  # U.S, e.g, J.R.R: letters joined by dots
_OPENERS = "\"'“‘([{«「『（《"
# Chinese: 。！？ (optionally repeated/mixed) or an ellipsis ……, then closing quotes/brackets;
# no space follows in Chinese. English: . ! ? (or …), closing quotes, then whitespace or the end.
_BOUNDARY = re.compile(
    r"(?P<zh>(?:[。！？]|……)[。！？!?…]*[”’」』）》\"']*)"
    r"|(?P<en>[.!?…]+[\"'”’)\]»]*)(?=\s|$)"
)


_NEXT_CHAR = re.compile(r"\s*(.)", re.S)  # the first character after any whitespace (str.isspace's set)


def _ends_sentence(text: str, match: re.Match) -> bool:
    """Decide whether an English ".", "!" or "?" match really ends a sentence."""
    # A following lower-case letter means the sentence goes on ("approx. five", "Wait... what").
    # Looked up in place: slicing off the rest of the line at every boundary made long lines quadratic.
    following = _NEXT_CHAR.match(text, match.end())
    if following and following.group(1).isalpha() and following.group(1).islower():
        return False
    punct = match.group("en")
    if not punct.startswith(".") or punct.startswith(".."):
        return True  # "!", "?" and "..." before anything else end the sentence
    # The word the period belongs to, without any opening quotes or brackets.
    start = match.start()
    word_start = start
    while word_start > 0 and not text[word_start - 1].isspace():
        word_start -= 1
    word = text[word_start:start].lstrip(_OPENERS)
    if word.lower() in _ABBREVIATIONS or _INITIALISM.fullmatch(word):
        return False  # Mr. / e.g. / U.S.
    return not (len(word) == 1 and word.isalpha())  # an initial: "J. Smith"


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences with simple, deterministic rules.

    Newlines are hard breaks. English sentences end at . ! ? (plus closing quotes) followed by
    whitespace, except after common abbreviations (Mr. Dr. e.g. U.S. ...), single initials, or
    before a lower-case word; decimals never split (no space after the point). Chinese sentences
    end at 。！？ or …… plus any closing quotes, with no space needed.

    Args:
        text: raw text, possibly several lines.
    Returns:
        the non-empty, stripped sentences in order.
    """
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        begin = 0
        for match in _BOUNDARY.finditer(line):
            if match.group("en") is not None and not _ends_sentence(line, match):
                continue
            piece = line[begin:match.end()].strip()
            if piece:
                out.append(piece)
            begin = match.end()
        if rest := line[begin:].strip():
            out.append(rest)
    return out
