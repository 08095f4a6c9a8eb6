"""Make the start of a run without --model (a task vocabulary and a random ALBERT, train/scratch.make_base)
with recipe fields changed, so a lever can be fine-tuned from it at a fixed step count.

    python -m experiments.scratch_base --task sst-2 --data DATA/SST-2 --out runs/sst2-wv-base --set word_vectors=true

The vocabulary is trained exactly as `albertlm finetune` without --model trains it (same seed, same text),
so bases made with and without a lever differ only in what the lever changes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.tasks.baselines import is_chinese
from albertlm.tasks.registry import get_task
from albertlm.train.scratch import DEFAULT_RECIPE, make_base


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.scratch_base", description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True, help="a new directory for the base")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=JSON", help="a ScratchRecipe field")
    args = p.parse_args(argv)
    try:
        changes = {}
        for item in args.set:
            name, _, value = item.partition("=")
            if name not in {f.name for f in dataclasses.fields(DEFAULT_RECIPE)}:
                raise AlbertlmError(f"--set {item}: ScratchRecipe has no field {name!r}")
            changes[name] = json.loads(value)
        spec = get_task(args.task)
        recipe = dataclasses.replace(DEFAULT_RECIPE, **changes).for_family(spec.family.name)
        out = Path(args.out)
        if out.exists():
            raise AlbertlmError(f"--out {out}: exists; give a new directory")
        examples = spec.read(args.data, "train", False)
        out.mkdir(parents=True)
        _, record = make_base(examples, out, recipe, args.seed, is_chinese(examples), lambda line: None)
    except (AlbertlmError, json.JSONDecodeError) as e:
        print(f"scratch_base: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
