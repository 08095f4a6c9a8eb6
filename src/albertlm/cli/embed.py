"""`albertlm embed`: one vector per input line from any ALBERT directory (inference/embed.py, docs/embeddings.md)."""

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
    p.add_argument("--input", required=True, metavar="FILE", help="UTF-8 text, one text per line (a blank line is "
                   "the empty text and gets its vector, so line i is vector i); - reads stdin")
    p.add_argument("--output", metavar="FILE", help="F.npy (a float32 [lines, hidden] array) or F.jsonl (one JSON "
                   "array per line), written atomically; default: JSON lines on stdout")
    add_dataclass_options(p, EmbedSettings, "embedding")


def embed_run(args: argparse.Namespace) -> int:
    """Embed every line of --input; write the vectors; say what was written on stderr."""
    from albertlm.cli.tasks import _one_line_warnings
    from albertlm.inference.embed import (EmbedSettings, jsonl_lines, load_embedder, output_format, read_texts,
                                          split_lines, write_vectors)
    from albertlm.outputs import check_not_input

    _one_line_warnings()
    settings = dataclass_from_args(EmbedSettings, args)
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
