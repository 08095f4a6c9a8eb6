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

With `--scale MB [MB ...]` it measures instead the build at scale: a deterministic corpus (runs of
8-40 consecutive KJV verses, one document each, drawn with a fixed seed) of each size, every size a
prefix of the next (Parquet parts linked, not copied). Each size is built as Parquet by
`albertlm data build` in its own process with --workers workers: wall and build seconds, tokens/s,
the RSS of the build's whole process tree sampled every 0.5 s (peak and timeline), input and output
bytes, seconds to the first shard, the time to the first batch on the result. The smallest size is
also built with one worker (tokens/s per worker against raw SentencePiece on one thread); the
`--formats-at` size is also written and built as lines, JSON lines and Arrow (the shards compared);
`--kill-at` SIGKILLs that size's build once half its shards are on disk, runs it again and compares
with the uninterrupted build; `--first-step` times the first training step on the largest build
(the splits opened, albert-mini built, one batch, forward, backward, AdamW step, in a fresh process).

Usage:
    python -m benchmarks.bench_data [--workers 2] [--vocab 8000] [--seq 128] [--out benchmarks/results/data.json]
    python -m benchmarks.bench_data --scale 500 1000 2000 4000 --formats-at 1000 --kill-at 1000 --first-step \
        --work DIR_WITH_20_GB_FREE --out benchmarks/results/data-scale.json
Prints the results envelope (benchmarks/harness.py; targets: per-worker throughput at least 25% of raw
SentencePiece, peak memory at 4x the corpus under 1.3x that at 1x; at scale: peak RSS under 2 GB and
flat, per-worker throughput at least 30% of raw SentencePiece, identical shards across formats and
after a kill, the first training step under 30 s), and writes it to --out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness import Target, envelope, publish, tree_rss


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


def _child_json(code: str) -> dict:
    """Run `code` in a fresh interpreter; the JSON object its last line of stdout prints."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


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
    return _child_json(code)


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


def write_scale_corpus(work: Path, sizes_mb: Sequence[float], formats=SCALE_FORMATS, text_mb: float | None = None,
                       seed: int = 0, chunk: int = 2000) -> tuple[dict[float, dict[str, str]], dict[float, int]]:
    """The same deterministic documents in every format, streamed to disk chunk by chunk.

    The documents are written once, up to the largest size. Parquet goes into one file per stretch
    between consecutive sizes (`parts/part-K.parquet`), and the corpus of each size is a folder of hard
    links to the first parts (`parquet-MB/`): the 0.5 GB corpus is the first documents of the 4 GB one,
    without a second copy on disk. The other formats are written up to `text_mb` (one of the sizes; by
    default the smallest): the same documents as the Parquet corpus of that size.

    Args:
        work: folder for the files.
        sizes_mb: corpus sizes in megabytes (10^6 bytes) of text (as the lines file holds it).
        formats: which of SCALE_FORMATS to write.
        text_mb: the size at which the formats other than Parquet are written.
        seed: seed of the document draws.
        chunk: documents per write (a Parquet row group, an Arrow record batch).
    Returns:
        ({size: {format: corpus spec}}, {size: number of documents}).
    """
    import numpy as np

    from albertlm.data.corpus import Corpus
    from albertlm.data.sentences import split_sentences

    sizes = sorted(set(sizes_mb))
    text_mb = sizes[0] if text_mb is None else text_mb
    if text_mb not in sizes:
        raise ValueError(f"text_mb {text_mb} is not one of the sizes {sizes}")
    # Verses split as the row formats split text, so every format yields the same documents (and shards).
    verses = [split_sentences(v) for v in Corpus("kjv").sentences()]
    rng = np.random.default_rng(seed)
    text_formats = [f for f in formats if f != "parquet"]
    paths = {"lines": work / "scale.txt", "jsonl": work / "scale.jsonl", "arrow": work / "scale.arrow"}
    files = {f: open(paths[f], "w", encoding="utf-8") for f in ("lines", "jsonl") if f in text_formats}
    import pyarrow as pa
    import pyarrow.parquet  # noqa: F401 - loads pa.parquet

    schema = pa.schema([("text", pa.string())])
    arrow = pa.ipc.new_stream(str(paths["arrow"]), schema) if "arrow" in text_formats else None  # save_to_disk's layout
    (work / "parts").mkdir(exist_ok=True)
    parts: list[Path] = []
    documents: dict[float, int] = {}
    written, count = 0, 0

    def flush(batch: list[str], parquet) -> None:
        table = pa.table({"text": batch}, schema=schema)
        if parquet is not None:
            parquet.write_table(table)  # one row group per chunk
        if written_text:
            if "lines" in files:
                files["lines"].write("".join(doc + "\n\n" for doc in batch))
            if "jsonl" in files:
                files["jsonl"].write("".join(json.dumps({"text": doc}) + "\n" for doc in batch))
            if arrow is not None:
                arrow.write_table(table)  # one record batch per chunk

    for size in sizes:
        written_text = size <= text_mb
        part = work / "parts" / f"part-{len(parts):03d}.parquet"
        parquet = pa.parquet.ParquetWriter(str(part), schema) if "parquet" in formats else None
        batch: list[str] = []
        while written < size * 1e6:
            n = int(rng.integers(8, 41))
            start = int(rng.integers(0, len(verses) - n))
            batch.append("\n".join(sentence for verse in verses[start:start + n] for sentence in verse))
            written += len(batch[-1].encode("utf-8")) + 2
            if len(batch) == chunk:
                flush(batch, parquet)
                count, batch = count + len(batch), []
        if batch:
            flush(batch, parquet)
            count += len(batch)
        if parquet is not None:
            parquet.close()
            parts.append(part)
        documents[size] = count
    for fh in files.values():
        fh.close()
    if arrow is not None:
        arrow.close()
    specs: dict[float, dict[str, str]] = {}
    for k, size in enumerate(sizes):
        specs[size] = {}
        if "parquet" in formats:
            folder = work / f"parquet-{size:g}"
            folder.mkdir(exist_ok=True)
            for part in parts[:k + 1]:
                link = folder / part.name
                if not link.exists():
                    os.link(part, link)
            specs[size]["parquet"] = f"parquet:{folder}"
        if size == text_mb:
            specs[size].update({"lines": f"lines:{paths['lines']}", "jsonl": str(paths["jsonl"]),
                                "arrow": f"arrow:{paths['arrow']}"})
            specs[size] = {f: specs[size][f] for f in formats if f in specs[size]}
    return specs, documents


def _spec_path(spec: str) -> Path:
    return Path(spec.split(":", 1)[1]) if spec.split(":", 1)[0] in ("lines", "parquet", "arrow") else Path(spec)


def _input_bytes(spec: str) -> int:
    path = _spec_path(spec)
    return sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size


def _shards_sha256(out: Path) -> str:
    digest = hashlib.sha256()
    for shard in sorted(out.glob("*.shard")):
        with open(shard, "rb") as fh:
            while block := fh.read(1 << 24):
                digest.update(block)
    return digest.hexdigest()


def _build_argv(corpus: str, tok: str, out: str, seq: int, workers: int, shard_examples: int) -> list[str]:
    return ["albertlm", "data", "build", "--corpus", corpus, "--tokenizer", tok, "--out", out, "--max-seq-length",
            str(seq), "--workers", str(workers), "--shard-examples", str(shard_examples), "--no-progress"]


def timed_build(corpus: str, tok: str, out: Path, seq: int, workers: int, shard_examples: int,
                kill_after_shards: int | None = None, interval_s: float = 0.5) -> dict:
    """`albertlm data build` as a user runs it, in its own process: wall seconds, seconds to the first
    training shard on disk, and the RSS of the whole process tree sampled every `interval_s` (its peak,
    and a timeline of at most 60 points). With `kill_after_shards`, SIGKILL the tree once that many
    training shards are on disk and return what was there."""
    proc = subprocess.Popen(_build_argv(corpus, tok, str(out), seq, workers, shard_examples),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    t0, wall0 = time.perf_counter(), time.time()
    timeline, first_shard, killed = [], None, False
    first = out / "train-00000.shard"  # an interrupted build's stale one is removed first: count only a new one
    while proc.poll() is None:
        elapsed = time.perf_counter() - t0
        timeline.append((round(elapsed, 1), round(tree_rss(proc.pid) / 2**20, 1)))
        if first_shard is None and first.exists() and first.stat().st_mtime >= wall0:
            first_shard = elapsed
        if kill_after_shards is not None and len(list(out.glob("train-*.shard"))) >= kill_after_shards:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(interval_s if kill_after_shards is None else min(interval_s, 0.05))
    stdout, stderr = proc.communicate()
    seconds = time.perf_counter() - t0
    if not killed and proc.returncode != 0:
        raise RuntimeError(f"data build failed ({proc.returncode}): {stderr.strip()[-500:]}")
    step = max(1, len(timeline) // 60)
    result = {"wall_seconds": seconds, "first_shard_s": first_shard,
              "peak_rss_mb_tree": max((r for _, r in timeline), default=None),
              "rss_timeline_mb": timeline[::step] + timeline[-1:]}
    if killed:
        result.update(killed_after_s=seconds, shards_on_disk=len(list(out.glob("train-*.shard"))),
                      temporaries=len([p for p in out.iterdir() if p.name.startswith(".") or ".tmp" in p.name]),
                      meta_json=(out / "meta.json").exists())
        return result
    meta = json.loads((out / "meta.json").read_text())
    result.update({k: meta[k] for k in ("text_tokens", "seconds", "tokens_per_s", "tokens_per_s_per_worker",
                                        "documents") if k in meta},
                  restart=meta.get("restart"), restart_line=next((l for l in stderr.splitlines()
                                                                  if l.startswith("restarted")), None),
                  output_bytes=sum(p.stat().st_size for p in out.iterdir()),
                  train_shards=len(list(out.glob("train-*.shard"))))
    return result


def first_step_child(out: str, preset: str = "albert-mini", batch: int = 32) -> dict:
    """Seconds from opening a built directory to the end of the first optimizer step on it, in a fresh
    interpreter: the training and held-out splits opened as `albertlm pretrain` opens them, the
    preset's model built, one batch collated, one forward, backward and AdamW step."""
    code = ("import json,time; t0=time.perf_counter(); import torch; "
            "from albertlm.data.loader import PretrainingDataset, collate; "
            "from albertlm.config import get_preset; from albertlm.model import AlbertForPreTraining; "
            "t1=time.perf_counter(); "
            f"tr=PretrainingDataset({out!r}, 'train', seed=0); ho=PretrainingDataset({out!r}, 'heldout', seed=0, shuffle=False); "
            f"m=AlbertForPreTraining(get_preset({preset!r}, vocab_size=tr.vocab_size)); "
            "opt=torch.optim.AdamW(m.parameters(), lr=1e-4); it=iter(tr); "
            f"b=collate([next(it) for _ in range({batch})], special=tr.special_ids); "
            "m(**b).loss.backward(); opt.step(); t2=time.perf_counter(); "
            "print(json.dumps({'seconds': t2-t1, 'import_seconds': t1-t0, 'examples': tr.num_examples, "
            "'shards': len(tr.paths), 'shards_opened': len(tr._open)}))")
    return _child_json(code)


def scale(args: argparse.Namespace, work: Path, tok: Path) -> tuple[dict, list[Target]]:
    """The builds at scale (module docstring): each size as Parquet with --workers workers; the smallest
    also with one worker, against raw SentencePiece; every format at --formats-at; a build SIGKILLed
    half way and run again at --kill-at; the first training step on the largest build."""
    sizes = sorted(set(args.scale))
    text_mb = args.formats_at if args.formats_at is not None else sizes[0]
    t = time.perf_counter()
    specs, documents = write_scale_corpus(work, sizes, args.formats, text_mb=text_mb)
    result = {"sizes_mb": sizes, "documents": {f"{s:g}": documents[s] for s in sizes},
              "write_seconds": time.perf_counter() - t, "workers": args.workers, "seq": args.seq,
              "shard_examples": args.shard_examples, "formats_at_mb": text_mb, "builds": {}, "formats": {}}
    from albertlm.data.corpus import Corpus

    result["raw_sentencepiece_1_thread"] = raw_sentencepiece(tok, list(Corpus("kjv").sentences()))
    builds = result["builds"]

    def build(name: str, spec: str, workers: int, keep: bool = False, **kw) -> dict:
        out = work / "out" / name.replace(" ", "_").replace(",", "")
        run = timed_build(spec, str(tok), out, args.seq, workers, args.shard_examples, **kw)
        run["input_bytes"] = _input_bytes(spec)
        if "killed_after_s" not in run:
            run["shards_sha256"] = _shards_sha256(out)
            run["first_batch"] = first_batch_child(str(out))
        if not keep:
            shutil.rmtree(out)
        return run

    main_fmt = "parquet" if "parquet" in args.formats else args.formats[0]
    for size in sizes:
        if main_fmt in specs[size]:
            keep = size == sizes[-1] and args.first_step
            builds[f"{main_fmt} {size:g} MB, {args.workers} workers"] = run = build(
                f"{main_fmt}-{size:g}-w{args.workers}", specs[size][main_fmt], args.workers, keep=keep)
            print(f"{main_fmt} {size:g} MB: {run['wall_seconds']:.0f} s, peak RSS {run['peak_rss_mb_tree']:.0f} MB",
                  file=sys.stderr, flush=True)
            if keep:
                out = work / "out" / f"{main_fmt}-{size:g}-w{args.workers}"
                result["first_step"] = {"size_mb": size, **first_step_child(str(out))}
                shutil.rmtree(out)
    one = f"{main_fmt} {sizes[0]:g} MB, 1 worker"
    if args.workers != 1:
        builds[one] = build(f"{main_fmt}-{sizes[0]:g}-w1", specs[sizes[0]][main_fmt], 1)
    for fmt, spec in specs[text_mb].items():
        run = builds.get(f"{fmt} {text_mb:g} MB, {args.workers} workers") or build(
            f"{fmt}-{text_mb:g}-w{args.workers}", spec, args.workers)
        result["formats"][fmt] = {k: run[k] for k in ("shards_sha256", "wall_seconds", "tokens_per_s",
                                                       "peak_rss_mb_tree", "input_bytes")}
    result["identical_shards"] = len({r["shards_sha256"] for r in result["formats"].values()}) == 1
    if args.kill_at:
        spec = specs[args.kill_at][main_fmt]
        reference = builds.get(f"{main_fmt} {args.kill_at:g} MB, {args.workers} workers")
        expected = max(2, reference["train_shards"] // 2) if reference else 2
        name = f"kill-{args.kill_at:g}"
        out = work / "out" / name
        killed = timed_build(spec, str(tok), out, args.seq, args.workers, args.shard_examples,
                             kill_after_shards=expected)
        if "killed_after_s" in killed:
            again = build(name, spec, args.workers)
            result["kill_restart"] = {"size_mb": args.kill_at, "killed": killed, "rerun": again,
                                      "equal_to_uninterrupted": bool(reference) and again["shards_sha256"] == reference["shards_sha256"]}
        else:  # the build finished before half its shards were seen: nothing was interrupted
            shutil.rmtree(out)
            result["kill_restart"] = {"size_mb": args.kill_at, "killed": None, "finished_before_the_kill": True}
    raw = result["raw_sentencepiece_1_thread"]["tokens_per_s"]
    peaks = {k: v["peak_rss_mb_tree"] for k, v in builds.items() if k.startswith(main_fmt) and f"{args.workers} workers" in k}
    result["per_worker_fraction_of_raw"] = builds[one]["tokens_per_s"] / raw if one in builds else None
    goals = [Target(f"data build: peak RSS of the largest build ({sizes[-1]:g} MB, the process tree)",
                    builds[f"{main_fmt} {sizes[-1]:g} MB, {args.workers} workers"]["peak_rss_mb_tree"], 2048,
                    higher_is_better=False, unit=" MB"),
             Target(f"data build: peak RSS at {sizes[-1]:g} MB over {sizes[0]:g} MB (flat)",
                    max(peaks.values()) / min(peaks.values()), 1.1, higher_is_better=False),
             Target(f"data build: tokens/s per worker over raw SentencePiece ({one})",
                    result["per_worker_fraction_of_raw"], 0.30, unit=""),
             Target(f"data build: the {len(result['formats'])} formats at {text_mb:g} MB give identical shards",
                    float(result["identical_shards"]), 1.0, unit="")]
    if "kill_restart" in result:
        equal = result["kill_restart"].get("equal_to_uninterrupted")
        goals.append(Target("data build: killed half way and run again equals the uninterrupted build",
                            None if equal is None else float(equal), 1.0, unit=""))
    if "first_step" in result:
        goals.append(Target(f"first training step on the {sizes[-1]:g} MB build", result["first_step"]["seconds"], 30,
                            higher_is_better=False, unit=" s"))
    return result, goals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--out", default=None, help="also write the JSON here")
    ap.add_argument("--scale", type=float, nargs="+", default=None, metavar="MB",
                    help="measure instead builds of about MB megabytes of text (several sizes: each a prefix of the next)")
    ap.add_argument("--formats-at", type=float, default=None, metavar="MB",
                    help="with --scale: the size built in every format (default: the smallest)")
    ap.add_argument("--kill-at", type=float, default=None, metavar="MB",
                    help="with --scale: SIGKILL the build of this size half way, run it again, compare")
    ap.add_argument("--first-step", action="store_true",
                    help="with --scale: time the first training step on the largest build")
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
        if args.formats_at is not None and args.formats_at not in args.scale:
            ap.error(f"--formats-at {args.formats_at:g} is not one of the --scale sizes")
        if args.kill_at is not None and args.kill_at not in args.scale:
            ap.error(f"--kill-at {args.kill_at:g} is not one of the --scale sizes")
        found, goals = scale(args, work, tok)
        publish(envelope("benchmarks.bench_data", argv, {"vocab": args.vocab, **found}, goals, started), args.out)
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
