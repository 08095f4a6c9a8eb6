"""Data-build throughput and memory, next to the physical limit (raw SentencePiece encoding).

Measures, on the built-in King James corpus (optionally repeated k times):
  * raw SentencePiece: `SentencePieceProcessor.encode(list_of_sentences)` on the same sentences,
    one thread, tokens/s (the cost no pipeline can avoid);
  * `albertlm data build` with 1 and N workers: corpus tokens/s and tokens/s per worker;
  * peak resident memory of a whole build at 1x and 4x the corpus (each build in a fresh process:
    its VmHWM from /proc/self/status; getrusage's ru_maxrss where there is no /proc, which on Linux
    starts at the parent's high-water mark, kept across exec);
  * time to the first batch on each build: a fresh process opens the built directory with
    `PretrainingDataset` and collates its first batch (`first_batch`: seconds, shards in the split,
    shards opened, whether the split was small enough to be checksummed at load).

With `--scale MB` it measures instead the build at scale, in each corpus format: a deterministic
corpus of about MB megabytes of text (runs of 8-40 consecutive KJV verses, one document each, drawn
with a fixed seed) is written as lines, JSON lines, Parquet and Arrow, and each is built in a fresh
process: tokens/s, peak RSS, input and output bytes on disk, seconds to the first shard, and the
time to the first batch on the result.

Usage:
    python -m benchmarks.bench_data [--workers 2] [--vocab 8000] [--seq 128] [--out benchmarks/results/data.json]
    python -m benchmarks.bench_data --scale 2000 --workers 16 --out benchmarks/results/data-scale.json
    (the multi-GB run: --scale 5000 --formats lines parquet --work DIR_WITH_40_GB_FREE)
Prints the results envelope (benchmarks/harness.py; targets: per-worker throughput at least 25% of raw
SentencePiece, peak memory at 4x the corpus under 1.3x that at 1x), and writes it to --out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import Target, envelope, publish


def _build_child(corpus: str, tok: str, out: str, seq: int, workers: int, shard_examples: int = 65536) -> dict:
    """Run one build in a fresh interpreter; return its meta plus its peak RSS.

    The child reports its own peak RSS (the pipeline's main process: `_PEAK_RSS_MB`) and the
    ru_maxrss of its reaped children (the largest worker), so every build is measured on its own,
    the seconds from the call to the first training shard on disk (its mtime: shards are written
    atomically), and then a second fresh process times the first batch on the result.
    """
    code = (_PEAK_RSS_MB + "from albertlm.data.build import BuildSettings, build_dataset; "
            f"t0=time.time(); m=build_dataset({corpus!r}, {tok!r}, {out!r}, BuildSettings(max_seq_length={seq}, "
            f"workers={workers}, shard_examples={shard_examples}), "
            "progress=False); r={k: m[k] for k in ('text_tokens','seconds','tokens_per_s',"
            "'tokens_per_s_per_worker','documents')}; "
            f"o=pathlib.Path({out!r}); r['first_shard_s']=(o/'train-00000.shard').stat().st_mtime-t0; "
            "r['output_bytes']=sum(p.stat().st_size for p in o.iterdir()); "
            "r['peak_rss_mb_main']=peak_rss_mb(); "
            "r['peak_rss_mb_worker']=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024; "
            "print(json.dumps(r))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["peak_rss_mb"] = max(result["peak_rss_mb_main"], result["peak_rss_mb_worker"])
    result["first_batch"] = first_batch_child(out)
    return result


_PEAK_RSS_MB = ("import json, pathlib, resource, time\n"
                "def peak_rss_mb():\n"
                "    try: return int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) / 1024\n"
                "    except OSError: return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n")


def first_batch_child(out: str, batch: int = 32) -> dict:
    """Seconds from opening a built directory to its first collated batch, in a fresh interpreter
    (after `import albertlm.data.loader`, whose torch import is timed apart), and what it opened."""
    code = ("import json,time; t0=time.perf_counter(); "
            "from albertlm.data.loader import PretrainingDataset, VERIFY_AT_LOAD_BYTES, collate; "
            f"t1=time.perf_counter(); ds=PretrainingDataset({out!r}); it=iter(ds); "
            f"b=collate([next(it) for _ in range({batch})], special=ds.special_ids); t2=time.perf_counter(); "
            "print(json.dumps({'seconds': t2-t1, 'import_seconds': t1-t0, 'batch': len(b['input_ids']), "
            "'examples': ds.num_examples, 'shards': len(ds.paths), 'shards_opened': len(ds._open), "
            "'checksummed_at_load': sum(p.stat().st_size for p in ds.paths) <= VERIFY_AT_LOAD_BYTES}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


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


SCALE_FORMATS = ("lines", "jsonl", "parquet", "arrow")


def write_scale_corpus(work: Path, megabytes: float, formats=SCALE_FORMATS, seed: int = 0,
                       chunk: int = 2000) -> tuple[dict[str, str], int]:
    """The same deterministic documents in every format, streamed to disk chunk by chunk.

    Args:
        work: folder for the files.
        megabytes: stop once the lines file holds this many megabytes (10^6 bytes) of text.
        formats: which of SCALE_FORMATS to write.
        seed: seed of the document draws.
        chunk: documents per write (a Parquet row group, an Arrow record batch).
    Returns:
        ({format: corpus spec}, number of documents).
    """
    import numpy as np

    from albertlm.data.corpus import Corpus

    from albertlm.data.sentences import split_sentences

    # Verses split as the row formats split text, so every format yields the same documents (and shards).
    verses = [split_sentences(v) for v in Corpus("kjv").sentences()]
    rng = np.random.default_rng(seed)
    paths = {"lines": work / "scale.txt", "jsonl": work / "scale.jsonl", "parquet": work / "scale.parquet",
             "arrow": work / "scale.arrow"}
    text_files = {f: open(paths[f], "w", encoding="utf-8") for f in ("lines", "jsonl") if f in formats}
    pa = writers = None
    if {"parquet", "arrow"} & set(formats):
        import pyarrow as pa
        import pyarrow.parquet  # noqa: F401 - loads pa.parquet

        schema = pa.schema([("text", pa.string())])
        writers = {}
        if "parquet" in formats:
            writers["parquet"] = pa.parquet.ParquetWriter(str(paths["parquet"]), schema)
        if "arrow" in formats:
            writers["arrow"] = pa.ipc.new_stream(str(paths["arrow"]), schema)  # save_to_disk's layout
    written, documents = 0, 0
    while written < megabytes * 1e6:
        batch = []
        while len(batch) < chunk and written < megabytes * 1e6:
            n = int(rng.integers(8, 41))
            start = int(rng.integers(0, len(verses) - n))
            batch.append([sentence for verse in verses[start:start + n] for sentence in verse])
            written += len("\n".join(batch[-1]).encode("utf-8")) + 2
        block = "".join("\n".join(doc) + "\n\n" for doc in batch)
        documents += len(batch)
        if "lines" in text_files:
            text_files["lines"].write(block)
        if "jsonl" in text_files:
            text_files["jsonl"].write("".join(json.dumps({"text": "\n".join(doc)}) + "\n" for doc in batch))
        if writers:
            table = pa.table({"text": ["\n".join(doc) for doc in batch]}, schema=schema)
            for writer in writers.values():
                writer.write_table(table)  # one Parquet row group / one Arrow record batch per chunk
    for fh in text_files.values():
        fh.close()
    for writer in (writers or {}).values():
        writer.close()
    specs = {"lines": f"lines:{paths['lines']}", "jsonl": str(paths["jsonl"]), "parquet": f"parquet:{paths['parquet']}",
             "arrow": f"arrow:{paths['arrow']}"}
    return {f: specs[f] for f in formats}, documents


def scale(args: argparse.Namespace, work: Path, tok: Path) -> dict:
    """The build of a `--scale` megabyte corpus in each format (module docstring)."""
    t = time.perf_counter()
    specs, documents = write_scale_corpus(work, args.scale, args.formats)
    result = {"scale_mb": args.scale, "documents": documents, "write_seconds": time.perf_counter() - t,
              "workers": args.workers, "seq": args.seq, "shard_examples": args.shard_examples, "formats": {}}
    for fmt, spec in specs.items():
        path = Path(spec.split(":", 1)[1] if fmt != "jsonl" else spec)
        run = _build_child(spec, str(tok), str(work / f"out-{fmt}"), args.seq, args.workers, args.shard_examples)
        run["peak_rss_mb"] = max(run["peak_rss_mb_main"], run["peak_rss_mb_worker"])
        run["input_bytes"] = path.stat().st_size
        digest = hashlib.sha256()
        for shard in sorted((work / f"out-{fmt}").glob("*.shard")):
            digest.update(shard.read_bytes())
        run["shards_sha256"] = digest.hexdigest()
        result["formats"][fmt] = run
        shutil.rmtree(work / f"out-{fmt}")  # keep the disk for the next format
    result["identical_shards"] = len({r["shards_sha256"] for r in result["formats"].values()}) == 1
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--out", default=None, help="also write the JSON here")
    ap.add_argument("--scale", type=float, default=None, metavar="MB",
                    help="measure a build of about MB megabytes of text in each format instead")
    ap.add_argument("--formats", nargs="+", default=list(SCALE_FORMATS), choices=SCALE_FORMATS,
                    help="formats of --scale (default: all)")
    ap.add_argument("--shard-examples", type=int, default=65536, help="examples per shard (--scale)")
    ap.add_argument("--work", default=None, help="folder for the corpus and builds (default: a new temporary one)")
    args = ap.parse_args(argv)
    started = time.perf_counter()

    from albertlm.data.corpus import Corpus
    from albertlm.tokenizer import train_tokenizer

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    tok = work / "tok"
    train_tokenizer(Corpus("kjv").sentences, tok, vocab_size=args.vocab)
    if args.scale is not None:
        result = {"vocab": args.vocab, **scale(args, work, tok)}
        publish(envelope("benchmarks.bench_data", argv, result, started=started), args.out)
        return 0
    sentences = list(Corpus("kjv").sentences())
    (work / "kjv.txt").write_text("\n\n".join("\n".join(d.sentences) for d in Corpus("kjv").documents()) + "\n")
    (work / "kjv4.txt").write_text((work / "kjv.txt").read_text() * 4)

    result = {"raw_sentencepiece_1_thread": raw_sentencepiece(tok, sentences), "builds": {}}
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
    goals = [Target("data build: tokens/s per worker over raw SentencePiece (1x, 1 worker)",
                    result["per_worker_fraction_of_raw"], 0.25, unit=""),
             Target("data build: peak RSS at 4x the corpus over 1x", result["memory_ratio_4x_over_1x"], 1.3,
                    higher_is_better=False, unit="")]
    publish(envelope("benchmarks.bench_data", argv, result, goals, started), args.out)
    return 0

if __name__ == "__main__":
    sys.exit(main())
