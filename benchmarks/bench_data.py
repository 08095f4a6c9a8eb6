"""Data-build throughput and memory, next to the physical limit (raw SentencePiece encoding).

Measures, on the built-in King James corpus (optionally repeated k times):
  * raw SentencePiece: `SentencePieceProcessor.encode(list_of_sentences)` on the same sentences,
    one thread, tokens/s (the cost no pipeline can avoid);
  * `albertlm data build` with 1 and N workers: corpus tokens/s and tokens/s per worker;
  * peak resident memory of a whole build at 1x and 4x the corpus (each build in a fresh process,
    read from getrusage's ru_maxrss of that child).

Usage:
    python benchmarks/bench_data.py [--workers 2] [--vocab 8000] [--seq 128] [--out benchmarks/results/data.json]
Prints JSON; `--markdown` also prints a table row block for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _build_child(corpus: str, tok: str, out: str, seq: int, workers: int) -> dict:
    """Run one build in a fresh interpreter; return its meta plus its peak RSS.

    The child reports its own ru_maxrss (the pipeline's main process) and that of its reaped
    children (the largest worker), so every build is measured on its own.
    """
    code = ("import json,resource; from albertlm.data.build import BuildSettings, build_dataset; "
            f"m=build_dataset({corpus!r}, {tok!r}, {out!r}, BuildSettings(max_seq_length={seq}, workers={workers}), "
            "progress=False); r={k: m[k] for k in ('text_tokens','seconds','tokens_per_s',"
            "'tokens_per_s_per_worker','documents')}; "
            "r['peak_rss_mb_main']=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024; "
            "r['peak_rss_mb_worker']=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024; "
            "print(json.dumps(r))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["peak_rss_mb"] = max(result["peak_rss_mb_main"], result["peak_rss_mb_worker"])
    return result


def raw_sentencepiece(tok_dir: Path, sentences: list[str]) -> dict:
    import sentencepiece as spm

    from albertlm.tokenizer import preprocess_text

    sp = spm.SentencePieceProcessor(model_file=str(tok_dir / "spiece.model"))
    texts = [preprocess_text(s) for s in sentences]
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        ids = sp.encode(texts, num_threads=1)
        best = min(best, time.perf_counter() - t)
    tokens = sum(map(len, ids))
    return {"tokens": tokens, "seconds": best, "tokens_per_s": tokens / best}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args()

    from albertlm.data.corpus import Corpus
    from albertlm.tokenizer import train_tokenizer

    work = Path(tempfile.mkdtemp(prefix="bench-data-"))
    tok = work / "tok"
    train_tokenizer(Corpus("kjv").sentences, tok, vocab_size=args.vocab)
    sentences = list(Corpus("kjv").sentences())
    (work / "kjv.txt").write_text("\n\n".join("\n".join(d.sentences) for d in Corpus("kjv").documents()) + "\n")
    (work / "kjv4.txt").write_text((work / "kjv.txt").read_text() * 4)

    result = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {platform.processor() or ''} "
              f"{__import__('os').cpu_count()} CPUs", "python": platform.python_version(),
              "raw_sentencepiece_1_thread": raw_sentencepiece(tok, sentences), "builds": {}}
    for name, corpus, workers in [("1x, 1 worker", str(work / "kjv.txt"), 1),
                                  (f"1x, {args.workers} workers", str(work / "kjv.txt"), args.workers),
                                  ("4x, 1 worker", str(work / "kjv4.txt"), 1),
                                  (f"4x, {args.workers} workers", str(work / "kjv4.txt"), args.workers)]:
        out = work / name.replace(" ", "").replace(",", "-")
        result["builds"][name] = _build_child(corpus, str(tok), str(out), args.seq, workers)
    raw = result["raw_sentencepiece_1_thread"]["tokens_per_s"]
    one = result["builds"]["1x, 1 worker"]
    result["per_worker_fraction_of_raw"] = one["tokens_per_s_per_worker"] / raw
    result["speedup_4x_workers"] = (result["builds"][f"4x, {args.workers} workers"]["tokens_per_s"]
                                    / result["builds"]["4x, 1 worker"]["tokens_per_s"])
    result["memory_ratio_4x_over_1x"] = (result["builds"][f"4x, {args.workers} workers"]["peak_rss_mb"]
                                         / result["builds"][f"1x, {args.workers} workers"]["peak_rss_mb"])
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
