"""Fine-tuning heads on the ALBERT backbone, one class per task shape, each with transformers' signature.

    AlbertForSequenceClassification   pooled [CLS] → dropout → Linear(H→num_labels)
                                      single-label CE, regression MSE (num_labels == 1) or multi-label BCE
    AlbertForTokenClassification      every position (no pooler) → dropout → Linear(H→num_labels)
    AlbertForQuestionAnswering        every position (no pooler) → Linear(H→2): span start / end logits
    AlbertForMultipleChoice           each choice's pooled [CLS] → dropout → Linear(H→1); softmax over choices

Class and attribute names follow transformers' (`albert`, `classifier`, `qa_outputs`), and
`interop/hf.py` registers one key-table row per head, so the checkpoints load both ways. The
classifier dropout is `config.classifier_dropout_prob` (paper Table 14: 0.1 for every task); the
question-answering head has none, as in the official code and transformers.

The two sentence-level heads classify `sentence_vector`: ALBERT's pooler on [CLS] by default, or,
with `config.classifier_pooling == "mean"`, the mean of the last layer over the non-padding tokens
(`albertlm.pooling.mean_pool`; such a head has no pooler, and transformers refuses it rather than pooling [CLS]).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from albertlm.config import PROBLEM_TYPES, AlbertConfig
from albertlm.model import AlbertModel, AlbertModelOutput, PreTrainedAlbert
from albertlm.pooling import mean_pool
from albertlm.vocab import IGNORE_INDEX


# ---------------------------------------------------------------------------- outputs
@dataclass
class SequenceClassifierOutput:
    loss: torch.Tensor | None = None
    """Mean loss over the batch (CE, MSE or BCE by problem type), when labels were given."""
    logits: torch.Tensor | None = None
    """[B, num_labels] (regression: [B, 1])."""
    hidden_states: tuple[torch.Tensor, ...] | None = None
    """As AlbertModelOutput.hidden_states."""


@dataclass
class TokenClassifierOutput:
    loss: torch.Tensor | None = None
    """Mean cross-entropy over the positions whose label is not -100."""
    logits: torch.Tensor | None = None
    """[B, S, num_labels]."""
    hidden_states: tuple[torch.Tensor, ...] | None = None


@dataclass
class QuestionAnsweringOutput:
    loss: torch.Tensor | None = None
    """(CE(start) + CE(end)) / 2, each a mean over the batch; positions outside the input are ignored."""
    start_logits: torch.Tensor | None = None
    """[B, S]: score of each position as the first token of the answer."""
    end_logits: torch.Tensor | None = None
    """[B, S]: score of each position as the last token of the answer."""
    hidden_states: tuple[torch.Tensor, ...] | None = None


@dataclass
class MultipleChoiceOutput:
    loss: torch.Tensor | None = None
    """Mean cross-entropy over the batch, the choices being the classes."""
    logits: torch.Tensor | None = None
    """[B, C]: one score per choice."""
    hidden_states: tuple[torch.Tensor, ...] | None = None


def resolve_problem_type(config: AlbertConfig, labels: torch.Tensor | None = None) -> str:
    """The loss a sequence classifier uses, by transformers' rule.

    `config.problem_type` when set; otherwise regression for num_labels == 1, single-label
    classification for integer labels, multi-label classification for float labels.
    """
    if config.problem_type is not None:
        if config.problem_type not in PROBLEM_TYPES:
            raise ValueError(f"problem_type {config.problem_type!r} is unknown; "
                             f"choose one of {', '.join(PROBLEM_TYPES)}")
        return config.problem_type
    if config.num_labels == 1:
        return "regression"
    if labels is None or labels.dtype in (torch.long, torch.int):
        return "single_label_classification"
    return "multi_label_classification"


def sequence_loss(config: AlbertConfig, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean loss of a sequence classifier by problem type: CE, MSE (regression) or BCE (multi-label).

    Args:
        config: gives num_labels and problem_type (`resolve_problem_type`).
        logits: [B, num_labels].
        labels: int [B] (single-label), float [B] (regression) or float [B, num_labels] (multi-label).
    Returns:
        A scalar, computed in fp32.
    """
    kind = resolve_problem_type(config, labels)
    if kind == "regression":
        # transformers squeezes both sides when there is one output: [B, 1] vs [B]
        pred = logits.squeeze(-1) if config.num_labels == 1 else logits
        return F.mse_loss(pred.float(), labels.reshape(pred.shape).float())
    if kind == "single_label_classification":
        return F.cross_entropy(logits.float().view(-1, config.num_labels), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


def token_loss(config: AlbertConfig, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of a token classifier, logits [B, S, num_labels] against labels [B, S]
    (-100 where nothing is scored)."""
    return F.cross_entropy(logits.float().view(-1, config.num_labels), labels.view(-1), ignore_index=IGNORE_INDEX)


# ---------------------------------------------------------------------------- sentence vectors
def has_pooler(config: AlbertConfig) -> bool:
    """Whether a sentence-level head of this config uses (and has) ALBERT's pooler."""
    return config.classifier_pooling == "cls"


def sentence_vector(config: AlbertConfig, out: AlbertModelOutput, attention_mask: torch.Tensor | None
                    ) -> torch.Tensor:
    """What a sentence-level head classifies, by `config.classifier_pooling`: the pooler's output
    tanh(Linear(h[CLS])) ("cls") or the mean of the last layer's real tokens ("mean"), [B, H]."""
    return out.pooler_output if has_pooler(config) else mean_pool(out.last_hidden_state, attention_mask)


@torch.no_grad()
def reinit_pooler(model: PreTrainedAlbert, generator: torch.Generator) -> None:
    """Draw the pooler of a sentence-level head afresh, as the official init does (weight N(0,
    initializer_range), bias 0), from `generator`; every other weight is left as it is. A pretrained
    pooler was trained for sentence order, not for the task (Zhang et al. 2021, "Revisiting
    few-sample BERT fine-tuning", re-initialise it).

    Raises:
        ValueError: the model has no pooler (token-level heads, mean pooling).
    """
    pooler = getattr(getattr(model, "albert", None), "pooler", None)
    if pooler is None:
        raise ValueError(f"{type(model).__name__} has no pooler to re-initialise")
    pooler.weight.normal_(0.0, model.config.initializer_range, generator=generator)
    pooler.bias.zero_()


# ---------------------------------------------------------------------------- sentence-level heads
class AlbertForSequenceClassification(PreTrainedAlbert):
    """Classification or regression from the pooled [CLS] vector (GLUE-style tasks), or from the mean
    of the tokens (`config.classifier_pooling`)."""

    unpads = True

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config, add_pooling_layer=has_pooler(config))
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_hidden_states: bool = False,
                unpad: bool = False) -> SequenceClassifierOutput:
        """Score a batch of sequences (or pairs).

        Args:
            input_ids, attention_mask, token_type_ids, position_ids: [B, S], as AlbertModel.forward.
            labels: int [B] class ids (single-label), float [B] targets (regression) or float
                [B, num_labels] 0/1 targets (multi-label).
            output_hidden_states: also return every layer's hidden state.
            unpad: run the encoder on the real tokens only (AlbertModel.forward): the same logits.
        Returns:
            SequenceClassifierOutput with logits [B, num_labels].
        """
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, unpad)
        logits = self.classifier(self.dropout(sentence_vector(self.config, out, attention_mask)))  # [B, num_labels]
        loss = sequence_loss(self.config, logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)


class AlbertForMultipleChoice(PreTrainedAlbert):
    """One score per (context, choice) pair from its pooled [CLS] vector (or its tokens' mean), softmax over
    the choices (RACE)."""

    unpads = True

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config, add_pooling_layer=has_pooler(config))
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)  # [1, H] whatever num_labels says
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_hidden_states: bool = False,
                unpad: bool = False) -> MultipleChoiceOutput:
        """Score every choice of a batch of questions.

        Args:
            input_ids, attention_mask, token_type_ids, position_ids: [B, C, S], one row per choice.
            labels: int [B], the index of the right choice.
            output_hidden_states: also return every layer's hidden state (over B*C rows).
            unpad: run the encoder on the real tokens only (AlbertModel.forward): the same logits.
        Returns:
            MultipleChoiceOutput with logits [B, C].
        """
        B, C, S = input_ids.shape

        def flat(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x.reshape(B * C, x.shape[-1])  # [B, C, S] -> [B*C, S]

        out = self.albert(flat(input_ids), flat(attention_mask), flat(token_type_ids),
                          flat(position_ids), output_hidden_states, unpad)
        pooled = sentence_vector(self.config, out, flat(attention_mask))  # [B*C, H]
        logits = self.classifier(self.dropout(pooled)).view(B, C)  # [B*C, 1] -> [B, C]
        loss = F.cross_entropy(logits.float(), labels.view(-1)) if labels is not None else None
        return MultipleChoiceOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)


# ---------------------------------------------------------------------------- token-level heads
class AlbertForTokenClassification(PreTrainedAlbert):
    """A label for every token (named-entity recognition); no pooler."""

    unpads = True

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_hidden_states: bool = False,
                unpad: bool = False) -> TokenClassifierOutput:
        """Tag every position.

        Args:
            input_ids, attention_mask, token_type_ids, position_ids: [B, S], as AlbertModel.forward.
            labels: int [B, S] tag ids, -100 where no tag is scored (special tokens, padding,
                non-first pieces of a word).
            output_hidden_states: also return every layer's hidden state.
            unpad: run the encoder on the real tokens only (AlbertModel.forward): the same logits at
                real tokens and the same loss (padding is never scored); the classifier's bias alone at
                padded positions.
        Returns:
            TokenClassifierOutput with logits [B, S, num_labels].
        """
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, unpad)
        logits = self.classifier(self.dropout(out.last_hidden_state))  # [B, S, num_labels]
        loss = token_loss(self.config, logits, labels) if labels is not None else None
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)


class AlbertForQuestionAnswering(PreTrainedAlbert):
    """Extractive QA (SQuAD): start and end logits of the answer span at every position; no pooler."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        if config.num_labels != 2:
            raise ValueError(f"AlbertForQuestionAnswering needs num_labels == 2 (start, end), got {config.num_labels}")
        self.config = config
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                start_positions: torch.Tensor | None = None, end_positions: torch.Tensor | None = None,
                output_hidden_states: bool = False) -> QuestionAnsweringOutput:
        """Score every position as the start and the end of the answer.

        Args:
            input_ids, attention_mask, token_type_ids, position_ids: [B, S], as AlbertModel.forward.
            start_positions, end_positions: int [B], the answer's first and last token; 0 ([CLS])
                for "no answer" (SQuAD 2.0). Values outside [0, S) are ignored, as in transformers.
            output_hidden_states: also return every layer's hidden state.
        Returns:
            QuestionAnsweringOutput with start_logits and end_logits [B, S].
        """
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states)
        logits = self.qa_outputs(out.last_hidden_state)  # [B, S, 2]
        start_logits, end_logits = (t.squeeze(-1) for t in logits.split(1, dim=-1))  # [B, S] each
        loss = None
        if start_positions is not None and end_positions is not None:
            ignored = start_logits.shape[1]  # transformers' convention: clamp to S, then ignore S
            start = start_positions.view(-1).clamp(0, ignored)
            end = end_positions.view(-1).clamp(0, ignored)
            loss = (F.cross_entropy(start_logits.float(), start, ignore_index=ignored)
                    + F.cross_entropy(end_logits.float(), end, ignore_index=ignored)) / 2
        return QuestionAnsweringOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                       hidden_states=out.hidden_states)


# Keyed by class name (the `architectures` entry of config.json), as transformers names them.
HEADS: dict[str, type[PreTrainedAlbert]] = {
    cls.__name__: cls for cls in (AlbertForSequenceClassification, AlbertForTokenClassification,
                                  AlbertForQuestionAnswering, AlbertForMultipleChoice)
}
