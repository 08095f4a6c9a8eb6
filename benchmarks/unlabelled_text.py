"""Unlabelled text for `albertlm finetune --unlabelled FILE`: the other public tasks' text in one file.

`albertlm finetune` without --model fits its word vectors on the training text; `--unlabelled` adds
more sentences to that fit (docs/finetuning.md). This script builds the files the search measured
(docs/transfer.md, run 19): every text of the other tasks of the target's language in the public task
data, one per line, first occurrence kept, in a fixed order of sources. The target task itself is left
out (its training text is in the fit already), and so is any line equal to one of the target's dev or
test texts, so that nothing the target is scored on reaches its word vectors. No label is read.

    python -m benchmarks.unlabelled_text --data DATA --for conll2003 --out runs/unlabelled-en-for-conll.txt
    python -m benchmarks.unlabelled_text --data DATA --for chnsenticorp --out runs/unlabelled-zh.txt

The sources (registry task, splits; a task whose folder is missing under DATA is skipped with a note):
English: STS-B, MRPC, RTE and CoLA train and dev, QNLI dev (it has no train split here), the built-in
King James Bible (one verse a line), SST-2 train, CoNLL-2003 train (a sentence's tokens joined by
spaces). Chinese: TNEWS, AFQMC train, LCQMC dev and test (no train split here), CLUENER train (every
row's text, a row with malformed labels included), MSRA-NER and Weibo-NER train (characters joined),
ChnSentiCorp train. A text of a pair task gives two lines.

Output: the text file (written atomically), and the results envelope (benchmarks/harness.py) on stdout
and in --report when given: lines per source (new after de-duplication), lines dropped as the target's
dev or test text, the total.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.tasks.registry import get_task
from albertlm.train.scratch import read_unlabelled
from albertlm.utils import atomic_write_text
from benchmarks.baselines import FOLDERS, SHARED
from benchmarks.harness import envelope, publish

SOURCES = {
    "en": (("sts-b", ("train", "dev")), ("mrpc", ("train", "dev")), ("qnli", ("dev",)), ("rte", ("train", "dev")),
           ("cola", ("train", "dev")), ("kjv", ()), ("sst-2", ("train",)), ("conll2003", ("train",))),
    "zh": (("tnews", ("train",)), ("afqmc", ("train",)), ("lcqmc", ("dev", "test")), ("cluener", ("train",)),
           ("msra-ner", ("train",)), ("weibo-ner", ("train",)), ("chnsenticorp", ("train",))),
}
"""Language -> (task or the built-in corpus `kjv`, splits), in the order the file takes them."""

CHARACTER_TOKENS = ("msra-ner", "weibo-ner", "cluener")
"""Token-level tasks whose tokens are characters: joined without spaces."""


def language_of(task: str) -> str:
    """The language whose source list holds `task`, or a one-line error."""
    for language, sources in SOURCES.items():
        if any(name == task for name, _ in sources):
            return language
    raise AlbertlmError(f"--for {task}: not one of the tasks this script knows "
                        f"({', '.join(n for s in SOURCES.values() for n, _ in s if n != 'kjv')})")


def cluener_texts(path: Path) -> list[str]:
    """Every row's `text` of a CLUENER JSON-lines file, whatever its labels."""
    texts = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    texts.append(json.loads(line)["text"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise AlbertlmError(f"{path}:{number}: not a JSON object with a text field ({exc})") from None
    return texts


def split_texts(task: str, folder: Path, split: str) -> list[str]:
    """The texts of one split of a task, as its registry reader reads them."""
    spec = get_task(task)
    if task == "cluener":
        names = [folder / n for n in spec.files.get(split, ())]
        found = next((p for p in names if p.is_file()), None)
        if found is None:
            raise AlbertlmError(f"{folder}: no {split} file ({', '.join(p.name for p in names)})")
        return cluener_texts(found)
    texts = []
    for example in spec.read(folder, split):
        if hasattr(example, "tokens"):
            texts.append(("" if task in CHARACTER_TOKENS else " ").join(example.tokens))
        else:
            texts += [t for t in (getattr(example, "text_a", None), getattr(example, "text_b", None)) if t]
    return texts


def build(data: Path, target: str) -> tuple[list[str], dict]:
    """The lines for `target` and what each source gave."""
    language = language_of(target)
    held_out = set()
    for split in ("dev", "test"):
        try:
            held_out.update(t.strip() for t in split_texts(target, data / FOLDERS[target], split))
        except AlbertlmError:
            pass  # no such split here
    seen, lines, sources, dropped = set(), [], [], 0
    for task, splits in SOURCES[language]:
        if task == target:
            continue
        for split in splits or ("all",):
            try:
                texts = read_unlabelled(["kjv"], -1)[0] if task == "kjv" else split_texts(task, data / FOLDERS[task],
                                                                                             split)
            except AlbertlmError as exc:
                sources.append({"source": task, "split": split, "skipped": str(exc).replace(str(data), "DATA")})
                print(f"{task} {split}: skipped ({exc})", file=sys.stderr, flush=True)
                continue
            new = 0
            for text in texts:
                text = text.strip()
                if not text or text in seen:
                    continue
                seen.add(text)
                if text in held_out:
                    dropped += 1
                    continue
                lines.append(text)
                new += 1
            sources.append({"source": task, "split": split, "texts": len(texts), "new_lines": new})
    return lines, {"target": target, "language": language, "sources": sources, "dropped_as_target_eval": dropped,
                   "lines": len(lines), "characters": sum(len(t) for t in lines)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(SHARED), help="the data root holding SST-2/, CoNLL-2003/ ... "
                   "(default: shared/data beside the checkout)")
    p.add_argument("--for", dest="target", required=True, help="the task the text is for: left out, and its dev "
                   "and test texts dropped")
    p.add_argument("--out", required=True, help="the text file to write, one text a line")
    p.add_argument("--report", default=None, help="also write the JSON report here")
    args = p.parse_args(argv)
    start = time.perf_counter()
    data = Path(args.data)
    try:
        target = get_task(args.target).name
        lines, result = build(data, target)
    except AlbertlmError as exc:
        p.error(str(exc))
    atomic_write_text(args.out, "".join(t + "\n" for t in lines))
    argv = sys.argv[1:] if argv is None else list(argv)
    shown_argv = ["DATA" if a == args.data else a for a in argv]
    publish(envelope("benchmarks.unlabelled_text", shown_argv, {**result, "out": args.out}, started=start),
            args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
