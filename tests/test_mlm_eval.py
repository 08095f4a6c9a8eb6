"""Held-out MLM scoring split by what the input shows: a copying model scores the baseline at [MASK]."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn

from albertlm.data.corpus import Corpus
from albertlm.config import get_preset
from albertlm.data.build import BuildSettings, build_dataset
from albertlm.data.loader import PretrainingDataset
from albertlm.data.shards import write_shard
from albertlm.tokenizer import train_tokenizer
from albertlm.train.mlm_eval import TokenBaselines, evaluate, position_kinds
from albertlm.vocab import CLS_ID, IGNORE_INDEX, MASK_ID, SEP_ID
from conftest import write_story_corpus


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm_eval")
    corpus = write_story_corpus(root / "corpus.txt", documents=60)
    train_tokenizer(Corpus(str(corpus)).sentences, root / "tok", vocab_size=64, strict=True)
    build_dataset(str(corpus), root / "tok", root / "data", BuildSettings(max_seq_length=64, heldout_fraction=0.1),
                  progress=False)
    return root / "data"


@dataclass
class _Out:
    prediction_logits: torch.Tensor
    prediction_mask: torch.Tensor
    sop_logits: torch.Tensor


class _RuleModel(nn.Module):
    """A stand-in for AlbertForPreTraining whose prediction at each labelled position is a rule."""

    def __init__(self, vocab_size: int, rule):
        super().__init__()
        self.config = get_preset("test", vocab_size=vocab_size)
        self.rule = rule
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, labels, sentence_order_label, **_):
        mask = labels != IGNORE_INDEX
        answers = self.rule(input_ids, mask)  # [N]
        logits = torch.full((len(answers), self.config.vocab_size), -10.0)
        logits[torch.arange(len(answers)), answers] = 10.0
        return _Out(logits, mask, torch.zeros(len(input_ids), 2))


def test_position_kinds_split_by_what_the_input_shows():
    ids = torch.tensor([[CLS_ID, MASK_ID, 7, 9, SEP_ID]])
    labels = torch.tensor([[IGNORE_INDEX, 5, 7, 8, IGNORE_INDEX]])
    kinds = position_kinds(ids, labels)
    assert kinds["mask"].tolist() == [[False, True, False, False, False]]
    assert kinds["kept"].tolist() == [[False, False, True, False, False]]
    assert kinds["random"].tolist() == [[False, False, False, True, False]]


def test_baselines_count_unigrams_and_left_neighbours(tmp_path):
    # two examples: [CLS] 5 6 5 6 [SEP] and [CLS] 5 7 9 [SEP]; 5 is followed by 6 twice, by 7 once
    tokens = np.array([CLS_ID, 5, 6, 5, 6, SEP_ID, CLS_ID, 5, 7, 9, SEP_ID], dtype=np.uint16)
    write_shard(tmp_path / "train-00000.shard", {"tokens": tokens, "tokens_offsets": np.array([0, 6, 11])}, 2)
    b = TokenBaselines.from_shards(tmp_path, vocab_size=12)
    assert b.unigram == 5  # 5 occurs three times
    assert b.bigram[5] == 6 and b.bigram[6] == 5 and b.bigram[7] == 9
    assert b.bigram[CLS_ID] == 5
    assert b.bigram[SEP_ID] == 5  # never followed by a target across examples: the unigram answer
    ids = torch.tensor([[CLS_ID, 5, MASK_ID, 7, MASK_ID, SEP_ID]])
    where = torch.tensor([[False, False, True, False, True, False]])
    assert b.predict(ids, where)["bigram"].tolist() == [6, 9]
    # a [MASK] on the left says nothing: the unigram answer
    assert b.predict(torch.tensor([[CLS_ID, MASK_ID, MASK_ID]]), torch.tensor([[False, False, True]]))["bigram"].tolist() == [5]


def test_a_model_that_only_copies_scores_the_baseline_at_mask(data_dir):
    heldout = PretrainingDataset(data_dir, "heldout", shuffle=False)
    baselines = TokenBaselines.from_shards(data_dir, heldout.vocab_size)

    def copy_or_unigram(input_ids, mask):  # copy what is visible; at [MASK], the most frequent token
        seen = input_ids[mask]
        return torch.where(seen == MASK_ID, baselines.unigram, seen)

    scores = evaluate(_RuleModel(heldout.vocab_size, copy_or_unigram), heldout, baselines=baselines)
    assert scores["mask_positions"] > 50
    assert scores["mlm_mask_accuracy"] == pytest.approx(scores["baseline_unigram_accuracy"])
    assert scores["mlm_kept_accuracy"] == 1.0
    assert scores["mlm_random_accuracy"] < 0.2
    assert scores["mask_distinct_predictions"] == 1
    # the all-positions figure is inflated by the copies: exactly what the headline must not show
    assert scores["mlm_all_accuracy"] > scores["mlm_mask_accuracy"] + 0.05
    assert 0.7 < scores["mask_share"] < 0.9 and scores["kept_share"] > 0.05 and scores["random_share"] > 0.05


def test_a_model_that_uses_the_left_neighbour_scores_the_bigram_baseline(data_dir):
    heldout = PretrainingDataset(data_dir, "heldout", shuffle=False)
    baselines = TokenBaselines.from_shards(data_dir, heldout.vocab_size)

    def bigram(input_ids, mask):
        return baselines.predict(input_ids, mask)["bigram"]

    scores = evaluate(_RuleModel(heldout.vocab_size, bigram), heldout, baselines=baselines)
    assert scores["mlm_mask_accuracy"] == pytest.approx(scores["baseline_bigram_accuracy"])
    # on this toy corpus the left neighbour tells a lot: the bigram baseline is far above the unigram one
    assert scores["baseline_bigram_accuracy"] > scores["baseline_unigram_accuracy"] + 0.05
