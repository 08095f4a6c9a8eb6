"""Google's SentencePiece rule for a piece that ends in a digit and a comma ("▁7," -> "▁7" ","),
an option of the SentencePiece tokenizer recorded in tokenizer_config.json."""

import json
import random

import numpy as np
import pytest

from albertlm.tokenizer import Tokenizer, load_vocabulary, train_tokenizer

META = "\u2581"
MONTHS = "January February March April May June July August September October November December".split()


@pytest.fixture(scope="module")
def number_dir(tmp_path_factory):
    """A small vocabulary trained on dates and amounts, so it holds pieces like "▁7," and "2,"."""
    r = random.Random(0)
    sentences = [f"On {r.choice(MONTHS)} {r.randint(1, 28)}, {r.randint(1990, 2025)}, the team paid "
                 f"{r.randint(1, 9)},000 dollars to 7, and 12, of them." for _ in range(3000)]
    out = tmp_path_factory.mktemp("numbers")
    train_tokenizer(sentences, out, vocab_size=300, log=lambda msg: None)
    return out


def official_pieces(tok: Tokenizer, text: str) -> list[str]:
    """The official encode_pieces rule, piece by piece (a reference independent of the packed path)."""
    out = []
    for piece in tok._sp.encode(tok._prepare(text), out_type=str):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            again = tok._sp.encode(piece[:-1].replace(META, ""), out_type=str)
            if piece[0] != META and again[0][0] == META:
                again = again[1:] if len(again[0]) == 1 else [again[0][1:], *again[1:]]
            out += [*again, ","]
        else:
            out.append(piece)
    return out


TEXTS = ["February 7, 2020", "1,000", "paid 5,000 dollars to 7, and 12, of them", "on May 12, 1999,",
         "no numbers here", "", "3,4,5, 6,,", "１２,"]


def test_rule_on_dates_and_thousands(number_dir):
    plain, google = Tokenizer.load(number_dir), Tokenizer.load(number_dir, split_digit_comma=True)
    before = plain.convert_ids_to_tokens(plain.encode("February 7, 2020"))
    assert f"{META}7," in before  # the vocabulary joins the digit and the comma
    after = google.convert_ids_to_tokens(google.encode("February 7, 2020"))
    assert after[after.index(",") - 1].endswith("7") and not any(p.endswith("7,") for p in after)
    assert google.convert_ids_to_tokens(google.encode("1,000")) == official_pieces(google, "1,000")
    assert plain.convert_ids_to_tokens(plain.encode("1,000"))[0] == f"{META}1,"
    assert google.convert_ids_to_tokens(google.encode("1,000"))[:2] == [f"{META}1", ","]
    for text in TEXTS:
        pieces = google.convert_ids_to_tokens(google.encode(text))
        assert pieces == official_pieces(google, text), text
        assert not any(len(p) > 1 and p[-1] == "," and p[-2].isdigit() for p in pieces)
        assert google.decode(google.encode(text)) == plain.decode(plain.encode(text))


def test_every_encode_path_applies_the_rule(number_dir):
    google = Tokenizer.load(number_dir, split_digit_comma=True)
    singles = [google.encode(t) for t in TEXTS]
    assert all(np.array_equal(a, b) for a, b in zip(google.encode_batch(TEXTS), singles))
    ids, starts, offsets = google.encode_batch_packed(TEXTS)
    assert all(np.array_equal(ids[offsets[i]:offsets[i + 1]], s) for i, s in enumerate(singles))
    for text, (one_ids, one_starts) in zip(TEXTS, google.encode_batch_with_word_starts(TEXTS)):
        assert np.array_equal(one_ids, google.encode(text))
        pieces = google.convert_ids_to_tokens(one_ids)
        for k, p in enumerate(pieces):  # the split-off comma continues the number's word
            if p == "," and k and pieces[k - 1][-1].isdigit():
                assert not one_starts[k]
    # the general path (a literal special token in the text) applies it too
    masked = google.convert_ids_to_tokens(google.encode("[MASK] 7, 2020"))
    assert masked[0] == "[MASK]" and "," in masked and f"{META}7," not in masked


def test_flag_round_trips_through_tokenizer_config(number_dir, tmp_path):
    assert not Tokenizer.load(number_dir).split_digit_comma  # off for our own vocabularies
    google = Tokenizer.load(number_dir, split_digit_comma=True)
    google.save(tmp_path / "g")
    config = json.loads((tmp_path / "g" / "tokenizer_config.json").read_text())
    assert config["albertlm"]["split_digit_comma"] is True
    again = load_vocabulary(tmp_path / "g")
    assert again.split_digit_comma and again.encode("1,000").tolist() == google.encode("1,000").tolist()
    import pickle

    assert pickle.loads(pickle.dumps(google)).encode("7, 8,").tolist() == google.encode("7, 8,").tolist()
    config["albertlm"]["split_digit_comma"] = "yes"
    (tmp_path / "g" / "tokenizer_config.json").write_text(json.dumps(config))
    from albertlm.errors import AlbertlmError

    with pytest.raises(AlbertlmError, match="field 'split_digit_comma' must be true or false"):
        Tokenizer.load(tmp_path / "g")


def test_qa_spans_leave_the_comma_out(number_dir):
    from albertlm.tasks.common import FeatureSettings
    from albertlm.tasks.squad import SquadExample, squad_features

    context = "It was February 7, 2020 in town."
    start = context.index("February 7")
    example = SquadExample(qid="q", question="when ?", context=context, answers=[("February 7", start)],
                           is_impossible=False)
    for flag, answer in ((True, "February 7"), (False, "February 7,")):
        tok = Tokenizer.load(number_dir, split_digit_comma=flag)
        [feature] = squad_features([example], tok, FeatureSettings(max_seq_length=64), train=True)
        s, e = int(feature.inputs["start_positions"]), int(feature.inputs["end_positions"])
        assert context[feature.meta["span_start"][s]:feature.meta["span_end"][e]].strip() == answer
