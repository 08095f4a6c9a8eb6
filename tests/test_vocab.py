"""The shared vocabulary facts: one definition, used everywhere."""

import numpy as np

from albertlm import vocab


def test_special_ids_follow_the_token_order():
    assert vocab.SPECIAL_TOKENS == ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")
    assert [vocab.PAD_ID, vocab.UNK_ID, vocab.CLS_ID, vocab.SEP_ID, vocab.MASK_ID] == [0, 1, 2, 3, 4]
    assert vocab.NUM_SPECIAL == 5 and vocab.IGNORE_INDEX == -100


def test_modules_share_the_definitions():
    from albertlm import model, tokenizer
    from albertlm.data import loader, masking
    from albertlm.tasks import common

    assert tokenizer.MASK_ID is vocab.MASK_ID and masking.IGNORE_INDEX is vocab.IGNORE_INDEX
    assert loader.IGNORE_INDEX is model.IGNORE_INDEX is common.IGNORE_INDEX is vocab.IGNORE_INDEX


def test_pair_inputs_layout():
    pair = vocab.pair_inputs(np.array([10, 11]), np.array([12]))
    assert pair["input_ids"].tolist() == [2, 10, 11, 3, 12, 3]
    assert pair["token_type_ids"].tolist() == [0, 0, 0, 0, 1, 1]
    single = vocab.pair_inputs(np.array([7]), None)
    assert single["input_ids"].tolist() == [2, 7, 3] and single["token_type_ids"].tolist() == [0, 0, 0]
