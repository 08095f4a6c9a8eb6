"""Fine-tuning heads: equal logits and losses against transformers' Albert*For* classes, both ways.

Every parameter is randomised (so a wrong key-table row cannot hide behind a zero init), the weights
travel only through save_pretrained / from_pretrained, and the comparison is in eval mode, fp32.
"""

from __future__ import annotations

import pytest
import torch

from albertlm import AlbertConfig, AlbertForPreTraining
from albertlm.heads import (HEADS, AlbertForMultipleChoice, AlbertForQuestionAnswering,
                            AlbertForSequenceClassification, AlbertForTokenClassification)
from albertlm.interop import hf
from test_interop_hf import randomise

TOL = 1e-5
TINY = dict(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64)
CONFIGS = {
    "all-shared": AlbertConfig(**TINY),
    "groups2-inner2": AlbertConfig(**{**TINY, "num_hidden_layers": 4, "num_hidden_groups": 2, "inner_group_num": 2}),
}


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("transformers")


def batch(config: AlbertConfig, shape=(3, 11), seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, shape, generator=g)
    mask = torch.ones(shape, dtype=torch.long)
    mask[..., 1, 7:] = 0  # row 1 (of every group) is padded
    types = torch.zeros(shape, dtype=torch.long)
    types[..., 4:] = 1
    return dict(input_ids=ids * mask, attention_mask=mask, token_type_ids=types * mask)


def labels_for(cls_name: str, config: AlbertConfig, problem: str | None, B: int = 3):
    if cls_name == "AlbertForSequenceClassification":
        if problem == "regression":
            return {"labels": torch.tensor([0.5, 3.0, -1.0])}
        if problem == "multi_label_classification":
            return {"labels": torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])}
        return {"labels": torch.tensor([0, 2, 1])}
    if cls_name == "AlbertForTokenClassification":
        lab = torch.randint(0, config.num_labels, (B, 11), generator=torch.Generator().manual_seed(3))
        lab[:, 0] = -100
        lab[1, 7:] = -100
        return {"labels": lab}
    if cls_name == "AlbertForQuestionAnswering":
        return {"start_positions": torch.tensor([1, 3, 0]), "end_positions": torch.tensor([2, 5, 0])}
    return {"labels": torch.tensor([1, 0, 1])}


CASES = [  # (class, num_labels, problem_type, input shape)
    ("AlbertForSequenceClassification", 3, "single_label_classification", (3, 11)),
    ("AlbertForSequenceClassification", 1, "regression", (3, 11)),
    ("AlbertForSequenceClassification", 3, "multi_label_classification", (3, 11)),
    ("AlbertForTokenClassification", 5, None, (3, 11)),
    ("AlbertForQuestionAnswering", 2, None, (3, 11)),
    ("AlbertForMultipleChoice", 2, None, (3, 4, 11)),
]


def outputs(out) -> list[torch.Tensor]:
    if hasattr(out, "start_logits"):
        return [out.start_logits, out.end_logits, out.loss]
    return [out.logits, out.loss]


@pytest.mark.parametrize("config_name", CONFIGS)
@pytest.mark.parametrize("cls_name,num_labels,problem,shape", CASES,
                         ids=[f"{c[0][9:]}-{c[2] or c[1]}" for c in CASES])
def test_ours_to_transformers_and_back(tf, tmp_path, config_name, cls_name, num_labels, problem, shape):
    config = CONFIGS[config_name].replace(num_labels=num_labels, problem_type=problem,
                                          id2label={i: f"tag{i}" for i in range(num_labels)})
    ours = randomise(HEADS[cls_name](config), seed=7)
    ours.save_pretrained(tmp_path / "ours")
    theirs, info = getattr(tf, cls_name).from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert theirs.config.num_labels == num_labels and theirs.config.problem_type == problem
    theirs.eval()
    inputs = {**batch(config, shape), **labels_for(cls_name, config, problem)}
    with torch.no_grad():
        a, b = outputs(ours(**inputs)), outputs(theirs(**inputs))
    for x, y in zip(a, b):
        assert x.shape == y.shape
        d = (x - y).abs().max().item()
        print(f"PARITY ours->hf {cls_name} {config_name} {problem}: {d:.2e}")
        assert d < TOL

    # transformers' own file back into ours (its state dict layout, its config.json)
    randomise(theirs, seed=8)
    theirs.save_pretrained(tmp_path / "hf")
    back = HEADS[cls_name].from_pretrained(tmp_path / "hf")
    with torch.no_grad():
        a, b = outputs(back(**inputs)), outputs(theirs(**inputs))
    for x, y in zip(a, b):
        d = (x - y).abs().max().item()
        print(f"PARITY hf->ours {cls_name} {config_name} {problem}: {d:.2e}")
        assert d < TOL


def test_heads_start_from_a_pretraining_checkpoint(tmp_path):
    config = CONFIGS["all-shared"]
    pre = randomise(AlbertForPreTraining(config), seed=3)
    pre.save_pretrained(tmp_path)
    for cls in HEADS.values():
        with pytest.warns(UserWarning, match="randomly initialised"):
            model = cls.from_pretrained(tmp_path)
        torch.testing.assert_close(model.albert.embeddings.word.weight, pre.albert.embeddings.word.weight)
        if model.albert.pooler is not None:
            torch.testing.assert_close(model.albert.pooler.weight, pre.albert.pooler.weight)


def test_key_table_rows_of_heads():
    config = CONFIGS["all-shared"].replace(num_labels=4)
    for name in HEADS:
        table = dict(hf.key_table(config, name, pooler=name in ("AlbertForSequenceClassification",
                                                                   "AlbertForMultipleChoice")))
        assert "albert.embeddings.word.weight" in table
    assert hf.key_table(config, "AlbertForQuestionAnswering", pooler=False)[-1] == ("qa_outputs.bias", ["qa_outputs.bias"])


def test_problem_type_inferred_like_transformers():
    config = CONFIGS["all-shared"].replace(num_labels=3)
    model = AlbertForSequenceClassification(config).eval()
    inputs = batch(config)
    with torch.no_grad():
        ce = model(**inputs, labels=torch.tensor([0, 1, 2])).loss
        bce = model(**inputs, labels=torch.ones(3, 3)).loss
        logits = model(**inputs).logits
    torch.testing.assert_close(ce, torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2])))
    torch.testing.assert_close(bce, torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.ones(3, 3)))


def test_classifier_dropout_is_the_config_value():
    config = CONFIGS["all-shared"].replace(classifier_dropout_prob=0.3)
    for cls in (AlbertForSequenceClassification, AlbertForTokenClassification, AlbertForMultipleChoice):
        assert cls(config).dropout.p == 0.3
    with pytest.raises(ValueError, match="num_labels == 2"):
        AlbertForQuestionAnswering(config.replace(num_labels=3))


def test_multiple_choice_loss_is_softmax_over_choices():
    config = CONFIGS["all-shared"]
    model = AlbertForMultipleChoice(config).eval()
    inputs = batch(config, (2, 3, 9))
    with torch.no_grad():
        out = model(**inputs, labels=torch.tensor([2, 0]))
    assert out.logits.shape == (2, 3)
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits, torch.tensor([2, 0])))


# ---------------------------------------------------------------------------- training unpadded
UNPADDED_CASES = [c for c in CASES if c[0] != "AlbertForQuestionAnswering"] + [
    ("AlbertForSequenceClassification", 3, "mean", (3, 11)),  # the mean of the tokens, not [CLS]
    ("EarlyExitSequenceClassifier", 3, "single_label_classification", (3, 11)),
    ("EarlyExitTokenClassifier", 5, None, (3, 11)),
]


def _head(cls_name: str, num_labels: int, problem: str | None) -> torch.nn.Module:
    from albertlm import exit_heads

    pooling = "mean" if problem == "mean" else "cls"
    problem = "single_label_classification" if problem == "mean" else problem
    config = CONFIGS["groups2-inner2"].replace(num_labels=num_labels, problem_type=problem, classifier_pooling=pooling,
                                               id2label={i: f"tag{i}" for i in range(num_labels)})
    if cls_name.startswith("EarlyExit"):
        return randomise(getattr(exit_heads, cls_name)(exit_heads.with_exit_heads(config)), seed=4)
    return randomise(HEADS[cls_name](config), seed=4)


@pytest.mark.parametrize("cls_name,num_labels,problem,shape", UNPADDED_CASES,
                         ids=[f"{c[0]}-{c[2] or c[1]}" for c in UNPADDED_CASES])
def test_unpadded_training_pass_is_the_padded_one(cls_name, num_labels, problem, shape):
    model = _head(cls_name, num_labels, problem)
    assert model.unpads
    inputs = batch(model.config, shape)
    plain = {"EarlyExitSequenceClassifier": "AlbertForSequenceClassification",
             "EarlyExitTokenClassifier": "AlbertForTokenClassification"}.get(cls_name, cls_name)
    targets = labels_for(plain, model.config, None if problem in (None, "mean") else problem)
    keep = inputs["attention_mask"].bool()
    results = []
    for unpad in (False, True):
        model.zero_grad()
        out = model(**inputs, **targets, output_hidden_states=True, unpad=unpad)
        out.loss.backward()
        if unpad:  # the packed path ran: nothing computed at padded positions
            assert not out.hidden_states[-1][~keep.reshape(-1, keep.shape[-1])].any()
        results.append((out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (padded, grads), (packed, packed_grads) = results
    torch.testing.assert_close(packed.loss, padded.loss, rtol=0, atol=1e-5)
    if "Token" in cls_name:  # per position: the real tokens' logits (padding is never scored)
        torch.testing.assert_close(packed.logits[keep], padded.logits[keep], rtol=0, atol=1e-5)
    else:
        torch.testing.assert_close(packed.logits, padded.logits, rtol=0, atol=1e-5)
    assert grads.keys() == packed_grads.keys() and grads
    for n in grads:
        torch.testing.assert_close(packed_grads[n], grads[n], rtol=0, atol=1e-5, msg=n)


def test_question_answering_does_not_claim_unpadding():
    # its loss is a softmax over every position, padding included, as transformers computes it: the
    # padded positions' logits differ unpadded, so training keeps QA padded.
    assert not AlbertForQuestionAnswering.unpads


def test_which_training_runs_unpadded():
    from albertlm.train.loop import unpadded

    tagger = _head("AlbertForTokenClassification", 5, None)
    qa = AlbertForQuestionAnswering(CONFIGS["all-shared"].replace(num_labels=2))
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert unpadded("auto", tagger, cpu) and not unpadded("auto", tagger, gpu)
    assert unpadded("on", tagger, gpu) and not unpadded("off", tagger, cpu)
    assert not unpadded("on", qa, cpu) and not unpadded("auto", qa, cpu)
