"""`albertlm embed`: one vector per input line from any ALBERT directory (inference/embed.py), or, with
--evaluate TASK, the vectors' scores on a pair task's split (inference/embed_eval.py); docs/embeddings.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.options import add_dataclass_options, dataclass_from_args


def embed_args(p: argparse.ArgumentParser) -> None:
    from albertlm.inference.embed import EmbedSettings

    p.add_argument("model", metavar="DIR", help="an ALBERT directory: pretrained, fine-tuned, or a "
                   "sentence-transformers one with ALBERT inside")
    p.add_argument("--input", metavar="FILE", help="UTF-8 text, one text per line (a blank line is "
                   "the empty text and gets its vector, so line i is vector i); - reads stdin")
    p.add_argument("--output", metavar="FILE", help="F.npy (a float32 [lines, hidden] array) or F.jsonl (one JSON "
                   "array per line), written atomically; default: JSON lines on stdout. With --evaluate: F.json, "
                   "the metrics")
    g = p.add_argument_group("evaluation (instead of --input)")
    g.add_argument("--evaluate", metavar="TASK", help="score the vectors on a sentence-pair task: sts-b (Spearman, "
                   "Pearson), mrpc, qnli, rte, lcqmc, afqmc (accuracy at the best cosine threshold), and retrieval of "
                   "each alike pair's second text (recall@1, @10, MRR)")
    g.add_argument("--data", metavar="DIR", help="with --evaluate: the task's data directory (or the split's file)")
    g.add_argument("--split", default="dev", choices=["train", "dev", "test"], help="with --evaluate: the split "
                   "scored (default: dev)")
    add_dataclass_options(p, EmbedSettings, "embedding")


def embed_run(args: argparse.Namespace) -> int:
    """Embed every line of --input; write the vectors; say what was written on stderr."""
    from albertlm.cli.tasks import _one_line_warnings
    from albertlm.inference.embed import (EmbedSettings, jsonl_lines, load_embedder, output_format, read_texts,
                                          split_lines, write_vectors)
    from albertlm.outputs import check_not_input

    _one_line_warnings()
    settings = dataclass_from_args(EmbedSettings, args)
    if args.evaluate is not None or args.data is not None:
        return _evaluate_run(args, settings)
    if args.input is None:
        raise AlbertlmError("--input FILE is required (or --evaluate TASK --data DIR to score the vectors)")
    out = Path(args.output) if args.output else None
    if out is not None:  # every check before the model is loaded
        output_format(out)
        if out.is_dir() or not out.parent.is_dir():
            why = "is a directory" if out.is_dir() else "its directory does not exist"
            raise AlbertlmError(f"--output {out}: {why}")
        check_not_input(out, "--output", {"--input": None if args.input == "-" else args.input, "DIR": args.model})
    texts = split_lines(sys.stdin.buffer.read(), "<stdin>") if args.input == "-" else read_texts(args.input)
    embedder = load_embedder(args.model, settings)
    vectors = embedder.encode(texts, settings.batch_size, settings.progress)
    if out is None:
        sys.stdout.writelines(jsonl_lines(vectors))
        sys.stdout.flush()
        return 0
    write_vectors(vectors, out)
    how = f"{embedder.pooling} pooling{', normalised' if embedder.normalize else ''}"
    print(f"{out}: {len(vectors)} vectors of {embedder.dim} ({how}, at most {embedder.max_seq_length} tokens) "
          f"from {args.model}", file=sys.stderr)
    return 0


def _evaluate_run(args: argparse.Namespace, settings) -> int:
    """--evaluate TASK --data DIR: the metrics table on stdout, and the JSON in --output when given."""
    from albertlm.inference.embed_eval import evaluate_embeddings, format_table, write_report
    from albertlm.outputs import check_not_input

    if args.evaluate is None or args.data is None or args.input is not None:
        raise AlbertlmError("--evaluate TASK and --data DIR go together, without --input")
    if args.output is not None:
        if Path(args.output).suffix.lower() != ".json":
            raise AlbertlmError(f"--output {args.output}: with --evaluate the output is the metrics JSON; it must "
                                "end in .json")
        check_not_input(args.output, "--output", {"--data": args.data, "DIR": args.model})
    result = evaluate_embeddings(args.model, args.evaluate, args.data, args.split, settings)
    print(format_table(result))
    if args.output is not None:
        write_report(result, args.output)
        print(f"{args.output}: the metrics as JSON", file=sys.stderr)
    return 0
