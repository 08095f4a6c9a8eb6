"""Task readers and features on small fixture files, plus opt-in reads of the real task files (conftest.SHARED_DATA)."""

from __future__ import annotations

import gzip
import json
import random
import warnings

import numpy as np
import pytest

from albertlm.errors import AlbertlmError
from albertlm.tasks import glue, multiple_choice, ner, squad
from albertlm.tasks.common import (Feature, FeatureSettings, MalformedDataWarning, encode_words, pad_batch,
                                   split_words)
from albertlm.tasks.metrics import get_entities
from albertlm.tasks.registry import TASKS, get_task
from albertlm.tokenizer import CLS_ID, SEP_ID, Tokenizer, train_tokenizer

WORDS = ("the a cat dog sat on mat paris london is capital of france england red blue what where who "
         "tower river big small john mary went to city ( ) 1990 , . ?").split()


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    r = random.Random(0)
    path = tmp_path_factory.mktemp("tok")
    train_tokenizer([" ".join(r.choices(WORDS, k=10)) for _ in range(400)], path, vocab_size=80, log=lambda m: None)
    return Tokenizer.load(path)


@pytest.fixture(scope="module")
def zh_tok(tmp_path_factory) -> Tokenizer:
    r = random.Random(0)
    chars = list("北京是中国的首都上海大学红楼梦作者曹雪芹年月日我们他在哪里什么") + ["1990"]
    path = tmp_path_factory.mktemp("zh")
    train_tokenizer(["".join(r.choices(chars, k=15)) for _ in range(300)], path, vocab_size=60, chinese=True,
                    log=lambda m: None)
    return Tokenizer.load(path)


def write(path, text: str, encoding: str = "utf-8"):
    path.write_text(text, encoding=encoding)
    return path


# ---------------------------------------------------------------------------- GLUE-style tables
def test_sst2_header_and_cola_without_header(tmp_path):
    write(tmp_path / "train.tsv", "sentence\tlabel\nit 's fun . \t1\nbad \"film\t0\n")
    ex = get_task("sst-2").read(tmp_path, "train")
    assert [(e.text_a, e.label) for e in ex] == [("it 's fun .", "1"), ('bad "film', "0")]  # quotes are text
    write(tmp_path / "dev.tsv", "gj04\t1\t\tThe sailors rode.\ngj04\t0\t*\tRode sailors the.\n")
    ex = get_task("cola").read(tmp_path, "dev")
    assert [(e.text_a, e.label) for e in ex] == [("The sailors rode.", "1"), ("Rode sailors the.", "0")]


def test_mrpc_bom_and_stsb_scores(tmp_path):
    write(tmp_path / "train.tsv", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA \"b\t\"C d.\n",
          encoding="utf-8")
    (e,) = get_task("mrpc").read(tmp_path, "train")
    assert (e.text_a, e.text_b, e.label) == ('A "b', '"C d.', "1")
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    write(tmp_path / "dev.tsv", head + "0\tg\tf\t2012\t0\tn\tn\tA man.\tA guy.\t4.750\n")
    (e,) = get_task("sts-b").read(tmp_path, "dev")
    assert e.label == 4.75


def test_mnli_files_and_labels(tmp_path):
    write(tmp_path / "dev_matched.tsv", "index\tsentence1\tsentence2\tgold_label\n0\tA\tB\tneutral\n")
    spec = get_task("MNLI")
    assert spec.read(tmp_path, "dev")[0].label == "neutral"
    assert spec.label_list(tmp_path, None) == ["contradiction", "entailment", "neutral"]
    write(tmp_path / "dev_mismatched.tsv", "index\tsentence1\tsentence2\tgold_label\n0\tA\tB\tentailment\n")
    assert get_task("mnli-mm").read(tmp_path, "dev")[0].label == "entailment"


def test_test_split_without_labels(tmp_path):
    write(tmp_path / "test.tsv", "index\tsentence\n0\tgreat\n1\tawful\n")
    ex = get_task("sst-2").read(tmp_path, "test")
    assert [e.label for e in ex] == [None, None]


def test_malformed_rows_are_counted_and_reported(tmp_path):
    rows = ["sentence1\tsentence2\tlabel"] + [f"a{i}\tb{i}\tentailment" for i in range(30)]
    rows[5] = "only one field"
    rows[9] = "x\ty\tmaybe"
    write(tmp_path / "train.tsv", "\n".join(rows) + "\n")
    with pytest.warns(MalformedDataWarning) as record:
        ex = get_task("rte").read(tmp_path, "train")
    assert len(ex) == 28
    msg = str(record[0].message)
    assert "skipped 2 malformed of 30 rows" in msg and "train.tsv:6: expected 3 fields, found 1" in msg
    assert "train.tsv:10: unknown label 'maybe'" in msg
    with pytest.raises(AlbertlmError, match=r"train.tsv:6: expected 3 fields"):
        get_task("rte").read(tmp_path, "train", strict=True)
    write(tmp_path / "dev.tsv", "sentence1\tsentence2\tlabel\n" + "bad row\n" * 5 + "a\tb\tentailment\n")
    with pytest.raises(AlbertlmError, match=r"5 of 6 rows malformed: is this the right file"):
        get_task("rte").read(tmp_path, "dev")
    write(tmp_path / "test.tsv", "text\tlabel\nx\t1\n")
    with pytest.raises(AlbertlmError, match="no column 'sentence1' in the header"):
        get_task("rte").read(tmp_path, "test")


def test_missing_file_names_candidates(tmp_path):
    with pytest.raises(AlbertlmError, match="no train file \\(looked for train.tsv\\)"):
        get_task("sst-2").read(tmp_path, "train")


def test_chinese_tables(tmp_path):
    write(tmp_path / "train.tsv", "label\ttext_a\n1\t酒店不错\n0\t太差了\n")
    assert get_task("chnsenticorp").read(tmp_path, "train")[0].text_a == "酒店不错"
    write(tmp_path / "dev.txt", "开初婚未育证明怎么弄？\t初婚未育情况证明怎么开？\t1\n")
    (e,) = get_task("lcqmc").read(tmp_path, "dev")
    assert (e.text_b, e.label) == ("初婚未育情况证明怎么开？", "1")
    # AFQMC in CLUE's JSON lines
    write(tmp_path / "train.json", '{"sentence1": "花呗", "sentence2": "借呗", "label": "0"}\n')
    assert get_task("afqmc").read(tmp_path, "train")[0].label == "0"
    # TNEWS: TSV with label names, and labels.json fixing the order
    d = tmp_path / "tnews"
    d.mkdir()
    write(d / "labels.json", '{"label": "100", "label_desc": "news_story"}\n{"label": "101", "label_desc": "news_culture"}\n')
    write(d / "train.tsv", "标题一\tnews_culture\n")
    spec = get_task("tnews")
    assert spec.read(d, "train")[0].label == "news_culture"
    assert spec.label_list(d, None) == ["news_story", "news_culture"]
    write(d / "dev.json", '{"label": "100", "label_desc": "news_story", "sentence": "标题", "keywords": ""}\n')
    assert spec.read(d, "dev")[0].label == "news_story"


def test_generic_csv_jsonl_and_multilabel(tmp_path):
    write(tmp_path / "train.csv", 'review,stars\n"multi\nline, quoted",high\nplain,low\n')
    spec = get_task("classification", text_column="review", label_column="stars")
    ex = spec.read(tmp_path, "train")
    assert ex[0].text_a == "multi\nline, quoted" and spec.label_list(tmp_path, ex) == ["high", "low"]
    write(tmp_path / "dev.jsonl", '{"text": "a", "label": ["x", "y"]}\n{"text": "b", "label": []}\nnot json\n'
          + '{"text": "c", "label": ["y"]}\n' * 10)
    with pytest.warns(MalformedDataWarning, match="dev.jsonl:3: invalid JSON"):
        ex = get_task("multilabel").read(tmp_path, "dev")
    assert ex[0].label == ["x", "y"] and ex[1].label == []
    write(tmp_path / "test.json", json.dumps([{"text": "a", "label": 2.5}]))
    assert get_task("regression").read(tmp_path, "test")[0].label == 2.5


def test_classification_features(tok):
    ex = [glue.TextExample("0", "the cat sat on the mat", "the dog", "1"),
          glue.TextExample("1", " ".join(["the cat"] * 40), " ".join(["a dog"] * 40), "0")]
    (f1, f2) = glue.classification_features(ex, tok, ["0", "1"], "single_label_classification", FeatureSettings(max_seq_length=20))
    ids = f1.inputs["input_ids"]
    assert ids[0] == CLS_ID and list(ids).count(SEP_ID) == 2 and f1.inputs["labels"] == 1
    assert f1.inputs["token_type_ids"].tolist() == [0] * (list(ids).index(SEP_ID) + 1) + [1] * (len(ids) - list(ids).index(SEP_ID) - 1)
    assert len(f2) == 20 and abs(int((f2.inputs["token_type_ids"] == 0).sum()) - int((f2.inputs["token_type_ids"] == 1).sum())) <= 2
    reg = glue.classification_features(ex[:1], tok, None, "regression", FeatureSettings())
    assert reg[0].inputs["labels"].dtype == np.float32
    ml = glue.classification_features([glue.TextExample("0", "a", None, ["y"])], tok, ["x", "y"],
                                      "multi_label_classification", FeatureSettings())
    assert ml[0].inputs["labels"].tolist() == [0.0, 1.0]
    logits = np.array([[0.1, 2.0], [3.0, -1.0]])
    assert glue.classification_predictions(logits, ["0", "1"], "single_label_classification") == ["1", "0"]
    assert glue.classification_predictions(logits, ["x", "y"], "multi_label_classification") == [["x", "y"], ["x"]]


def test_pad_batch_pads_sequences_not_label_vectors():
    a = Feature({"input_ids": np.array([2, 7, 3]), "token_type_ids": np.zeros(3, np.int64),
                 "labels": np.array([-100, 1, -100])}, 0)
    b = Feature({"input_ids": np.array([2, 3]), "token_type_ids": np.zeros(2, np.int64), "labels": np.array([-100, -100])}, 1)
    batch = pad_batch([a, b])
    assert batch["input_ids"].tolist() == [[2, 7, 3], [2, 3, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[-100, 1, -100], [-100, -100, -100]]
    ml = [Feature({"input_ids": np.array([2, 3]), "labels": np.array([1.0, 0.0], np.float32)}, 0),
          Feature({"input_ids": np.array([2, 5, 6, 3]), "labels": np.array([0.0, 1.0], np.float32)}, 1)]
    assert pad_batch(ml)["labels"].shape == (2, 2)


# ---------------------------------------------------------------------------- word -> piece offsets
def test_encode_words_offsets(tok):
    words = ["(1990),", "London", "zebra", "\ufb01le"]  # the last: NFKD turns the ligature into 2 letters
    out = encode_words(tok, words, with_offsets=True)
    for word, (ids, spans) in zip(words, out):
        assert len(ids) == len(spans) >= 1
        assert spans[0][0] == 0 and spans[-1][1] == len(word)
    pieces = tok.convert_ids_to_tokens(out[0][0])
    surfaces = ["".join(p.lstrip("\u2581")) for p in pieces]
    assert ["(1990),"[s:e] for s, e in out[0][1]] == surfaces  # exact per-piece spans
    assert all(s == (0, 3) for s in out[3][1])  # length changed: every piece spans the whole word
    assert split_words("北京 is 大学", chinese=True) == [("北", 0), ("京", 1), ("is", 3), ("大", 6), ("学", 7)]


# ---------------------------------------------------------------------------- SQuAD
def _squad_file(path, qas_per_context, version2=False):
    context = "The Eiffel tower (built 1990) is in Paris, the capital of France."
    qas = [{"id": "q1", "question": "Where is the tower?", "answers": [{"text": "Paris", "answer_start": context.index("Paris")}]},
           {"id": "q2", "question": "When was it built?", "answers": [{"text": "1990", "answer_start": 3}]},  # wrong start
           {"id": "q3", "question": "Who?", "answers": [], "is_impossible": True},
           {"question": "no id"}][:qas_per_context]
    path.write_text(json.dumps({"version": "v2.0" if version2 else "1.1",
                                "data": [{"title": "T", "paragraphs": [{"context": context, "qas": qas}]}]}))
    return path


def test_read_squad_and_malformed(tmp_path):
    with pytest.warns(MalformedDataWarning, match=r"data\[0\].paragraphs\[0\].qas\[3\]: malformed question"):
        ex = squad.read_squad(_squad_file(tmp_path / "dev.json", 4, True))
    assert [e.qid for e in ex] == ["q1", "q2", "q3"] and ex[2].is_impossible and ex[2].answers == []
    assert squad.is_version2(ex)
    write(tmp_path / "bad.json", '{"version": 1}')
    with pytest.raises(AlbertlmError, match="not SQuAD format"):
        squad.read_squad(tmp_path / "bad.json")


@pytest.mark.parametrize("max_len,stride", [(64, 128), (20, 4)])
def test_squad_features_map_answers_to_pieces(tmp_path, tok, max_len, stride):
    ex = squad.read_squad(_squad_file(tmp_path / "train.json", 3))
    settings = FeatureSettings(max_seq_length=max_len, doc_stride=stride, max_query_length=8)
    feats = squad.squad_features(ex, tok, settings, train=True)
    found = {}
    for f in feats:
        assert len(f) <= max_len
        s, e = int(f.inputs["start_positions"]), int(f.inputs["end_positions"])
        if s:
            text = ex[f.example].context[f.meta["span_start"][s]:f.meta["span_end"][e]]
            found.setdefault(ex[f.example].qid, set()).add(text)
    assert found["q1"] == {"Paris"} and found["q2"] == {"1990"}  # q2's answer_start was off: located by search
    if max_len == 20:  # windows overlap: every context piece is max-context in exactly one window
        per_ex = [f for f in feats if f.example == 0]
        assert len(per_ex) > 2
        n_doc = sum(len(ids) for ids, _ in encode_words(tok, ex[0].context.split()))
        assert sum(int(f.meta["max_context"].sum()) for f in per_ex) == n_doc


def test_squad_predictions_from_logits(tmp_path, tok):
    ex = squad.read_squad(_squad_file(tmp_path / "dev.json", 3, True))
    settings = FeatureSettings(max_seq_length=64)
    feats = squad.squad_features(ex, tok, settings)
    starts, ends = [], []
    for f in feats:
        sl, el = np.zeros(len(f)), np.zeros(len(f))
        target = {"q1": "Paris", "q2": "1990"}.get(ex[f.example].qid)
        if target:
            at = ex[f.example].context.index(target)
            s = int(np.flatnonzero(f.meta["span_start"] >= at)[0])
            sl[s], el[s] = 5.0, 5.0
        else:
            sl[0], el[0] = 5.0, 5.0  # [CLS]: no answer
        starts.append(sl)
        ends.append(el)
    answers, odds = squad.squad_predictions(ex, feats, starts, ends, settings, version2=True)
    assert answers == ["Paris", "1990", ""]
    assert odds[0] < 0 < odds[2]
    path = tmp_path / "pred.json"
    squad.write_predictions(path, ex, answers)
    assert json.loads(path.read_text()) == {"q1": "Paris", "q2": "1990", "q3": ""}


def test_cmrc_chinese_offsets(tmp_path, zh_tok):
    context = "红楼梦的作者是曹雪芹。"
    path = write(tmp_path / "cmrc.json", json.dumps({"version": "v1.0", "data": [{"paragraphs": [{"id": "p", "context": context,
        "qas": [{"id": "c1", "question": "红楼梦的作者是谁？", "answers": [{"text": "曹雪芹", "answer_start": 7}]}]}]}]}))
    ex = get_task("cmrc2018").read(path, "train")
    (f,) = squad.squad_features(ex, zh_tok, FeatureSettings(max_seq_length=64), train=True)
    s, e = int(f.inputs["start_positions"]), int(f.inputs["end_positions"])
    assert context[f.meta["span_start"][s]:f.meta["span_end"][e]] == "曹雪芹" and e - s == 2  # one piece per character


# ---------------------------------------------------------------------------- RACE
def _race_article(i: int, answers=("B", "A")) -> dict:
    return {"id": f"high{i}.txt", "article": "The cat sat on the mat.",
            "questions": ["Where did the cat sit?", "The cat sat on the _ ."],
            "options": [["bed", "mat", "dog", "car"], ["mat", "bed", "sofa", "roof"]], "answers": list(answers)}


def test_read_race_layouts(tmp_path):
    for i in range(3):
        (tmp_path / "train" / "high").mkdir(parents=True, exist_ok=True)
        write(tmp_path / "train" / "high" / f"{i}.txt", json.dumps(_race_article(i)))
    write(tmp_path / "train" / "high" / "bad.txt", json.dumps(_race_article(9, ("Z", "A"))))
    with pytest.warns(MalformedDataWarning, match="answer 'Z' is not one of ABCD"):
        ex = get_task("race").read(tmp_path, "train")
    assert len(ex) == 6 and ex[0].guid == "high0.txt-0" and ex[0].label == 1  # the bad article is skipped whole
    write(tmp_path / "dev.json", json.dumps([_race_article(0)]))
    assert len(get_task("race").read(tmp_path, "dev")) == 2
    write(tmp_path / "test.jsonl", json.dumps({"context": "c", "question": "q", "options": ["a", "b"], "label": 1}) + "\n")
    assert get_task("race").read(tmp_path, "test")[0].label == 1


def test_choice_features(tok):
    ex = [multiple_choice.ChoiceExample("x", "the cat sat on the mat", "the cat sat on the _ .", ["mat", "dog"], 0),
          multiple_choice.ChoiceExample("y", " ".join(["the big red dog"] * 30), "what is it ?", ["a dog", "the cat sat"], 1)]
    assert multiple_choice.choice_text("the _ sat", "cat") == "the cat sat"
    assert multiple_choice.choice_text("who sat ?", "cat") == "who sat ? cat"
    f1, f2 = multiple_choice.choice_features(ex, tok, FeatureSettings(max_seq_length=24, max_qa_length=6))
    assert f1.inputs["input_ids"].shape[0] == 2 and f1.inputs["labels"] == 0
    assert f2.inputs["input_ids"].shape == (2, 24)
    batch = pad_batch([f1, f2])
    assert batch["input_ids"].shape == (2, 2, 24) and batch["attention_mask"][0].sum() == f1.inputs["attention_mask"].sum()
    assert multiple_choice.choice_predictions(np.array([[0.1, 0.9], [2, 1]])) == [1, 0]


# ---------------------------------------------------------------------------- NER
def test_read_conll_iob1_to_bio(tmp_path):
    text = ("-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\nGerman JJ I-NP I-MISC\n\n"
            "Peter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\nJohn NNP I-NP B-PER\n\n"
            "bad NN I-NP X-TAG\n\nok NN I-NP O\n")
    write(tmp_path / "eng.train", text)
    with pytest.warns(MalformedDataWarning, match="eng.train:11: tag 'X-TAG'"):
        ex = get_task("conll2003").read(tmp_path, "train")
    assert ex[0].tags == ["B-ORG", "O", "B-MISC"]
    assert ex[1].tags == ["B-PER", "I-PER", "B-PER"]
    assert len(ex) == 3 and ex[2].tokens == ["ok"]


def test_msra_gz_and_weibo_segpos(tmp_path):
    with gzip.open(tmp_path / "msra_train_bio.gz", "wt", encoding="utf-8") as fh:
        fh.write("中\tB-ORG\n共\tI-ORG\n在\tO\n\n北\tB-LOC\n")
    ex = get_task("msra-ner").read(tmp_path, "train")
    assert ex[0].tokens == ["中", "共", "在"] and ex[1].tags == ["B-LOC"]
    write(tmp_path / "weiboNER_2nd_conll.train", "科0\tO\n李0\tB-PER.NAM\n开1\tI-PER.NAM\na10\tO\n310\tO\n\n")
    (e,) = get_task("weibo").read(tmp_path, "train")
    assert e.tokens == ["科", "李", "开", "a", "3"]
    assert ner.tag_list([e]) == ["O", "B-PER.NAM", "I-PER.NAM"]


def test_read_cluener(tmp_path):
    lines = [{"text": "彭小军认为台湾", "label": {"name": {"彭小军": [[0, 2]]}, "address": {"台湾": [[5, 6]]}}},
             {"text": "温格", "label": {"name": {"温格": [[0, 0]]}}},  # wrong span: malformed
             *({"text": "好", "label": {}} for _ in range(10))]
    write(tmp_path / "train.json", "\n".join(json.dumps(x, ensure_ascii=False) for x in lines))
    with pytest.warns(MalformedDataWarning, match="span \\[0, 0\\] is '温', not '温格'"):
        ex = get_task("cluener").read(tmp_path, "train")
    assert ex[0].tags == ["B-name", "I-name", "I-name", "O", "O", "B-address", "I-address"]
    write(tmp_path / "test.json", json.dumps({"id": 0, "text": "测试"}, ensure_ascii=False))
    assert get_task("cluener").read(tmp_path, "test")[0].tags is None


def test_ner_features_chunk_long_sentences(tok):
    words = ("john went to paris and mary went to london " * 6).split()
    tags = ["B-PER" if w in ("john", "mary") else "B-LOC" if w in ("paris", "london") else "O" for w in words]
    ex = [ner.TokenExample("0", words, tags), ner.TokenExample("1", ["London", "zzz"], ["B-LOC", "B-MISC"])]
    labels = ["O", "B-LOC", "B-PER"]
    feats = ner.ner_features(ex, tok, labels, FeatureSettings(max_seq_length=16))
    assert len([f for f in feats if f.example == 0]) > 3 and all(len(f) <= 16 for f in feats)
    covered = [i for f in feats if f.example == 0 for i in range(*f.meta["words"])]
    assert covered == list(range(len(words)))
    for f in feats:
        lab = f.inputs["labels"]
        assert (lab[f.meta["first_piece"]] != -100).sum() + (lab == -100).sum() == len(lab) or f.example == 1
        assert lab[0] == -100 and lab[-1] == -100
    assert feats[-1].inputs["labels"][feats[-1].meta["first_piece"]].tolist() == [1, -100]  # B-MISC unseen: ignored
    logits = [np.eye(3)[np.where(f.inputs["labels"] >= 0, f.inputs["labels"], 0)] for f in feats]
    preds = ner.ner_predictions(ex, feats, logits, labels)
    assert preds[0] == tags and preds[1] == ["B-LOC", "O"]


def test_allowed_transitions_bio_and_iobes():
    labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER", "E-PER", "S-PER"]
    start, trans, end = ner.allowed_transitions(labels)
    i = {t: n for n, t in enumerate(labels)}
    assert start.tolist() == [True, True, False, True, False, False, True]
    assert trans[i["B-LOC"], i["I-LOC"]] and trans[i["I-LOC"], i["I-LOC"]] and not trans[i["O"], i["I-LOC"]]
    assert not trans[i["B-PER"], i["I-LOC"]] and not trans[i["E-PER"], i["I-PER"]]
    assert trans[i["B-LOC"], i["O"]] and trans[i["I-LOC"], i["B-PER"]]  # LOC is BIO: it may end anywhere
    assert not trans[i["B-PER"], i["O"]] and not trans[i["I-PER"], i["S-PER"]]  # PER is IOBES: closed by E-
    assert trans[i["B-PER"], i["E-PER"]] and trans[i["E-PER"], i["O"]] and trans[i["S-PER"], i["B-PER"]]
    assert end.tolist() == [True, True, True, False, False, True, True]


def test_constrained_decode_is_the_best_allowed_sequence():
    import itertools

    labels = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC"]
    masks = ner.allowed_transitions(labels)
    start, trans, end = masks
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4):
        for _ in range(20):
            scores = np.log(rng.dirichlet(np.ones(len(labels)), size=n))
            allowed = [s for s in itertools.product(range(len(labels)), repeat=n)
                       if start[s[0]] and end[s[-1]] and all(trans[a, b] for a, b in zip(s, s[1:]))]
            best = max(allowed, key=lambda s: sum(scores[k, j] for k, j in enumerate(s)))
            assert ner.constrained_decode(scores, *masks) == list(best)
    assert ner.constrained_decode(np.zeros((0, len(labels))), *masks) == []


def test_ner_predictions_valid_decoding_mends_what_argmax_breaks(tok):
    labels = ["O", "B-PER", "I-PER"]
    ex = [ner.TokenExample("0", ["john", "mary", "went"], ["B-PER", "I-PER", "O"])]
    feats = ner.ner_features(ex, tok, labels, FeatureSettings(max_seq_length=32))
    logits = np.zeros((len(feats[0]), 3))
    logits[feats[0].meta["first_piece"]] = np.log([[0.55, 0.45, 0.0001], [0.05, 0.05, 0.9], [0.9, 0.05, 0.05]])
    assert ner.ner_predictions(ex, feats, [logits], labels, "argmax") == [["O", "I-PER", "O"]]
    assert ner.ner_predictions(ex, feats, [logits], labels) == [["B-PER", "I-PER", "O"]]
    with pytest.raises(ValueError, match="not one of valid, argmax"):
        ner.ner_predictions(ex, feats, [logits], labels, "crf")


def test_valid_decoding_runs_across_chunks(tok):
    """A sentence cut into chunks is decoded whole: a chunk that begins inside an entity continues it
    (decoded on its own, the chunk could not start with I-PER and would split the entity)."""
    words = ["john"] * 12
    tags = ["O"] * 5 + ["B-PER"] + ["I-PER"] * 6
    ex = [ner.TokenExample("0", words, tags)]
    labels = ["O", "B-PER", "I-PER"]
    feats = ner.ner_features(ex, tok, labels, FeatureSettings(max_seq_length=10))
    assert any(5 < f.meta["words"][0] for f in feats)  # a chunk begins inside the entity
    logits = [np.log(np.where(np.eye(3)[np.where(f.inputs["labels"] >= 0, f.inputs["labels"], 0)] > 0, 0.9, 0.05))
              for f in feats]
    preds = ner.ner_predictions(ex, feats, logits, labels)
    assert preds == [tags] and get_entities(preds[0]) == [("PER", 5, 11)]


# ---------------------------------------------------------------------------- registry
def test_every_task_has_a_recipe_and_metric():
    for name, spec in TASKS.items():
        assert spec.main_metric and spec.recipe.lr > 0 and spec.files
    assert get_task("SST2").name == "sst-2" and get_task("squad2").name == "squad-v2.0"
    with pytest.raises(AlbertlmError, match="unknown task"):
        get_task("glue")


# ---------------------------------------------------------------------------- real files (opt-in)
REAL = [  # (task, directory, split, examples, labels or tag count)
    ("sst-2", "SST-2", "train", 67349, 2), ("sst-2", "SST-2", "dev", 872, 2),
    ("cola", "CoLA", "train", 8551, 2), ("cola", "CoLA", "dev", 1043, 2),
    ("mrpc", "MRPC", "train", 3668, 2), ("mrpc", "MRPC", "dev", 408, 2),
    ("rte", "RTE", "train", 2490, 2), ("rte", "RTE", "dev", 277, 2),
    ("sts-b", "STS-B", "train", 5749, None), ("sts-b", "STS-B", "dev", 1500, None),
    ("qnli", "QNLI", "dev", 5463, 2),
    ("chnsenticorp", "ChnSentiCorp", "train", 9600, 2), ("chnsenticorp", "ChnSentiCorp", "test", 1200, 2),
    ("lcqmc", "LCQMC", "dev", 8802, 2), ("lcqmc", "LCQMC", "test", 12500, 2),
    ("afqmc", "AFQMC", "train", 34334, 2), ("afqmc", "AFQMC", "dev", 4316, 2),
    ("tnews", "TNEWS", "train", 53360, 15), ("tnews", "TNEWS", "dev", 10000, 15),
    ("conll2003", "CoNLL-2003", "train", 14041, 9), ("conll2003", "CoNLL-2003", "dev", 3250, 9),
    ("conll2003", "CoNLL-2003", "test", 3453, 9),
    ("msra-ner", "MSRA-NER", "train", 45000, 7), ("msra-ner", "MSRA-NER", "dev", 3442, 7),
    ("weibo-ner", "Weibo-NER", "train", 1350, 17), ("weibo-ner", "Weibo-NER", "dev", 270, 17),
    ("weibo-ner", "Weibo-NER", "test", 270, 17),
    ("cluener", "CLUENER2020", "train", 10747, 21), ("cluener", "CLUENER2020", "dev", 1343, 21),
]


@pytest.mark.shared_data
@pytest.mark.parametrize("task,folder,split,count,n_labels", REAL, ids=[f"{r[0]}-{r[2]}" for r in REAL])
def test_real_files(shared_data, task, folder, split, count, n_labels):
    spec = get_task(task)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ex = spec.read(shared_data / folder, split)
    assert len(ex) == count
    labels = spec.label_list(shared_data / folder, ex)
    assert (labels is None) if n_labels is None else len(labels) == n_labels
    if task == "cluener" and split == "train":  # the one record with nested entities is reported, not dropped silently
        assert "train.json:1507" in str(caught[0].message)
    else:
        assert not caught
    if spec.family.name == "ner":
        tokens = sum(len(e.tokens) for e in ex)
        expected = {("conll2003", "train"): 203621, ("conll2003", "dev"): 51362, ("conll2003", "test"): 46435,
                    ("msra-ner", "train"): 2171573, ("msra-ner", "dev"): 172601, ("weibo-ner", "train"): 73778}
        assert tokens == expected.get((task, split), tokens)


def test_squad_answer_not_in_context_is_reported(tmp_path, tok):
    path = write(tmp_path / "train.json", json.dumps({"data": [{"paragraphs": [{"context": "the cat sat", "qas": [
        {"id": "1", "question": "what ?", "answers": [{"text": "dog", "answer_start": 0}]}]}]}]}))
    with pytest.warns(MalformedDataWarning, match="1 of 1 training questions have an answer that is not in"):
        assert squad.squad_features(squad.read_squad(path), tok, FeatureSettings(), train=True) == []


def test_squad_tasks_score_with_their_own_version_and_v2_searches_thresholds():
    from albertlm.tasks import squad
    from albertlm.tasks.registry import QAAnswers

    ex = [squad.SquadExample("a", "q", "c", [(".", 0)]), squad.SquadExample("b", "q", "c", [("red", 0)])]
    v11 = get_task("squad-v1.1").metric(ex, ["", "red"])
    assert v11["f1"] == pytest.approx(0.5)  # v1.1: a gold that normalises to nothing gives F1 0, EM 1 for ""
    assert v11["exact_match"] == pytest.approx(1.0)
    ex2 = [squad.SquadExample("a", "q", "c", []), squad.SquadExample("b", "q", "c", [("red", 0)])]
    v20 = get_task("squad-v2.0").metric(ex2, QAAnswers(["blue", "red"], [0.9, -0.5]))
    assert v20["exact_match"] == pytest.approx(0.5)
    # returning "no answer" for the question whose no-answer score is 0.9 makes both right
    assert v20["best_exact"] == pytest.approx(1.0) and v20["best_exact_thresh"] == pytest.approx(-0.5)
