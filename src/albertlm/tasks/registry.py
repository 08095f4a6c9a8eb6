"""Task names → reader, label set, metric and default recipe (paper Table 14 where the paper has one).

A `TaskSpec` says where a task's files are and how to read and score them; its `Family` says how
examples become features for which head and how the head's outputs become predictions. The
training recipe (train/finetune.py) needs nothing else to fine-tune and evaluate any task:

    spec = get_task("sst-2")
    examples = spec.read(data_dir, "dev")
    features = spec.family.featurize(spec, examples, tokenizer, labels, settings, train=False)
    ...  # run spec.family.head over the features
    predictions = spec.family.predict(spec, examples, features, outputs, labels, settings)
    spec.metric(examples, predictions)   # e.g. {"accuracy": 0.91}

Tasks without a Table 14 row (the Chinese sets, NER, CMRC 2018, generic files) get albertlm's
defaults: lr 2e-5, batch 32, no ALBERT dropout, classifier dropout 0.1, 3 epochs, 10% warmup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albertlm.errors import AlbertlmError
from albertlm.tasks import glue, metrics, multiple_choice, ner, squad
from albertlm.tasks.common import Feature, find_file
from albertlm.tasks.glue import Columns


@dataclass(frozen=True)
class PaperRecipe:
    """One row of the paper's Table 14 (or albertlm's default for tasks the paper does not list)."""

    lr: float = 2e-5
    batch_size: int = 32
    dropout: float = 0.0
    """ALBERT (hidden and attention) dropout."""
    classifier_dropout: float = 0.1
    steps: int | None = None
    """Optimizer steps; None: `epochs` passes over the training set."""
    warmup_steps: int | None = None
    """None: 10% of the steps."""
    max_seq_length: int = 128
    epochs: float = 3.0
    source: str = "albertlm default"
    """"Table 14" for the paper's rows."""


def _t14(lr: float, batch: int, dropout: float, steps: int, warmup: int, max_len: int = 512) -> PaperRecipe:
    return PaperRecipe(lr, batch, dropout, 0.1, steps, warmup, max_len, source="Table 14")


# ---------------------------------------------------------------------------- families
@dataclass(frozen=True)
class Family:
    """How one shape of task meets one head: everything that differs between the shapes lives here,
    so callers never branch on the family's name and a new family touches this file only."""

    name: str
    head: str
    """Head class name (heads.HEADS, and transformers' class of the same name)."""
    featurize: Callable[..., list[Feature]]
    """(spec, examples, tokenizer, labels, settings, train) -> features."""
    predict: Callable[..., list]
    """(spec, examples, features, outputs, labels, settings) -> one prediction per example; outputs
    maps each name of `outputs` to one array per feature."""
    write: Callable[[Path, Sequence, Sequence], None]
    """(path, examples, predictions): the task's usual prediction file."""
    parse_line: Callable[[int, str, Any], Any]
    """(index, raw input line, tokenizer) -> one example, for `albertlm predict`."""
    results: Callable[..., list[dict[str, Any]]]
    """(spec, examples, features, outputs, labels, settings) -> one result per example, what `albertlm
    predict` prints: {"label", "probability"} (single-label), {"labels"} (multi-label), {"score"}
    (regression), {"words", "tags"} (NER), {"answer"} (QA, "" for none), {"choice", "option"} (multiple
    choice)."""
    line: Callable[[dict[str, Any]], str]
    """One result (`results`) as the line `albertlm predict` prints."""
    label_names: Callable[[Sequence], list[str]] | None = None
    """Training examples -> class or tag names in id order; None: the head has no label set (QA,
    multiple choice)."""
    outputs: tuple[str, ...] = ("logits",)
    """Head output fields post-processing reads."""
    per_position: bool = False
    """Outputs have a sequence axis (trimmed to each feature's length)."""
    token_level: bool = False
    """The loss is averaged over labelled tokens rather than examples."""
    sets_problem_type: bool = False
    """The head's config carries the task's problem_type (sequence classification)."""
    suffix: str = ".tsv"
    """Extension of the predictions file."""
    recorded: tuple[tuple[str, str], ...] = ()
    """(key, value) pairs fine-tuning writes into results.json: how `predict` read the outputs where
    there is a choice (a tagger's tag_decoding)."""


def _parse_json_line(index: int, line: str, keys: tuple[str, ...]) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        record = None
    if not isinstance(record, dict) or any(k not in record for k in keys):
        raise AlbertlmError(f"line {index + 1}: expected a JSON object with {', '.join(keys)}, got {line[:60]!r}")
    return record


def _cls_line(index: int, line: str, tokenizer) -> glue.TextExample:
    return glue.TextExample(str(index), *(line.split("\t", 1) + [None])[:2])


def _cls_results(spec, examples, features, outputs, labels, settings) -> list[dict[str, Any]]:
    import numpy as np

    if spec.problem_type == "single_label_classification":  # the label and its probability
        logits = np.stack(outputs["logits"])
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        return [{"label": labels[j], "probability": float(p[j])} for j, p in zip(probs.argmax(-1), probs)]
    preds = _cls_predict(spec, examples, features, outputs, labels, settings)
    key = "score" if spec.problem_type == "regression" else "labels"
    return [{key: p} for p in preds]


def _cls_text(result: dict[str, Any]) -> str:
    if "probability" in result:
        return f"{result['label']}\t{result['probability']:.4f}"
    return ",".join(result["labels"]) if "labels" in result else f"{result['score']:.4f}"


def _cls_labels(examples: Sequence) -> list[str]:
    names = {n for e in examples for n in (e.label if isinstance(e.label, list) else [e.label])}
    return sorted(n for n in names if n is not None)


def _qa_line(index: int, line: str, tokenizer) -> squad.SquadExample:
    if line.lstrip().startswith("{"):
        record = _parse_json_line(index, line, ("question", "context"))
        return squad.SquadExample(str(index), record["question"], record["context"])
    if "\t" not in line:
        raise AlbertlmError(f"line {index + 1}: expected question<TAB>context or JSON {{question, context}}")
    question, context = line.split("\t", 1)
    return squad.SquadExample(str(index), question, context)


def _choice_line(index: int, line: str, tokenizer) -> multiple_choice.ChoiceExample:
    record = _parse_json_line(index, line, ("question", "options"))
    return multiple_choice.ChoiceExample(str(index), record.get("context", record.get("article", "")),
                                         record["question"], list(record["options"]))


def _choice_results(spec, examples, features, outputs, labels, settings) -> list[dict[str, Any]]:
    preds = multiple_choice.choice_predictions(outputs["logits"])
    return [{"choice": multiple_choice.LETTERS[p], "option": e.options[p]} for e, p in zip(examples, preds)]


def _choice_text(result: dict[str, Any]) -> str:
    return f"{result['choice']}\t{result['option']}"


def _ner_line(index: int, line: str, tokenizer) -> ner.TokenExample:
    from albertlm.tasks.common import split_words

    return ner.TokenExample(str(index), [w for w, _ in split_words(line, tokenizer.chinese)] or ["."])


def _ner_results(spec, examples, features, outputs, labels, settings) -> list[dict[str, Any]]:
    preds = ner.ner_predictions(examples, features, outputs["logits"], labels)
    return [{"words": list(e.tokens), "tags": list(p)} for e, p in zip(examples, preds)]


def _ner_text(result: dict[str, Any]) -> str:
    return " ".join(f"{w}/{t}" for w, t in zip(result["words"], result["tags"]))


def _cls_features(spec, examples, tokenizer, labels, settings, train):
    return glue.classification_features(examples, tokenizer, labels, spec.problem_type, settings)


def _cls_predict(spec, examples, features, outputs, labels, settings):
    import numpy as np

    return glue.classification_predictions(np.stack(outputs["logits"]), labels, spec.problem_type)


class QAAnswers(list):
    """Predicted answer texts ("" = no answer) that also carry, per question, the no-answer score
    (null score minus the best span's): what the SQuAD 2.0 best-threshold search sweeps over."""

    def __init__(self, answers: list[str], no_answer_scores: list[float]):
        super().__init__(answers)
        self.no_answer_scores = no_answer_scores


def _qa_predict(spec, examples, features, outputs, labels, settings):
    answers, odds = squad.squad_predictions(examples, features, outputs["start_logits"], outputs["end_logits"],
                                            settings, version2=spec.version2 or squad.is_version2(examples))
    return QAAnswers(answers, odds)


def _qa_results(spec, examples, features, outputs, labels, settings) -> list[dict[str, Any]]:
    return [{"answer": a} for a in _qa_predict(spec, examples, features, outputs, labels, settings)]


FAMILIES = {
    "classification": Family("classification", "AlbertForSequenceClassification", _cls_features, _cls_predict,
                             glue.write_predictions, _cls_line, _cls_results, _cls_text, label_names=_cls_labels,
                             sets_problem_type=True),
    "qa": Family("qa", "AlbertForQuestionAnswering",
                 lambda spec, ex, tok, labels, settings, train: squad.squad_features(ex, tok, settings, train),
                 _qa_predict, squad.write_predictions, _qa_line, _qa_results, lambda result: result["answer"],
                 outputs=("start_logits", "end_logits"), per_position=True, suffix=".json"),
    "multiple_choice": Family(
        "multiple_choice", "AlbertForMultipleChoice",
        lambda spec, ex, tok, labels, settings, train: multiple_choice.choice_features(ex, tok, settings),
        lambda spec, ex, f, out, labels, settings: multiple_choice.choice_predictions(out["logits"]),
        multiple_choice.write_predictions, _choice_line, _choice_results, _choice_text, suffix=".json"),
    "ner": Family("ner", "AlbertForTokenClassification",
                  lambda spec, ex, tok, labels, settings, train: ner.ner_features(ex, tok, labels, settings),
                  lambda spec, ex, f, out, labels, settings: ner.ner_predictions(ex, f, out["logits"], labels),
                  ner.write_predictions, _ner_line, _ner_results, _ner_text, label_names=ner.tag_list,
                  per_position=True, token_level=True, suffix=".txt",
                  recorded=(("tag_decoding", ner.DECODINGS[0]),)),  # ner_predictions' default
}


def family_of_head(head: str) -> Family:
    """The family whose head class is `head` (a fine-tuned directory's architecture)."""
    for family in FAMILIES.values():
        if family.head == head:
            return family
    raise AlbertlmError(f"no task family uses the head {head}")


# ---------------------------------------------------------------------------- metrics
def _golds(examples) -> list:
    return [e.label for e in examples]


def _accuracy(examples, preds) -> dict[str, float]:
    return {"accuracy": metrics.accuracy(preds, _golds(examples))}


def _f1_accuracy(examples, preds) -> dict[str, float]:
    return {"f1": metrics.f1_binary(preds, _golds(examples), positive="1"), **_accuracy(examples, preds)}


def _mcc(examples, preds) -> dict[str, float]:
    return {"mcc": metrics.matthews_corrcoef(preds, _golds(examples)), **_accuracy(examples, preds)}


def _correlations(examples, preds) -> dict[str, float]:
    golds = _golds(examples)
    return {"pearson": metrics.pearson(preds, golds), "spearman": metrics.spearman(preds, golds)}


def _multilabel(examples, preds) -> dict[str, float]:
    exact = metrics.accuracy([tuple(sorted(p)) for p in preds], [tuple(sorted(g)) for g in _golds(examples)])
    tp = sum(len(set(p) & set(g)) for p, g in zip(preds, _golds(examples)))
    npred, ngold = sum(len(p) for p in preds), sum(len(g) for g in _golds(examples))
    f1 = 2 * tp / (npred + ngold) if npred + ngold else 0.0  # micro F1 over (example, label) pairs
    return {"micro_f1": f1, "exact_match": exact}


def _squad_v11(examples, preds) -> dict[str, float]:
    return metrics.squad_scores({e.qid: p for e, p in zip(examples, preds)},
                                {e.qid: [a for a, _ in e.answers] for e in examples}, version="1.1")


def _squad_v20(examples, preds) -> dict[str, float]:
    predictions = {e.qid: p for e, p in zip(examples, preds)}
    references = {e.qid: [a for a, _ in e.answers] for e in examples}
    scores = metrics.squad_scores(predictions, references, version="2.0")
    odds = getattr(preds, "no_answer_scores", None)
    if odds is not None:  # the official script's search over no-answer thresholds
        scores.update(metrics.squad_best_thresholds(predictions, references,
                                                    {e.qid: o for e, o in zip(examples, odds)}))
    return scores


def _cmrc(examples, preds) -> dict[str, float]:
    return metrics.cmrc_scores({e.qid: p for e, p in zip(examples, preds)},
                               {e.qid: [a for a, _ in e.answers] for e in examples})


def _race(examples, preds) -> dict[str, float]:
    return {"accuracy": metrics.accuracy(preds, [e.label for e in examples])}


def _entities(examples, preds) -> dict[str, float]:
    return metrics.entity_scores(preds, [e.tags for e in examples])


# ---------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class TaskSpec:
    """Everything task-specific about a fine-tuning task."""

    name: str
    family: Family
    description: str
    files: dict[str, tuple[str, ...]]
    """Split → candidate file names inside the data directory, first found wins."""
    reader: Callable[..., list]
    """(path, split, strict) -> examples."""
    metric: Callable[[Sequence, Sequence], dict[str, float]]
    main_metric: str
    """The metric the best checkpoint is chosen by (higher is better)."""
    recipe: PaperRecipe = field(default_factory=PaperRecipe)
    problem_type: str = "single_label_classification"
    labels: tuple[str, ...] | None = None
    """Fixed class names (their order gives the ids); None: read from labels_file or the training set."""
    labels_file: str | None = None
    version2: bool = False
    """QA: unanswerable questions exist (SQuAD 2.0)."""
    pair_positive: str | None = None
    """Sentence-pair classification: the label that marks a pair as alike (a paraphrase, an entailment, the
    same question), which the embedding objectives and their evaluation take as a positive pair
    (tasks/pairs.py); None: the labels say nothing about similarity."""

    @classmethod
    def for_prediction(cls, family: Family, problem_type: str) -> TaskSpec:
        """A spec for predicting from raw lines with a fine-tuned head: no files, no metric."""
        def no_reader(path, split, strict):
            raise AlbertlmError("a prediction spec reads no data files")

        return cls("predict", family, "predictions from raw input lines", {}, no_reader, lambda ex, preds: {}, "",
                   problem_type=problem_type)

    def read(self, data_dir: str | Path, split: str, strict: bool = False) -> list:
        """The examples of one split ("train", "dev" or "test"); `data_dir` may also be the file itself."""
        if split not in self.files:
            raise AlbertlmError(f"task {self.name} has no {split!r} split (it has {', '.join(self.files)})")
        return self.reader(find_file(data_dir, self.files[split], split), split, strict)

    def fixed_labels(self, data_dir: str | Path | None) -> list[str] | None:
        """The class names in id order when the task fixes them (its own list, or its labels file in
        `data_dir`); None when its training data decides them, or it has none (regression, QA, ...)."""
        if self.problem_type == "regression" or self.family.label_names is None:
            return None
        if self.labels is not None:
            return list(self.labels)
        if self.labels_file and data_dir is not None and (Path(data_dir) / self.labels_file).is_file():
            return glue.read_tnews_labels(Path(data_dir) / self.labels_file)
        return None

    def label_list(self, data_dir: str | Path | None, train_examples: Sequence | None) -> list[str] | None:
        """Class or tag names in id order (None for regression and for QA / multiple choice)."""
        if self.problem_type == "regression" or self.family.label_names is None:
            return None
        fixed = self.fixed_labels(data_dir)
        if fixed is not None:
            return fixed
        if not train_examples:
            raise AlbertlmError(f"task {self.name}: the label set comes from the training data; none given")
        return self.family.label_names(train_examples)


_SPLITS = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}
_TABLE_SPLITS = {s: tuple(f"{n}.{ext}" for n in names for ext in ("tsv", "csv", "jsonl", "json", "txt"))
                 for s, names in (("train", ("train",)), ("dev", ("dev", "validation", "valid")), ("test", ("test",)))}


def _table(columns: Columns, kind: str = "single_label_classification", labels: Sequence[str] | None = None,
           json_columns: Columns | None = None, transform=None):
    def reader(path: Path, split: str, strict: bool) -> list:
        cols = json_columns if json_columns is not None and path.suffix in (".json", ".jsonl") else columns
        return glue.read_table(path, cols, kind=kind, labels=labels, split=split, strict=strict, transform=transform)
    return reader


def _glue(name, description, columns, metric, main, recipe, labels=("0", "1"), kind="single_label_classification",
          files=_SPLITS, positive: str | None = None) -> TaskSpec:
    return TaskSpec(name, FAMILIES["classification"], description, files,
                    _table(columns, kind, labels if kind != "regression" else None), metric, main, recipe, kind,
                    labels if kind != "regression" else None, pair_positive=positive)


ENTAIL = ("entailment", "not_entailment")
TASKS: dict[str, TaskSpec] = {t.name: t for t in [
    # GLUE (paper Table 14)
    _glue("cola", "CoLA: grammatical acceptability (no header: source, label, judgement, sentence)",
          Columns(text_a=3, label=1, header=False), _mcc, "mcc", _t14(1e-5, 16, 0.0, 5336, 320)),
    _glue("sst-2", "SST-2: sentiment of movie-review sentences", Columns("sentence"), _accuracy, "accuracy",
          _t14(1e-5, 32, 0.0, 20935, 1256)),
    _glue("mrpc", "MRPC: paraphrase pairs", Columns("#1 String", "#2 String", "Quality"), _f1_accuracy, "f1",
          _t14(2e-5, 32, 0.0, 800, 200), positive="1"),
    _glue("sts-b", "STS-B: semantic similarity score 0-5 (regression)", Columns("sentence1", "sentence2", "score"),
          _correlations, "pearson", _t14(2e-5, 16, 0.0, 3598, 214), kind="regression"),
    _glue("qqp", "QQP: duplicate question pairs", Columns("question1", "question2", "is_duplicate"), _f1_accuracy,
          "accuracy", _t14(5e-5, 128, 0.1, 14000, 1000), positive="1"),
    _glue("mnli", "MNLI matched: entailment / neutral / contradiction", Columns("sentence1", "sentence2", "gold_label"),
          _accuracy, "accuracy", _t14(3e-5, 128, 0.0, 10000, 1000), labels=("contradiction", "entailment", "neutral"),
          files={"train": ("train.tsv",), "dev": ("dev_matched.tsv",), "test": ("test_matched.tsv",)},
          positive="entailment"),
    _glue("mnli-mm", "MNLI mismatched", Columns("sentence1", "sentence2", "gold_label"), _accuracy, "accuracy",
          _t14(3e-5, 128, 0.0, 10000, 1000), labels=("contradiction", "entailment", "neutral"),
          files={"train": ("train.tsv",), "dev": ("dev_mismatched.tsv",), "test": ("test_mismatched.tsv",)},
          positive="entailment"),
    _glue("qnli", "QNLI: does the sentence answer the question", Columns("question", "sentence"), _accuracy,
          "accuracy", _t14(1e-5, 32, 0.0, 33112, 1986), labels=ENTAIL, positive="entailment"),
    _glue("rte", "RTE: textual entailment", Columns("sentence1", "sentence2"), _accuracy, "accuracy",
          _t14(3e-5, 32, 0.1, 800, 200), labels=ENTAIL, positive="entailment"),
    _glue("wnli", "WNLI: Winograd entailment", Columns("sentence1", "sentence2"), _accuracy, "accuracy",
          _t14(2e-5, 16, 0.1, 2000, 250)),
    # Chinese sentence (pair) classification (not in the paper)
    _glue("chnsenticorp", "ChnSentiCorp: Chinese review sentiment (TSV label, text_a)", Columns("text_a"), _accuracy,
          "accuracy", PaperRecipe(max_seq_length=256), files={**_SPLITS}),
    TaskSpec("lcqmc", FAMILIES["classification"], "LCQMC: Chinese question matching (TSV, no header)",
             {s: (f"{s}.txt", f"{s}.tsv", f"{s}.json") for s in ("train", "dev", "test")},
             _table(Columns(0, 1, 2, header=False), labels=("0", "1"),
                    json_columns=Columns("sentence1", "sentence2", "label")),
             _accuracy, "accuracy", PaperRecipe(), labels=("0", "1"), pair_positive="1"),
    TaskSpec("afqmc", FAMILIES["classification"], "AFQMC: Chinese financial question matching (TSV or CLUE JSON lines)",
             {s: (f"{s}.json", f"{s}.txt", f"{s}.tsv") for s in ("train", "dev", "test")},
             _table(Columns(0, 1, 2, header=False), labels=("0", "1"),
                    json_columns=Columns("sentence1", "sentence2", "label")),
             _accuracy, "accuracy", PaperRecipe(), labels=("0", "1"), pair_positive="1"),
    TaskSpec("tnews", FAMILIES["classification"], "TNEWS: Chinese news titles, 15 classes (TSV sentence, label_desc "
             "or CLUE JSON lines; labels.json)",
             {s: (f"{s}.json", f"{s}.tsv") for s in ("train", "dev", "test")},
             _table(Columns(0, label=1, header=False), json_columns=Columns("sentence", label="label_desc")),
             _accuracy, "accuracy", PaperRecipe(), labels_file="labels.json"),
    # question answering
    TaskSpec("squad-v1.1", FAMILIES["qa"], "SQuAD 1.1 extractive QA",
             {"train": ("train-v1.1.json", "train.json"), "dev": ("dev-v1.1.json", "dev.json")},
             lambda path, split, strict: squad.read_squad(path, strict), _squad_v11, "f1",
             PaperRecipe(5e-5, 48, 0.0, 0.1, 3649, 365, 384, source="Table 14")),
    TaskSpec("squad-v2.0", FAMILIES["qa"], "SQuAD 2.0 extractive QA with unanswerable questions",
             {"train": ("train-v2.0.json", "train.json"), "dev": ("dev-v2.0.json", "dev.json")},
             lambda path, split, strict: squad.read_squad(path, strict), _squad_v20, "f1",
             _t14(3e-5, 48, 0.0, 8144, 814), version2=True),
    TaskSpec("cmrc2018", FAMILIES["qa"], "CMRC 2018 Chinese extractive QA (SQuAD format)",
             {"train": ("cmrc2018_train.json", "train.json"), "dev": ("cmrc2018_dev.json", "dev.json"),
              "test": ("cmrc2018_trial.json", "test.json")},
             lambda path, split, strict: squad.read_squad(path, strict), _cmrc, "f1",
             PaperRecipe(3e-5, 32, max_seq_length=512)),
    # multiple choice
    TaskSpec("race", FAMILIES["multiple_choice"], "RACE reading comprehension (dirs of JSON articles, or JSON files)",
             {s: (s, f"{s}.json", f"{s}.jsonl") for s in ("train", "dev", "test")},
             lambda path, split, strict: multiple_choice.read_race(path, strict), _race, "accuracy",
             _t14(2e-5, 32, 0.1, 12000, 1000)),
    # named-entity recognition
    TaskSpec("conll2003", FAMILIES["ner"], "CoNLL-2003 English NER (IOB1 → BIO)",
             {"train": ("eng.train", "train.txt"), "dev": ("eng.testa", "valid.txt", "dev.txt"),
              "test": ("eng.testb", "test.txt")},
             lambda path, split, strict: ner.read_conll(path, strict=strict), _entities, "f1"),
    TaskSpec("msra-ner", FAMILIES["ner"], "MSRA Chinese NER (char<TAB>BIO); its test file doubles as dev",
             {"train": ("msra_train_bio.gz", "msra_train_bio", "train.txt"),
              "dev": ("msra_dev_bio", "msra_test_bio", "dev.txt"), "test": ("msra_test_bio", "test.txt")},
             lambda path, split, strict: ner.read_conll(path, strict=strict), _entities, "f1",
             PaperRecipe(max_seq_length=256)),
    TaskSpec("weibo-ner", FAMILIES["ner"], "Weibo Chinese NER (char+segment position<TAB>BIO)",
             {s: (f"weiboNER_2nd_conll.{s}", f"{s}.txt") for s in ("train", "dev", "test")},
             lambda path, split, strict: ner.read_conll(path, strip_segpos=True, strict=strict), _entities, "f1"),
    TaskSpec("cluener", FAMILIES["ner"], "CLUENER 2020 Chinese fine-grained NER (JSON lines)",
             {s: (f"{s}.json",) for s in ("train", "dev", "test")},
             lambda path, split, strict: ner.read_cluener(path, strict), _entities, "f1"),
]}
ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "squad1": "squad-v1.1", "squad": "squad-v1.1", "squad2": "squad-v2.0",
           "conll": "conll2003", "conll03": "conll2003", "msra": "msra-ner", "weibo": "weibo-ner", "cmrc": "cmrc2018"}
GENERIC = ("classification", "regression", "multilabel", "ner-conll")


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_INDEX = {**{_key(a): t for a, t in ALIASES.items()}, **{_key(n): n for n in TASKS}}


def generic_task(kind: str, text_column: str = "text", text_pair_column: str | None = None,
                 label_column: str = "label", labels: Sequence[str] | None = None) -> TaskSpec:
    """A task over generic files `train.*`, `dev.*` (or validation.*), `test.*` in the data directory.

    Args:
        kind: classification, regression or multilabel (TSV/CSV with a header, or JSON lines, with
            named columns), or ner-conll (token-per-line files `train.txt`, `dev.txt`, BIO or IOB1).
        text_column, text_pair_column, label_column: column names.
        labels: the class names in id order (default: sorted names seen in training).
    """
    if kind == "ner-conll":
        return TaskSpec("ner-conll", FAMILIES["ner"], "generic CoNLL-style NER (token ... tag per line)",
                        {s: (f"{s}.txt", f"{s}.conll", f"{s}.bio") for s in ("train", "dev", "test")},
                        lambda path, split, strict: ner.read_conll(path, strict=strict), _entities, "f1")
    problem = {"classification": "single_label_classification", "regression": "regression",
               "multilabel": "multi_label_classification"}.get(kind)
    if problem is None:
        raise AlbertlmError(f"unknown generic task {kind!r}; choose one of {', '.join(GENERIC)}")
    cols = Columns(text_column, text_pair_column, label_column)
    metric, main = {"regression": (_correlations, "pearson"), "multi_label_classification": (_multilabel, "micro_f1")
                    }.get(problem, (_accuracy, "accuracy"))
    return TaskSpec(kind, FAMILIES["classification"], f"generic {kind} over named columns", _TABLE_SPLITS,
                    _table(cols, problem, labels), metric, main, PaperRecipe(), problem,
                    tuple(labels) if labels else None)


def get_task(name: str, **generic_options: Any) -> TaskSpec:
    """The task called `name` (case, '-', '_' and '.' are ignored; see TASKS, ALIASES, GENERIC).

    Args:
        name: a task name.
        **generic_options: column names for the generic tasks (see `generic_task`).
    """
    if _key(name) in {_key(g) for g in GENERIC}:
        kind = next(g for g in GENERIC if _key(g) == _key(name))
        return generic_task(kind, **{k: v for k, v in generic_options.items() if v is not None})
    if _key(name) not in _INDEX:
        raise AlbertlmError(f"unknown task {name!r}; choose one of {', '.join([*TASKS, *GENERIC])}")
    return TASKS[_INDEX[_key(name)]]


def task_table() -> str:
    """A text table of the registered tasks: name, family, main metric, recipe source, description."""
    rows = [(t.name, t.family.name, t.main_metric, t.recipe.source, t.description) for t in TASKS.values()]
    rows += [(g, "ner" if g == "ner-conll" else "classification", "", "albertlm default",
              "generic files, named columns") for g in GENERIC]
    width = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], width)) + "  " + r[4] for r in rows)
