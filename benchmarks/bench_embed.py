"""Sentences per second of `albertlm embed` against sentence-transformers' `encode` on the same weights, side
by side in one process.

  - ours: `Embedder.encode` on an albertlm directory, what `albertlm embed DIR` runs
    (inference/embed.py: the texts sorted into batches of similar length, one forward per batch,
    pooling inside the module);
  - sentence-transformers: `SentenceTransformer(ST_DIR).encode(texts, batch_size=B)` on the directory
    `albertlm export --format sentence-transformers DIR` writes from it (the same pooling,
    normalisation and max_seq_length; sentence-transformers sorts the texts by length too).

torch runs at --threads threads and so do both tokenizers (SentencePiece's num_threads; the
`tokenizers` library's through RAYON_NUM_THREADS, set before its first use). The calls are timed in
alternation by `harness.compare`: a round in which other processes used more than --max-foreign
cores is discarded and redone. Reported: each side's median and best seconds over the kept rounds,
sentences/s from the median, and what each side spends tokenizing (ours: `Embedder.inputs` on all
the texts, as `encode` does first; sentence-transformers: its `preprocess` on each batch of B texts
in its length order), forward and the rest being the whole minus that. Parity: the largest absolute
difference and the lowest cosine between the two sides' vectors.

Inputs: STS-B dev's sentences, both columns, from --data DIR (dev.tsv), else synthetic text of varied
length (fixed seed). Models:
  - default: a tiny random ALBERT (6 all-shared layers, H=64) with a SentencePiece vocabulary trained
    on the inputs (a smoke test: seconds);
  - --base-shaped: albert-base's shape (H=768, E=128, 12 heads, FFN 3072; --layers, 12 by default),
    random, with the same kind of vocabulary (as large as the text allows, at most --vocab);
  - --model DIR: a real ALBERT directory (its own tokenizer, pooling and length).

    python -m benchmarks.bench_embed                                       # tiny, synthetic text
    python -m benchmarks.bench_embed --data DATA/STS-B --base-shaped --sentences 1000 --rounds 5 \\
        --out benchmarks/results/embed-speed.json                          # ~5 min on 2 quiet cores

(all 3,000 dev sentences: about three times as long.)

Prints the harness's envelope as JSON (and writes it to --out); the targets carry their verdicts.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from albertlm.errors import AlbertlmError
from albertlm.inference.embed import EmbedSettings, Embedder, load_embedder
from benchmarks.harness import Quiet, Target, compare, envelope, min_cosine, publish
from benchmarks.start_models import random_albert

TINY = {"layers": 6, "hidden": 64, "embedding": 32, "heads": 4, "intermediate": 256, "vocab": 1000}
BASE_SHAPED = {"layers": 12, "hidden": 768, "embedding": 128, "heads": 12, "intermediate": 3072, "vocab": 30000}
WORDS = ("a man woman child dog cat is are was riding playing eating cutting slicing running on in with the of "
         "to and guitar horse piano onion potato street river people two three small large young old new "
         "president said government market stocks police officials tuesday percent after before").split()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="a real ALBERT directory (default: a random one)")
    p.add_argument("--base-shaped", action="store_true", help=f"a random model of {BASE_SHAPED}")
    p.add_argument("--layers", type=int, help="layers of the random model (default: 6 tiny, 12 base-shaped)")
    p.add_argument("--vocab", type=int, help="pieces asked of the random model's vocabulary (default: 1000 tiny, "
                   "30000 base-shaped; fewer when the text supports fewer)")
    p.add_argument("--data", type=Path, help="an STS-B folder (dev.tsv): its sentences, both columns; "
                   "default: synthetic text")
    p.add_argument("--sentences", type=int, help="use the first N sentences (default: all, or 2000 synthetic)")
    p.add_argument("--max-seq-length", type=int, help="tokens per text (default: the directory's, at most 512)")
    p.add_argument("--threads", type=int, default=2, help="torch and tokenizer threads")
    p.add_argument("--batch", type=int, default=32, help="texts per forward pass, both sides")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds kept")
    p.add_argument("--min-sample-s", type=float, default=0.5,
                   help="a call shorter than this is repeated within a round (harness.compare)")
    p.add_argument("--max-foreign", type=float, default=0.25,
                   help="discard a round when other processes used more CPU cores than this")
    p.add_argument("--max-wait", type=float, default=300, help="seconds, in all, to wait for a quiet machine")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    if args.model is not None and (args.base_shaped or args.layers or args.vocab):
        p.error("--model takes its own shape: drop --base-shaped, --layers and --vocab")
    if args.model is not None and not args.model.is_dir():
        p.error(f"--model {args.model}: not a directory")
    for name in ("threads", "batch", "rounds", "sentences"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


def sentences(args: argparse.Namespace) -> tuple[list[str], str]:
    """The texts to embed and where they came from."""
    if args.data is not None:
        from albertlm.tasks.registry import get_task

        examples = get_task("sts-b").read(args.data, "dev")
        texts = [t for e in examples for t in (e.text_a, e.text_b)]
        source = f"STS-B dev, both columns ({args.data})"
    else:
        rng = random.Random(0)
        texts = [" ".join(rng.choices(WORDS, k=rng.choice([3, 5, 8, 12, 16, 24, 40, 64]))) + "."
                 for _ in range(args.sentences or 2000)]
        source = "synthetic: 3 to 64 words of a fixed list (seed 0)"
    return texts[:args.sentences], source


def random_model_dir(args: argparse.Namespace, texts: list[str], out: Path) -> tuple[Path, dict]:
    """A random AlbertModel directory (every tensor drawn) with a SentencePiece vocabulary trained on `texts`."""
    from albertlm.tokenizer import Tokenizer, train_tokenizer

    shape = dict(BASE_SHAPED if args.base_shaped else TINY)
    shape.update({k: getattr(args, k) for k in ("layers", "vocab") if getattr(args, k) is not None})
    train_tokenizer(texts, out, vocab_size=shape["vocab"], seed=0, log=lambda m: None)
    shape["vocab"] = Tokenizer.load(out).vocab_size
    random_albert(shape).save_pretrained(out)
    return out, shape


def st_preprocess(model):
    """sentence-transformers' tokenization call: `preprocess` (6.x), `tokenize` before."""
    return getattr(model, "preprocess", None) or model.tokenize


def st_tokenize_all(model, texts: list[str], batch: int) -> None:
    """What `encode` tokenizes: the texts longest first, B at a time."""
    ordered = sorted(texts, key=len, reverse=True)
    tokenize = st_preprocess(model)
    for i in range(0, len(ordered), batch):
        tokenize(ordered[i:i + batch])


def parity(ours: np.ndarray, theirs: np.ndarray) -> dict:
    return {"max_abs": float(np.abs(ours - theirs).max()), "min_cosine": min_cosine(ours, theirs)}


def side(seconds: list[float], tokenize: list[float], n: int) -> dict:
    median = statistics.median(seconds)
    return {"median_s": round(median, 4), "best_s": round(min(seconds), 4), "sentences_per_s": round(n / median, 1),
            "tokenize_median_s": round(statistics.median(tokenize), 4),
            "forward_and_rest_median_s": round(median - statistics.median(tokenize), 4), "rounds_s": seconds}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)  # the tokenizers library's pool, built at its first use
    torch.set_num_threads(args.threads)
    try:
        import sentence_transformers
    except ImportError:
        print("bench_embed: sentence-transformers is not installed (pip install -e '.[dev]')", file=sys.stderr)
        return 1
    from albertlm.export import ExportSettings, export_model

    log = lambda message: print(message, file=sys.stderr)  # noqa: E731
    started = time.perf_counter()
    texts, source = sentences(args)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        try:
            if args.model is not None:
                model_dir, shape = args.model, None
            else:
                model_dir, shape = random_model_dir(args, texts, tmp / "albert")
            export_model(model_dir, tmp / "st", ExportSettings(format="sentence-transformers",
                                                                max_seq_length=args.max_seq_length))
            ours: Embedder = load_embedder(model_dir, EmbedSettings(max_seq_length=args.max_seq_length, device="cpu",
                                                                    progress=False))
        except AlbertlmError as exc:
            print(f"bench_embed: {exc}", file=sys.stderr)
            return 1
        if hasattr(ours.vocabulary, "num_threads"):
            ours.vocabulary.num_threads = args.threads
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            st = sentence_transformers.SentenceTransformer(str(tmp / "st"), device="cpu")
    st.eval()

    def st_encode() -> np.ndarray:
        return st.encode(texts, batch_size=args.batch, convert_to_numpy=True, show_progress_bar=False)

    check = parity(ours.encode(texts, args.batch), st_encode())
    lengths = [len(r) for r in ours.inputs(texts)]
    fns = {"ours": lambda: ours.encode(texts, args.batch), "sentence-transformers": st_encode,
           "ours_tokenize": lambda: ours.inputs(texts),
           "sentence-transformers_tokenize": lambda: st_tokenize_all(st, texts, args.batch)}
    quiet = Quiet(args.max_foreign, args.max_wait)
    timing = compare(fns, args.rounds, quiet, log, min_sample_s=args.min_sample_s)
    s = timing["seconds"]
    result = {
        "model": str(args.model) if args.model is not None else {"random": True, **shape},
        "texts": {"source": source, "count": len(texts), "tokens_mean": round(float(np.mean(lengths)), 1),
                  "tokens_max": int(max(lengths))},
        "settings": {"threads": args.threads, "batch": args.batch, "rounds": args.rounds, "pooling": ours.pooling,
                     "normalize": ours.normalize, "max_seq_length": ours.max_seq_length,
                     "max_foreign": args.max_foreign},
        "versions": {"sentence-transformers": sentence_transformers.__version__},
        "ours": side(s["ours"], s["ours_tokenize"], len(texts)),
        "sentence-transformers": side(s["sentence-transformers"], s["sentence-transformers_tokenize"], len(texts)),
        "parity": check,
        "foreign_cores": timing["foreign_cores"], "discarded_rounds": timing["discarded"],
        "waited_for_quiet_s": round(quiet.waited_s, 1)}
    speedup = result["sentence-transformers"]["median_s"] / result["ours"]["median_s"]
    result["speedup_sentences_per_s"] = round(speedup, 3)
    targets = [Target(f"albertlm embed / sentence-transformers encode, sentences/s ({args.threads} threads, batch "
                      f"{args.batch})", round(speedup, 3), 1.5),
               Target("ours vs sentence-transformers: min cosine", check["min_cosine"], 0.9999, unit="")]
    publish(envelope("benchmarks.bench_embed", argv if argv is not None else sys.argv[1:], result, targets,
                     started=started), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
