"""Count-based baselines beside every result: what scikit-learn fitted in seconds on the same
training split scores on the same dev split.

Every task is read through albertlm's own readers (`get_task(name).read`) and scored with the
task's own metric (`spec.metric`), so a number here is the number `albertlm evaluate` would print
for a model making the same predictions (x100, as evaluate prints it). Nothing is tuned on dev:
every hyperparameter below is fixed in advance.

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
can see overlap at all. Tasks without a training split here (QNLI, LCQMC) are skipped with a note.

    python benchmarks/baselines.py --data ../shared/data --out benchmarks/results/baselines.json
    python benchmarks/baselines.py --data ../shared/data --tasks sst-2 conll2003 --markdown

Output: one JSON object on stdout (or, with --markdown, a table), and in --out when given: the
date, command and machine; per task the split sizes, the main metric and each baseline's score
and fit time (featurizing the training split included; wall seconds on a possibly shared machine).

`baseline_scores(task, data_dir)` is the reusable core: one task folder in, that task's baseline
scores out. Only benchmark code may import this module; the library never does, so scikit-learn
stays a benchmark extra (`pip install 'albertlm[bench]'`).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import re
import shlex
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.tasks.registry import TaskSpec, get_task
from albertlm.tokenizer import looks_chinese

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import machine, write_json  # noqa: E402  (a sibling script, not a package)

try:
    import sklearn
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
except ImportError as exc:  # a benchmark extra, never a runtime dependency
    raise ImportError("benchmarks/baselines.py needs scikit-learn: pip install 'albertlm[bench]'") from exc

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
# registry name -> the task's usual folder under the data root (shared/data/README.md)
FOLDERS = {"sst-2": "SST-2", "cola": "CoLA", "mrpc": "MRPC", "rte": "RTE", "sts-b": "STS-B", "qnli": "QNLI",
           "chnsenticorp": "ChnSentiCorp", "afqmc": "AFQMC", "lcqmc": "LCQMC", "tnews": "TNEWS",
           "conll2003": "CoNLL-2003", "msra-ner": "MSRA-NER", "cluener": "CLUENER2020", "weibo-ner": "Weibo-NER"}
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
COUNTS = ("entities", "total")  # metrics that are counts, not fractions (printed as they are)
SPLIT = "dev"

_WORD_RE = re.compile(r"\w+(?:'\w+)*|[^\w\s]")


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


def is_chinese(examples: Sequence) -> bool:
    """The task's language, from its training text (the first 2,000 examples)."""
    head = examples[:2000]
    if hasattr(head[0], "tokens"):
        return looks_chinese("".join(e.tokens) for e in head)
    return looks_chinese(e.text_a + (e.text_b or "") for e in head)


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


def classification_baselines(train: Sequence, dev: Sequence, chinese: bool) -> dict[str, tuple[list, float]]:
    """{baseline: (dev predictions, fit seconds)} for single-label classification."""
    labels = [e.label for e in train]

    def majority():
        label = _majority(train)
        return lambda: [label] * len(dev)

    def fitted(vectorizer, model):
        def fit():
            pipe = make_pipeline(vectorizer, model).fit([bag(e, chinese) for e in train], labels)
            return lambda: list(pipe.predict([bag(e, chinese) for e in dev]))
        return fit

    return {"majority": _timed(majority),
            "naive_bayes": _timed(fitted(CountVectorizer(analyzer=_given), MultinomialNB(alpha=1.0))),
            "tfidf_lr": _timed(fitted(TfidfVectorizer(analyzer=_given),
                                      LogisticRegression(C=1.0, max_iter=2000)))}


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
    """{baseline: (dev tag sequences, fit seconds)} for named-entity recognition."""
    def all_o():
        return lambda: [["O"] * len(e.tokens) for e in dev]

    def lookup():
        table = lookup_tagger(train)
        return lambda: [[table.get(t, "O") for t in e.tokens] for e in dev]

    def type_lookup():
        table = lookup_tagger(train, _entity_type)
        return lambda: [join_runs([table.get(t, "O") for t in e.tokens]) for e in dev]

    return {"all_o": _timed(all_o), "lookup": _timed(lookup), "type_lookup": _timed(type_lookup)}


# (family, problem type) -> its baselines: the shapes of task a count model can do
RUNNERS = {("classification", "single_label_classification"): classification_baselines,
           ("classification", "regression"): regression_baselines,
           ("ner", "single_label_classification"): ner_baselines}


# ---------------------------------------------------------------------------- one task
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
        AlbertlmError: the task has no count-based baseline here, or a split file is missing.
    """
    spec = get_task(task) if isinstance(task, str) else task
    runner = RUNNERS.get((spec.family.name, spec.problem_type))
    if runner is None:
        raise AlbertlmError(f"task {spec.name}: no count-based baseline for the {spec.family.name} family "
                            f"({spec.problem_type})")
    train, dev = spec.read(data_dir, "train"), spec.read(data_dir, SPLIT)
    chinese = is_chinese(train)
    out = {"task": spec.name, "language": "zh" if chinese else "en", "train_examples": len(train),
           "dev_examples": len(dev), "split": SPLIT, "metric": spec.main_metric, "baselines": {}}
    for name, (predictions, seconds) in runner(train, dev, chinese).items():
        metrics = spec.metric(dev, predictions)
        value = metrics[spec.main_metric]
        row = {"description": BASELINES[name], "fit_s": round(seconds, 3)}
        if math.isnan(value):  # a constant prediction: Pearson/Spearman are undefined, not 0
            row.update(value=None, metrics={}, note="constant prediction: correlation undefined")
        else:
            row.update(value=round(100 * value, 2), metrics=_percent(metrics))
        out["baselines"][name] = row
    return out


# ---------------------------------------------------------------------------- the report
def markdown(result: dict) -> str:
    """The results as a markdown table, one row per task and baseline, then the skipped tasks."""
    lines = ["| task | train / dev | metric | baseline | dev score | also | fit s |", "|---|---|---|---|---|---|---|"]
    for t in result["tasks"]:
        for name, b in t["baselines"].items():
            score = "— (constant)" if b["value"] is None else f"{b['value']:.2f}"
            also = ", ".join(f"{k} {v:.2f}" for k, v in b["metrics"].items()
                             if k != t["metric"] and k not in COUNTS and not k.startswith("f1_"))
            lines.append(f"| {t['task']} | {t['train_examples']:,} / {t['dev_examples']:,} | {t['metric']} | "
                         f"{name} | {score} | {also} | {b['fit_s']:.2f} |")
    if result["skipped"]:
        lines.append("")
    lines += [f"- skipped {s['task']}: {s['reason']}" for s in result["skipped"]]
    return "\n".join(lines)


def default_tasks(data: Path) -> list[str]:
    """The tasks whose usual folder exists under the data root, in FOLDERS order."""
    return [task for task, folder in FOLDERS.items() if (data / folder).is_dir()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(SHARED), help="the data root holding SST-2/, CoNLL-2003/ ... "
                   "(default: shared/data beside the checkout)")
    p.add_argument("--tasks", nargs="+", default=None, help=f"registry task names (default: every one of "
                   f"{', '.join(FOLDERS)} whose folder exists under --data)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    p.add_argument("--markdown", action="store_true", help="print a markdown table instead of the JSON")
    args = p.parse_args(argv)
    data = Path(args.data)
    tasks = [get_task(t).name for t in args.tasks] if args.tasks else default_tasks(data)
    start = time.perf_counter()
    result = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
              "command": shlex.join(["python", "benchmarks/baselines.py", *(sys.argv[1:] if argv is None else argv)]),
              "machine": machine(), "scikit_learn": sklearn.__version__,
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "data": args.data, "split": SPLIT,
              "units": "metric x100, as albertlm evaluate prints it", "baselines": BASELINES, "tasks": [],
              "skipped": []}
    for task in tasks:
        folder = FOLDERS.get(task)
        if folder is None:
            result["skipped"].append({"task": task, "reason": "no usual folder known for this task"})
            continue
        try:
            scores = baseline_scores(task, data / folder)
        except AlbertlmError as exc:  # no train split (QNLI, LCQMC here), no folder, another family
            result["skipped"].append({"task": task, "reason": str(exc)})
            print(f"{task}: skipped ({exc})", file=sys.stderr, flush=True)
            continue
        result["tasks"].append({"folder": folder, **scores})
        shown = ", ".join(f"{k} {'-' if b['value'] is None else b['value']}" for k, b in scores["baselines"].items())
        print(f"{task} ({scores['metric']}): {shown}", file=sys.stderr, flush=True)
    result["wall_s"] = round(time.perf_counter() - start, 1)
    text = write_json(result, args.out)
    print(markdown(result) if args.markdown else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
