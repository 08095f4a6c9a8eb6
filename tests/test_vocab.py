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


def test_special_ids_default_to_albert_and_reach_every_user():
    from albertlm.data import loader, masking
    from albertlm.tasks import glue
    from albertlm.tokenizer import spiece

    default = vocab.SpecialIds()
    assert default == vocab.SPIECE_IDS and default.excluded == (0, 1, 2, 3, 4)
    assert (default.pad, default.unk, default.cls, default.sep, default.mask) == (0, 1, 2, 3, 4)
    assert masking.SPIECE_IDS is loader.SPIECE_IDS is spiece.SPIECE_IDS is vocab.SPIECE_IDS
    assert not hasattr(glue, "CLS_ID") and not hasattr(masking, "MASK_ID")  # no second copy of the ids


def test_replacement_draw_is_the_old_draw_for_the_albert_layout():
    # Bit-identical to the draw before special ids became a property of the vocabulary.
    a = vocab.SPIECE_IDS.draw_replacements(100, 50, np.random.default_rng(3))
    b = np.random.default_rng(3).integers(vocab.NUM_SPECIAL, 100, size=50, dtype=np.int32)
    assert a.dtype == np.int32 and a.tolist() == b.tolist()


def test_replacement_draw_avoids_specials_and_reserved_ids():
    special = vocab.SpecialIds(pad=0, unk=10, cls=11, sep=12, mask=13, reserved=tuple(range(1, 10)) + (14,))
    draws = special.draw_replacements(40, 5000, np.random.default_rng(0))
    assert draws.min() >= 15 and draws.max() < 40 and len(set(draws.tolist())) == 25
    assert special.replacement_ids(40).tolist() == list(range(15, 40))


def test_special_ids_round_trip_through_json():
    special = vocab.SpecialIds(pad=0, unk=100, cls=101, sep=102, mask=103, reserved=(*range(1, 100), 104, 105))
    data = special.to_json()
    assert data["reserved"] == [[1, 100], [104, 106]]
    assert vocab.SpecialIds.from_json(data) == special
    assert vocab.SpecialIds.from_json(None) is vocab.SPIECE_IDS  # a build that predates the record
    import pytest

    from albertlm.errors import AlbertlmError
    with pytest.raises(AlbertlmError, match="meta.json: field 'cls'"):
        vocab.SpecialIds.from_json({**data, "cls": "x"}, where="meta.json")


def test_pair_inputs_takes_the_vocabulary_ids():
    special = vocab.SpecialIds(pad=0, unk=100, cls=101, sep=102, mask=103)
    pair = vocab.pair_inputs(np.array([7]), np.array([8]), special)
    assert pair["input_ids"].tolist() == [101, 7, 102, 8, 102]
