"""Training throughput, inference latency and memory of the presets on this machine (paper Table 2).

The paper's "Speedup" column is training throughput relative to BERT-large (TPU, batch 4096 x 512).
Here every preset runs the same small workload, so the ratios compare compute per token:
  - training: forward + backward of AlbertForPreTraining (MLM on 15% of the positions + SOP) on a
    random batch of B x S tokens; the median of `repeats` timed steps after one warm-up step. The
    optimizer step is left out (its cost grows with the *parameter* count, which favours ALBERT a
    little; so does the all-reduce of data-parallel training, see analysis/params.allreduce_bytes);
  - inference: the backbone's forward pass (AlbertModel) under torch.inference_mode, median latency;
  - memory: parameter bytes (exact: count x 4 bytes in fp32); training activations measured as the
    bytes of the tensors autograd saves for the backward pass (deduplicated by storage, parameters
    excluded), the bulk of training memory beyond the 4 x parameter bytes of weights + gradients +
    Adam's two moments; and the peak resident memory (RSS) that one inference forward pass adds on
    top of the built model, measured in a fresh process (Linux /proc: VmHWM after resetting it
    through /proc/self/clear_refs once the model is built).
A BERT "twin" of an ALBERT config has the same shape with E = H and nothing shared: the same
compute per token (up to the small E-dependent terms) and up to L times the parameters.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from albertlm.analysis.params import count_parameters, flops_per_token
from albertlm.analysis.results import InferenceSpeed, PeakRss, SpeedResults, TrainingSpeed
from albertlm.analysis.settings import SpeedSettings
from albertlm.config import AlbertConfig, get_preset
from albertlm.vocab import IGNORE_INDEX

PAPER_SPEEDUP = {"bert-base": 4.7, "bert-large": 1.0, "albert-base": 5.6, "albert-large": 1.7,
                 "albert-xlarge": 0.6, "albert-xxlarge": 0.3}
"""Table 2's Speedup column: training throughput relative to BERT-large."""


def bert_twin(config: AlbertConfig) -> AlbertConfig:
    """The BERT of the same shape: E = H, nothing shared (same layers, heads, FFN, vocabulary)."""
    return config.replace(embedding_size=config.hidden_size, sharing="none")


def random_batch(config: AlbertConfig, batch_size: int, seq_len: int, generator: torch.Generator,
                 mlm_fraction: float = 0.15) -> dict[str, torch.Tensor]:
    """A pretraining batch of random ids: [B, S] inputs, labels on `mlm_fraction` of the positions."""
    ids = torch.randint(5, config.vocab_size, (batch_size, seq_len), generator=generator)  # no special ids
    labels = torch.full_like(ids, IGNORE_INDEX)
    picked = torch.rand(batch_size, seq_len, generator=generator) < mlm_fraction
    picked[:, 1] = True  # at least one prediction per sequence
    labels[picked] = ids[picked]
    types = torch.zeros_like(ids)
    types[:, seq_len // 2:] = 1
    return {"input_ids": ids, "token_type_ids": types, "labels": labels,
            "sentence_order_label": torch.randint(0, 2, (batch_size,), generator=generator)}


def saved_activation_bytes(run: Callable[[], torch.Tensor], parameters) -> int:
    """Bytes of the tensors autograd saves for the backward pass while `run()` executes.

    Deduplicated by storage; storages of `parameters` (weights saved by reference) are excluded.
    """
    param_storages = {p.untyped_storage().data_ptr() for p in parameters}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        if storage.data_ptr() not in param_storages:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(seen.values())


def time_training(config: AlbertConfig, batch_size: int, seq_len: int, repeats: int, seed: int = 0) -> dict:
    """Median seconds of a forward + backward pretraining step, tokens/s and saved activation bytes."""
    from albertlm.model import AlbertForPreTraining

    torch.manual_seed(seed)
    model = AlbertForPreTraining(config).train()
    batch = random_batch(config, batch_size, seq_len, torch.Generator().manual_seed(seed))
    holder: dict[str, torch.Tensor] = {}

    def forward() -> torch.Tensor:
        holder["loss"] = model(**batch).loss
        return holder["loss"]

    activations = saved_activation_bytes(forward, model.parameters())  # the warm-up step's forward
    holder.pop("loss").backward()
    times = []
    for _ in range(repeats):
        # gradients stay allocated between steps (zeroed in place), as in a training loop that keeps them:
        # re-allocating BERT-large's 1.3 GB of gradients every step would time page faults, not compute
        model.zero_grad(set_to_none=False)
        start = time.perf_counter()
        model(**batch).loss.backward()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return {"seconds": seconds, "times": times, "tokens_per_s": batch_size * seq_len / seconds,
            "activation_bytes": activations}


def fastest_threads(config: AlbertConfig, batch_size: int, seq_len: int, candidates: tuple[int, ...],
                    repeats: int = 2, seed: int = 0) -> tuple[int, dict[int, float]]:
    """The torch thread count, among `candidates`, that runs a forward + backward step fastest.

    On a machine shared with other jobs, more threads than free cores can be many times slower
    (OpenMP threads wait for each other at every operation). Leaves torch at the chosen count.

    Returns:
        (the fastest count, {count: median seconds per step}).
    """
    from albertlm.model import AlbertForPreTraining

    torch.manual_seed(seed)
    model = AlbertForPreTraining(config).train()
    batch = random_batch(config, batch_size, seq_len, torch.Generator().manual_seed(seed))
    seconds: dict[int, float] = {}
    for n in dict.fromkeys(candidates):
        torch.set_num_threads(n)
        times = []
        for k in range(repeats + 1):
            model.zero_grad(set_to_none=False)
            start = time.perf_counter()
            model(**batch).loss.backward()
            if k:  # the first call warms up
                times.append(time.perf_counter() - start)
        seconds[n] = statistics.median(times)
    best = min(seconds, key=seconds.get)
    torch.set_num_threads(best)
    return best, seconds


def time_inference(config: AlbertConfig, batch_size: int, seq_len: int, repeats: int, seed: int = 0) -> dict:
    """Median seconds of the backbone's forward pass under inference_mode."""
    from albertlm.model import AlbertModel

    torch.manual_seed(seed)
    model = AlbertModel(config).eval()
    ids = random_batch(config, batch_size, seq_len, torch.Generator().manual_seed(seed))["input_ids"]
    times = []
    with torch.inference_mode():
        model(ids)  # warm-up
        for _ in range(repeats):
            start = time.perf_counter()
            model(ids)
            times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times), "times": times}


# ---------------------------------------------------------------------------- peak RSS in a fresh process
def status_kib(field: str) -> int | None:
    """A kB field of /proc/self/status (VmRSS, VmHWM, ...), or None where there is no /proc."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS; False where the kernel refuses.

    Writing "5" to /proc/self/clear_refs does it (Linux >= 4.0).
    """
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def rss_child(request: str) -> None:
    """Entry point of the measuring process: build, reset the peak, run one forward, print JSON."""
    import gc

    from albertlm.model import AlbertModel

    r = json.loads(request)
    if r.get("threads"):
        torch.set_num_threads(r["threads"])
    config = AlbertConfig.from_dict(r["config"])
    model = AlbertModel(config).eval()
    ids = random_batch(config, r["batch_size"], r["seq_len"], torch.Generator().manual_seed(0))["input_ids"]
    gc.collect()
    built = status_kib("VmRSS")
    reset = reset_peak_rss()
    with torch.inference_mode():
        model(ids)
    peak = status_kib("VmHWM")
    print(json.dumps({"rss_built_kib": built, "peak_kib": peak, "peak_reset": reset}))


def inference_peak_rss(config: AlbertConfig, batch_size: int, seq_len: int, threads: int | None = None,
                       timeout: float = 600) -> dict | None:
    """{rss_built_kib, peak_kib, peak_reset} of one inference forward in a fresh Python process,
    or None where /proc is unavailable or the process fails."""
    if not Path("/proc/self/status").exists():
        return None
    import albertlm

    request = json.dumps({"config": config.to_dict(), "batch_size": batch_size, "seq_len": seq_len,
                          "threads": threads})
    src = str(Path(albertlm.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    code = "import sys; from albertlm.analysis.speed import rss_child; rss_child(sys.argv[1])"
    try:
        done = subprocess.run([sys.executable, "-c", code, request], capture_output=True, text=True,
                              timeout=timeout, env=env)
        return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return None


# ---------------------------------------------------------------------------- the section
def measure_speed(settings: SpeedSettings, log: Callable[[str], None] = print,
                  configs: dict[str, AlbertConfig] | None = None) -> SpeedResults:
    """Run every measurement of the speed section.

    Args:
        settings: SpeedSettings.
        log: progress lines.
        configs: name -> config for names that are not presets (tests); presets otherwise.
    Returns:
        SpeedResults: the settings, one TrainingSpeed per preset, one InferenceSpeed per model.
    """
    with torch.random.fork_rng(devices=[]):  # it seeds torch's generator; the caller's state is restored
        return _measure_speed(settings, log, configs)


def _measure_speed(settings: SpeedSettings, log: Callable[[str], None],
                   configs: dict[str, AlbertConfig] | None) -> SpeedResults:
    """measure_speed()'s body, run inside a fork of torch's global generator."""

    def config_of(name: str) -> AlbertConfig:
        return (configs or {}).get(name) or get_preset(name)

    training = []
    for name in settings.presets:
        config = config_of(name)
        log(f"speed: training step of {name} ({settings.batch_size} x {settings.seq_len} tokens)")
        r = time_training(config, settings.batch_size, settings.seq_len, settings.repeats, settings.seed)
        count = count_parameters(config)
        training.append({"name": name, **r, "parameters": count.with_heads,
                         "flops_per_token": flops_per_token(config, settings.seq_len),
                         "paper_speedup": PAPER_SPEEDUP.get(name)})
    ref = next((r for r in training if r["name"] == settings.reference), training[0] if training else None)
    rows = [TrainingSpeed(**r, speedup=r["tokens_per_s"] / ref["tokens_per_s"],
                          flops_speedup=ref["flops_per_token"] / r["flops_per_token"]) for r in training]
    inference = []
    for name in settings.inference:
        albert = config_of(name)
        for label, config in ((name, albert), (f"{name} BERT twin", bert_twin(albert))):
            log(f"speed: inference of {label} ({settings.inference_batch_size} x {settings.inference_seq_len})")
            r = time_inference(config, settings.inference_batch_size, settings.inference_seq_len,
                               settings.inference_repeats, settings.seed)
            count = count_parameters(config)
            rss = (inference_peak_rss(config, settings.inference_batch_size, settings.inference_seq_len,
                                      settings.threads) if settings.memory else None)
            inference.append(InferenceSpeed(name=label, pair=name, twin=label != name, **r,
                                            parameters=count.backbone, parameter_bytes=4 * count.backbone,
                                            flops_per_token=flops_per_token(config, settings.inference_seq_len,
                                                                            training=False, mlm_fraction=0.0),
                                            rss=None if rss is None else PeakRss(**rss)))
    return SpeedResults(settings=settings, reference=ref["name"] if ref else None, training=rows,
                        inference=inference)
