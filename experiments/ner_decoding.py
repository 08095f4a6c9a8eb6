"""Score fine-tuned taggers on a split with each way of choosing tags from the same logits
(`albertlm.tasks.ner.DECODINGS`): the head runs once per model, every decoding reads its outputs.
Output: the results envelope (benchmarks/harness.py) in --out, one line per model on the terminal.

    python -m experiments.ner_decoding --data DATA/CoNLL-2003 --model runs/conll-s0 --model runs/conll-s1 --out decoding.json
"""

from __future__ import annotations

import argparse
import sys
import time

from albertlm.errors import AlbertlmError
from albertlm.inference.evaluate import task_inputs
from albertlm.inference.run import check_finite_outputs, run_features
from albertlm.tasks import ner
from benchmarks.harness import envelope, publish


def score(model: str, data: str, split: str) -> dict:
    t = task_inputs(model, data, None, split)
    if t.spec.family.name != "ner":
        raise AlbertlmError(f"--model {model}: a {t.spec.family.name} model, not a tagger")
    outputs = run_features(t.loaded.runner, t.spec, t.features, 64, t.loaded.device)
    check_finite_outputs(outputs, t.spec, model)
    row = {"model": model, "task": t.spec.name, "split": split, "examples": len(t.examples), "labels": t.labels}
    for decoding in ner.DECODINGS:
        started = time.perf_counter()
        preds = ner.ner_predictions(t.examples, t.features, outputs["logits"], t.labels, decoding)
        seconds = time.perf_counter() - started
        row[decoding] = {**t.spec.metric(t.examples, preds), "decode_seconds": round(seconds, 3)}
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.ner_decoding", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the task's data directory")
    p.add_argument("--model", action="append", required=True, help="a fine-tuned tagger directory (repeatable)")
    p.add_argument("--split", default="dev")
    p.add_argument("--out", required=True, help="the JSON file to write")
    args = p.parse_args(argv)
    started = time.perf_counter()
    try:
        rows = []
        for model in args.model:
            rows.append(score(model, args.data, args.split))
            r = rows[-1]
            print(" ".join(f"{d} {100 * r[d]['f1']:.2f}" for d in ner.DECODINGS), model, flush=True)
    except AlbertlmError as e:
        print(f"ner_decoding: error: {e}", file=sys.stderr)
        return 2
    result = envelope("experiments.ner_decoding", argv if argv is not None else sys.argv[1:],
                      {"data": args.data, "split": args.split, "runs": rows}, started=started)
    publish(result, args.out, render=lambda r: f"wrote {r['json']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
