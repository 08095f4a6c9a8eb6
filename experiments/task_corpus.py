"""Write a task's training text as a pretraining corpus (the `lines` format of data/corpus.py).

    python -m experiments.task_corpus --task sst-2 --data DATA/SST-2 --out runs/sst2-train.txt

Single texts (sentences, reviews, tagged sentences joined) go one per line, a blank line after every
`--group` of them: consecutive training examples become one document, so the packer can fill 64-token
examples (with `--objective none` nothing is learned from their order). A pair task writes each pair as a
document of its two texts, so `--objective nsp` asks "is B this A's partner or a random sentence".
Only the training split is read: the dev text never reaches pretraining.
"""

from __future__ import annotations

import argparse
import sys

from albertlm.errors import AlbertlmError
from albertlm.tasks.baselines import example_texts
from albertlm.tasks.registry import get_task
from albertlm.utils import atomic_write_text


def corpus_text(examples, group: int) -> str:
    """The corpus of `examples`: pairs as two-line documents, anything else `group` texts per document."""
    if examples and getattr(examples[0], "text_b", None):
        docs = [f"{one_line(e.text_a)}\n{one_line(e.text_b)}" for e in examples if e.text_a.strip() and e.text_b.strip()]
    else:
        texts = [one_line(t) for t in example_texts(examples) if t.strip()]
        docs = ["\n".join(texts[i:i + group]) for i in range(0, len(texts), group)]
    return "\n\n".join(docs) + "\n"


def one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.task_corpus", description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True)
    p.add_argument("--data", required=True, help="the task's data directory")
    p.add_argument("--out", required=True, help="the corpus file to write")
    p.add_argument("--group", type=int, default=16, help="single texts per document")
    args = p.parse_args(argv)
    try:
        if args.group <= 0:
            raise AlbertlmError(f"--group must be positive, got {args.group}")
        examples = get_task(args.task).read(args.data, "train", False)
        text = corpus_text(examples, args.group)
        atomic_write_text(args.out, text)
    except AlbertlmError as e:
        print(f"task_corpus: error: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: {text.count(chr(10) * 2) + 1:,} documents from {len(examples):,} training examples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
