"""The vocabulary facts every part of albertlm shares, defined once.

ALBERT's special tokens have fixed ids (docs/design-notes.md, "Tokenizer"): `<pad>` 0, `<unk>` 1,
`[CLS]` 2, `[SEP]` 3, `[MASK]` 4, so ids below NUM_SPECIAL are never real text (nor drawn as a
random replacement token when masking). IGNORE_INDEX marks a label position no loss or metric
scores (PyTorch's cross-entropy default, as transformers uses). The CJK ranges say which characters
Chinese mode splits off one per piece: the ideograph blocks of BERT's `_is_chinese_char`, plus CJK
and full-width punctuation.
"""

from __future__ import annotations

import numpy as np

PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN = "<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)  # position = id
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))
NUM_SPECIAL = len(SPECIAL_TOKENS)

IGNORE_INDEX = -100

HAN_RANGES = ("\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df\U0002a700-\U0002ceaf"
              "\U0002f800-\U0002fa1f")
"""CJK ideographs, as regular-expression character-class ranges (language detection)."""
CJK_RANGES = HAN_RANGES + "\u3001-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65"
"""Ideographs plus CJK and full-width punctuation: what Chinese mode splits off one per piece."""


def pair_inputs(a: np.ndarray, b: np.ndarray | None) -> dict[str, np.ndarray]:
    """`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, token type 0 through the first [SEP] and 1 after.

    Returns:
        {"input_ids": int64 [S], "token_type_ids": int64 [S]}.
    """
    a = np.asarray(a, dtype=np.int64)
    parts = [np.array([CLS_ID]), a, np.array([SEP_ID])]
    types = [np.zeros(len(a) + 2, dtype=np.int64)]
    if b is not None:
        b = np.asarray(b, dtype=np.int64)
        parts += [b, np.array([SEP_ID])]
        types.append(np.ones(len(b) + 1, dtype=np.int64))
    return {"input_ids": np.concatenate(parts).astype(np.int64), "token_type_ids": np.concatenate(types)}
