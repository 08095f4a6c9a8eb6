"""Count-based baselines: what scikit-learn fits in seconds on a task's training split, scored on dev.

Every task is read through albertlm's own readers and scored with the task's own metric
(`spec.metric`), so a baseline's score is what `albertlm evaluate` would print for a model making
the same predictions. Nothing is tuned on dev: every hyperparameter below is fixed in advance.

    classification   majority      the most frequent training label, for every dev example
    (single text     naive_bayes   multinomial Naive Bayes (alpha 1) on uni+bigram counts
     or a pair)      tfidf_lr      logistic regression (C 1, L2) on tf-idf uni+bigrams
    regression       mean          the mean training score (constant: correlation undefined)
    (STS-B)          tfidf_cosine  cosine of the two texts' tf-idf uni+bigram vectors; no fitting
                                   beyond the vectorizer, whose vocabulary and idf come from the
                                   training texts
                     ridge         ridge regression (alpha 1, standardized inputs) on 4 pair
                                   features: word tf-idf cosine, character 2-4-gram tf-idf cosine,
                                   word-set Jaccard overlap, relative length difference
    NER              all_o         every token O (entity F1 0 by definition: the floor)
                     lookup        each token gets its most frequent training tag (ties: O first,
                                   then by name); tokens never seen in training get O
                     type_lookup   each token gets its most frequent entity type, B/I ignored
                                   (ties: O first); a run of tokens of one type is one entity
                                   (B- then I-), so a name is not cut where its words' B/I
                                   positions disagree (two adjacent entities of a type merge)

Units of text: English text is lower-cased and split into words (`\\w+` with inner apostrophes,
so "n't" and "it's" stay whole) and punctuation marks; text that `looks_chinese` (albertlm's own
detection: most characters are CJK ideographs) is split into characters. Bigrams join adjacent
units of one text. A pair (MRPC, RTE, AFQMC ...) is one bag: the n-grams of the first text, those
of the second, and once more, marked apart, the n-grams the two texts share, so that a count model
can see overlap at all.

scikit-learn is an optional extra (`pip install 'albertlm[bench]'`), never a runtime dependency:
it is imported inside the functions that fit, and `sklearn_missing()` says whether it is there.
`embedding_baseline` is the tf-idf cosine of the sentence-vector metrics (tasks/pairs.py: STS Spearman,
pair accuracy at the best threshold, retrieval), fitted on the training text alone; `embedding_baseline_scores`
runs it on a task folder (benchmarks/baselines.py --embedding, experiments/embedding_eval.py), and
`embedding_headline` shows it beside an embedder trained without a pretrained model.
`score_baselines(spec, train, dev)` fits and scores every baseline of a task on given examples (raw
metrics, as fine-tuning's results hold them); `baseline_scores(task, data_dir)` reads a task folder
and reports x100 (benchmarks/baselines.py); `headline(spec, scored)` picks the family's strongest
simple baseline and its floor, for showing beside a fine-tuned model's dev score.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.tasks.registry import TaskSpec, get_task
from albertlm.tokenizer import looks_chinese

INSTALL = "pip install 'albertlm[bench]'"
"""How to get scikit-learn, the extra the baselines need."""

BASELINES = {
    "majority": "most frequent training label",
    "naive_bayes": "multinomial Naive Bayes, uni+bigram counts",
    "tfidf_lr": "logistic regression, tf-idf uni+bigrams",
    "mean": "mean training score (constant)",
    "tfidf_cosine": "tf-idf uni+bigram cosine of the two texts, no fitting",
    "ridge": "ridge on 4 pair features (word and char tf-idf cosine, Jaccard, length difference)",
    "all_o": "every token O",
    "lookup": "per-token most frequent training tag, unseen O",
    "type_lookup": "per-token most frequent entity type, runs of one type joined, unseen O",
}
COUNTS = ("entities", "total")  # metrics that are counts, not fractions (reported as they are)
SPLIT = "dev"

_WORD_RE = re.compile(r"\w+(?:'\w+)*|[^\w\s]")


def sklearn_missing() -> str | None:
    """None when scikit-learn can be imported; else one line saying how to install it."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return f"scikit-learn is not installed: {INSTALL} for the count-based baselines"
    return None


def require_sklearn() -> None:
    """Import scikit-learn's fitting modules now (so no baseline's fit time includes the import), or refuse."""
    note = sklearn_missing()
    if note:
        raise AlbertlmError(note)
    import sklearn.feature_extraction.text  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import sklearn.naive_bayes  # noqa: F401
    import sklearn.pipeline  # noqa: F401
    import sklearn.preprocessing  # noqa: F401


# ---------------------------------------------------------------------------- text to n-grams
def units(text: str, chinese: bool) -> list[str]:
    """The text's units: characters (Chinese) or lower-cased words and punctuation marks."""
    text = text.lower()
    return [ch for ch in text if not ch.isspace()] if chinese else _WORD_RE.findall(text)


def ngrams(text: str, chinese: bool) -> list[str]:
    """Unigrams and bigrams of one text (a bigram joins two adjacent units with a space)."""
    u = units(text, chinese)
    return u + [f"{a} {b}" for a, b in zip(u, u[1:])]


def bag(example, chinese: bool) -> list[str]:
    """One example's n-grams; a pair's are both texts' plus, prefixed "&", the ones they share."""
    grams = ngrams(example.text_a, chinese)
    if example.text_b is None:
        return grams
    second = ngrams(example.text_b, chinese)
    shared = sorted(set(grams) & set(second))
    return grams + second + ["&" + g for g in shared]


def _given(doc: list[str]) -> list[str]:
    """The analyzer for documents that are already n-gram lists (a named function: picklable)."""
    return doc


def example_texts(examples: Sequence) -> Iterator[str]:
    """The raw text of examples: each text of a sentence (pair), a tagged sentence's tokens joined by spaces."""
    for e in examples:
        if hasattr(e, "tokens"):
            yield " ".join(e.tokens)
        else:
            yield e.text_a
            if e.text_b:
                yield e.text_b


def is_chinese(examples: Sequence) -> bool:
    """The task's language, from its training text (the first 2,000 examples)."""
    return looks_chinese(example_texts(examples[:2000]))


# ---------------------------------------------------------------------------- baselines per family
def _timed(fit: Callable[[], Callable[[], list]]) -> tuple[list, float]:
    """(predictions, fit seconds): `fit` fits on train and returns the dev predictor."""
    start = time.perf_counter()
    predict = fit()
    seconds = time.perf_counter() - start
    return predict(), seconds


def _majority(train: Sequence) -> str:
    counts = Counter(e.label for e in train)
    return min(counts, key=lambda label: (-counts[label], label))


def tfidf_lr():
    """The `tfidf_lr` baseline unfitted: a scikit-learn pipeline of tf-idf over `bag` n-gram lists and
    logistic regression (C 1, L2); fit it on `[bag(e, chinese) for e in train]` and the labels."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    return make_pipeline(TfidfVectorizer(analyzer=_given), LogisticRegression(C=1.0, max_iter=2000))


def classification_baselines(train: Sequence, dev: Sequence, chinese: bool) -> dict[str, tuple[list, float]]:
    """{baseline: (dev predictions, fit seconds)} for single-label classification."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.pipeline import make_pipeline

    labels = [e.label for e in train]

    def majority():
        label = _majority(train)
        return lambda: [label] * len(dev)

    def fitted(pipeline):
        def fit():
            pipe = pipeline.fit([bag(e, chinese) for e in train], labels)
            return lambda: list(pipe.predict([bag(e, chinese) for e in dev]))
        return fit

    return {"majority": _timed(majority),
            "naive_bayes": _timed(fitted(make_pipeline(CountVectorizer(analyzer=_given), MultinomialNB(alpha=1.0)))),
            "tfidf_lr": _timed(fitted(tfidf_lr()))}


def _cosines(vectorizer, a: list, b: list) -> np.ndarray:
    """Row-wise cosine of two lists of texts under a fitted (L2-normalising) tf-idf vectorizer."""
    va, vb = vectorizer.transform(a), vectorizer.transform(b)
    return np.asarray(va.multiply(vb).sum(axis=1)).ravel()


def pair_features(word, char, examples: Sequence, chinese: bool) -> np.ndarray:
    """[N, 4] pair features: word and character tf-idf cosine, Jaccard overlap of the unit sets,
    relative length difference |len a - len b| / max(len a, len b) in units."""
    a = [ngrams(e.text_a, chinese) for e in examples]
    b = [ngrams(e.text_b, chinese) for e in examples]
    ua = [set(units(e.text_a, chinese)) for e in examples]
    ub = [set(units(e.text_b, chinese)) for e in examples]
    jaccard = [len(x & y) / len(x | y) if x | y else 0.0 for x, y in zip(ua, ub)]
    la = np.array([len(units(e.text_a, chinese)) for e in examples], dtype=np.float64)
    lb = np.array([len(units(e.text_b, chinese)) for e in examples], dtype=np.float64)
    length = np.abs(la - lb) / np.maximum(np.maximum(la, lb), 1.0)
    texts_a, texts_b = [e.text_a for e in examples], [e.text_b for e in examples]
    return np.column_stack([_cosines(word, a, b), _cosines(char, texts_a, texts_b), jaccard, length])


def regression_baselines(train: Sequence, dev: Sequence, chinese: bool) -> dict[str, tuple[list, float]]:
    """{baseline: (dev predictions, fit seconds)} for sentence-pair regression (STS-B)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def word_vectorizer():
        texts = [ngrams(t, chinese) for e in train for t in (e.text_a, e.text_b)]
        return TfidfVectorizer(analyzer=_given).fit(texts)

    def mean():
        value = float(np.mean([e.label for e in train]))
        return lambda: [value] * len(dev)

    def cosine():
        word = word_vectorizer()
        return lambda: list(_cosines(word, [ngrams(e.text_a, chinese) for e in dev],
                                     [ngrams(e.text_b, chinese) for e in dev]))

    def ridge():
        word = word_vectorizer()
        char = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4)).fit(
            [t for e in train for t in (e.text_a, e.text_b)])
        model = make_pipeline(StandardScaler(), Ridge(alpha=1.0))
        model.fit(pair_features(word, char, train, chinese), [e.label for e in train])
        return lambda: list(model.predict(pair_features(word, char, dev, chinese)))

    return {"mean": _timed(mean), "tfidf_cosine": _timed(cosine), "ridge": _timed(ridge)}


# ---------------------------------------------------------------------------- sentence vectors
def tfidf_vectorizer(fit_texts: Sequence[str], chinese: bool):
    """A tf-idf vectorizer (L2-normalised rows) over `ngrams` (word uni+bigrams, or character uni+bigrams for
    Chinese), its vocabulary and idf from `fit_texts` only."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(analyzer=_given).fit([ngrams(t, chinese) for t in fit_texts])


def embedding_baseline(fit_examples: Sequence, pairs, chinese: bool | None = None) -> tuple[dict[str, float], float]:
    """The tf-idf cosine baseline of the embedding metrics (tasks/pairs.py `pair_metrics`).

    Args:
        fit_examples: the examples whose text fits the vectorizer (the training split; never the scored one).
        pairs: the scored split's Pairs.
        chinese: split text into characters; None: `is_chinese(fit_examples)`.
    Returns:
        (the pairs' metrics, seconds to fit and score).
    """
    from albertlm.tasks.pairs import pair_metrics

    require_sklearn()
    chinese = is_chinese(fit_examples) if chinese is None else chinese
    start = time.perf_counter()
    vectorizer = tfidf_vectorizer(list(example_texts(fit_examples)), chinese)
    a = vectorizer.transform([ngrams(t, chinese) for t in pairs.text_a]).tocsr()
    b = vectorizer.transform([ngrams(t, chinese) for t in pairs.text_b]).tocsr()
    scores = pair_metrics(pairs, a, b)
    return scores, time.perf_counter() - start


def fit_split(spec: TaskSpec, data_dir: str | Path) -> str:
    """The split whose text fits a baseline's vectorizer: train, or, in a folder without one (LCQMC's here),
    test (its text only, never the dev text that is scored)."""
    from albertlm.tasks.common import find_file

    for split in ("train", "test"):
        try:
            find_file(data_dir, spec.files[split], split)
            return split
        except (AlbertlmError, KeyError):
            continue
    raise AlbertlmError(f"{data_dir}: task {spec.name} has neither a train nor a test split here to fit a baseline on")


def embedding_baseline_scores(task: str | TaskSpec, data_dir: str | Path, split: str = SPLIT) -> dict:
    """The tf-idf cosine baseline of the embedding metrics on a pair task's folder.

    Returns:
        {"task", "language", "fit_split", "fit_examples", "split", "pairs", "kind", "main_metric",
        "metrics" (raw, as pair_metrics gives them), "fit_s"}.
    Raises:
        AlbertlmError: no pairs, no split to fit on, or scikit-learn missing.
    """
    from albertlm.tasks.pairs import pairs_of

    spec = get_task(task) if isinstance(task, str) else task
    fit = fit_split(spec, data_dir)
    fit_examples, scored = spec.read(data_dir, fit), spec.read(data_dir, split)
    pairs = pairs_of(spec, scored, f"{data_dir} ({split})")
    chinese = is_chinese(fit_examples)
    scores, seconds = embedding_baseline(fit_examples, pairs, chinese)
    return {"task": spec.name, "language": "zh" if chinese else "en", "fit_split": fit,
            "fit_examples": len(fit_examples), "split": split, "pairs": len(pairs), "kind": pairs.kind,
            "main_metric": pairs.main_metric, "metrics": scores, "fit_s": round(seconds, 3)}


def lookup_tagger(train: Sequence, key: Callable[[str], str] = lambda tag: tag) -> dict[str, str]:
    """token -> its most frequent `key(tag)` in training (ties: O first, then by name)."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for e in train:
        for token, tag in zip(e.tokens, e.tags):
            counts[token][key(tag)] += 1
    return {token: min(c, key=lambda tag: (-c[tag], tag != "O", tag)) for token, c in counts.items()}


def _entity_type(tag: str) -> str:
    """"PER" from "B-PER" or "I-PER"; "O" stays "O"."""
    return tag if tag == "O" else tag.split("-", 1)[1]


def join_runs(types: Sequence[str]) -> list[str]:
    """BIO tags from one entity type (or O) per token: each run of one type is one entity."""
    return ["O" if t == "O" else ("I-" if i and types[i - 1] == t else "B-") + t for i, t in enumerate(types)]


def ner_baselines(train: Sequence, dev: Sequence, chinese: bool) -> dict[str, tuple[list, float]]:
    """{baseline: (dev tag sequences, fit seconds)} for named-entity recognition (no scikit-learn needed)."""
    def all_o():
        return lambda: [["O"] * len(e.tokens) for e in dev]

    def lookup():
        table = lookup_tagger(train)
        return lambda: [[table.get(t, "O") for t in e.tokens] for e in dev]

    def type_lookup():
        table = lookup_tagger(train, _entity_type)
        return lambda: [join_runs([table.get(t, "O") for t in e.tokens]) for e in dev]

    return {"all_o": _timed(all_o), "lookup": _timed(lookup), "type_lookup": _timed(type_lookup)}


@dataclass(frozen=True)
class Baselines:
    """The baselines of one shape of task: how to fit them, and which two to show beside a model."""

    run: Callable[[Sequence, Sequence, bool], dict[str, tuple[list, float]]]
    """(train, dev, chinese) -> {baseline: (dev predictions, fit seconds)}."""
    best: str
    """The strongest simple one: the score a model should beat."""
    floor: str
    """The trivial one (a constant prediction): the score that says nothing was learned."""
    needs_sklearn: bool = True
    """False when every one is plain counting (the lookup taggers)."""


# (family, problem type) -> its baselines: the shapes of task a count model can do
RUNNERS = {("classification", "single_label_classification"): Baselines(classification_baselines, "tfidf_lr",
                                                                        "majority"),
           ("classification", "regression"): Baselines(regression_baselines, "ridge", "mean"),
           ("ner", "single_label_classification"): Baselines(ner_baselines, "type_lookup", "all_o",
                                                             needs_sklearn=False)}


def baselines_of(spec: TaskSpec) -> Baselines | None:
    """The task's baselines, or None when there is no count-based baseline for its shape."""
    return RUNNERS.get((spec.family.name, spec.problem_type))


def _shape(spec: TaskSpec) -> Baselines:
    shape = baselines_of(spec)
    if shape is None:
        raise AlbertlmError(f"task {spec.name}: no count-based baseline for the {spec.family.name} family "
                            f"({spec.problem_type})")
    return shape


# ---------------------------------------------------------------------------- one task
def score_baselines(spec: TaskSpec, train: Sequence, dev: Sequence, chinese: bool | None = None
                    ) -> dict[str, tuple[dict[str, float], float]]:
    """Fit every count-based baseline of the task on `train` and score it on `dev`.

    Args:
        spec: the task (classification, regression or NER family).
        train, dev: its examples, as the task's reader gives them.
        chinese: split text into characters; None: `is_chinese(train)`.
    Returns:
        {baseline: (the task's metrics on dev, raw as `spec.metric` gives them (a constant
        prediction's correlation is NaN), fit seconds)}.
    Raises:
        AlbertlmError: the task has no count-based baseline, or scikit-learn is missing.
    """
    shape = _shape(spec)
    if shape.needs_sklearn:
        require_sklearn()
    chinese = is_chinese(train) if chinese is None else chinese
    return {name: (spec.metric(dev, predictions), seconds)
            for name, (predictions, seconds) in shape.run(train, dev, chinese).items()}


def _percent(metrics: dict[str, float]) -> dict[str, float]:
    """The metrics as `albertlm evaluate` prints them: x100, counts as they are, rounded."""
    return {k: (v if k in COUNTS else round(100 * v, 2)) for k, v in metrics.items()}


def baseline_scores(task: str | TaskSpec, data_dir: str | Path) -> dict:
    """Fit every count-based baseline of the task on its training split and score it on dev.

    Args:
        task: a registry task name (or its spec), of the classification, regression or NER family.
        data_dir: the task's folder (what `albertlm finetune --data` takes).
    Returns:
        {"task", "language" ("zh" or "en"), "train_examples", "dev_examples", "split" ("dev"),
        "metric" (the task's main metric), "baselines": {name: {"value" (the main metric x100;
        None for a constant prediction, whose correlation is undefined), "metrics" (all of the
        task's metrics x100, counts as they are), "fit_s", "description", "note" (only with
        value None)}}}.
    Raises:
        AlbertlmError: the task has no count-based baseline here, a split file is missing, or
            scikit-learn is missing.
    """
    spec = get_task(task) if isinstance(task, str) else task
    _shape(spec)  # refuse before reading anything
    train, dev = spec.read(data_dir, "train"), spec.read(data_dir, SPLIT)
    chinese = is_chinese(train)
    out = {"task": spec.name, "language": "zh" if chinese else "en", "train_examples": len(train),
           "dev_examples": len(dev), "split": SPLIT, "metric": spec.main_metric, "baselines": {}}
    for name, (metrics, seconds) in score_baselines(spec, train, dev, chinese).items():
        value = metrics[spec.main_metric]
        row: dict[str, Any] = {"description": BASELINES[name], "fit_s": round(seconds, 3)}
        if math.isnan(value):  # a constant prediction: Pearson/Spearman are undefined, not 0
            row.update(value=None, metrics={}, note="constant prediction: correlation undefined")
        else:
            row.update(value=round(100 * value, 2), metrics=_percent(metrics))
        out["baselines"][name] = row
    return out


def headline(spec: TaskSpec, scored: dict[str, tuple[dict[str, float], float]]) -> dict[str, Any]:
    """The family's strongest simple baseline and its floor, for showing beside a model's dev score.

    Args:
        spec: the task.
        scored: score_baselines' result.
    Returns:
        {"name", "description", "metric" (the main metric), "value" (raw, as fine-tuning's `best`
        holds it), "metrics", "fit_s", "floor": the same for the trivial baseline, whose value is
        None (with a "note") when a constant prediction leaves the metric undefined,
        "all": {baseline: main metric value or None}}.
    """
    shape = _shape(spec)

    def row(name: str) -> dict[str, Any]:
        return _headline_row(name, spec.main_metric, *scored[name])

    return {**row(shape.best), "floor": row(shape.floor),
            "all": {name: (None if math.isnan(m[spec.main_metric]) else m[spec.main_metric])
                    for name, (m, _) in scored.items()}}


def embedding_headline(scores: dict[str, float], seconds: float, metric: str) -> dict[str, Any]:
    """`embedding_baseline`'s result in headline's shape, for showing beside an embedder's dev score: the
    tf-idf cosine on `metric` (the pairs' main metric), and "floor" None (no constant vector orders pairs)."""
    value = scores[metric]
    return {**_headline_row("tfidf_cosine", metric, scores, seconds), "floor": None,
            "all": {"tfidf_cosine": None if math.isnan(value) else value}}


def _headline_row(name: str, metric: str, metrics: dict[str, float], seconds: float) -> dict[str, Any]:
    """One baseline as headline shows it: its main metric's value None (with a note) where it is undefined."""
    value = metrics[metric]
    out = {"name": name, "description": BASELINES[name], "metric": metric, "fit_s": round(seconds, 3)}
    if math.isnan(value):
        return {**out, "value": None, "metrics": {}, "note": "constant prediction: correlation undefined"}
    return {**out, "value": value, "metrics": metrics}
