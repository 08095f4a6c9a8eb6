"""A pretraining run's stages: its tokenizer and data builds, made once and checked against the
settings on every later start (a rerun with other settings refuses, naming saved and new values)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from albertlm.distributed import DistContext, barrier
from albertlm.errors import AlbertlmError
from albertlm.train.pretrain_recipe import PretrainRecipe
from albertlm.utils import atomic_write_text


def curriculum_dir(run_dir: Path, recipe: PretrainRecipe) -> Path | None:
    """Where the short examples of the curriculum phase live (None without a curriculum)."""
    if not recipe.curriculum_seq_length or not recipe.curriculum_steps:
        return None
    return run_dir / f"data-{recipe.curriculum_seq_length}"


STAGE_FILE = "albertlm-stage.json"
"""Written into the tokenizer directory of a run: the settings the tokenizer was trained with."""


def _tokenizer_stage(recipe: PretrainRecipe) -> dict[str, Any]:
    return {"corpus": recipe.corpus, "vocab_size": recipe.vocab_size, "seed": recipe.build_seed}


def check_stages(recipe: PretrainRecipe, run_dir: Path) -> None:
    """Refuse (one line: saved vs new values and the fix) to reuse a tokenizer or data build that a
    run directory holds from other settings."""
    problems: list[str] = []

    def compare(stage: str, saved: dict[str, Any], wanted: dict[str, Any]) -> None:
        diffs = [f"{k}: saved {saved[k]!r}, now {v!r}" for k, v in wanted.items() if k in saved and saved[k] != v]
        if diffs:
            problems.append(f"{stage} ({'; '.join(diffs)})")

    tok_dir = run_dir / "tokenizer"
    if (tok_dir / STAGE_FILE).exists():
        compare("tokenizer/", read_json_object(tok_dir / STAGE_FILE), _tokenizer_stage(recipe))
    elif (tok_dir / "tokenizer_config.json").exists():  # placed there by hand: what its config records
        saved = read_json_object(tok_dir / "tokenizer_config.json").get("albertlm", {})
        compare("tokenizer/", {"vocab_size": saved["requested_vocab_size"]} if "requested_vocab_size" in saved else {},
                {"vocab_size": recipe.vocab_size})
    short_dir = curriculum_dir(run_dir, recipe)
    for directory, length in ((run_dir / "data", recipe.build.max_seq_length), (short_dir, recipe.curriculum_seq_length)):
        if directory is None or not (directory / "meta.json").exists():
            continue
        meta = read_json_object(directory / "meta.json")
        saved = {**meta.get("settings", {}), "corpus": meta.get("corpus")}
        wanted = {**dataclasses.asdict(recipe.build_settings(length)), "corpus": recipe.corpus}
        wanted.pop("workers")  # how many processes built it changes nothing in it
        compare(f"{directory.name}/", saved, wanted)
    if problems:
        raise AlbertlmError(f"{run_dir}: built with other settings: {', '.join(problems)}; pass --restart to start "
                            "over with the new settings, or choose another --name")


def read_json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AlbertlmError(f"{path}: unreadable ({exc.__class__.__name__})") from None
    if not isinstance(value, dict):
        raise AlbertlmError(f"{path}: not a JSON object")
    return value


def prepare_data(recipe: PretrainRecipe, run_dir: Path, ctx: DistContext, progress: bool = True) -> tuple[Path, Path]:
    """Train the tokenizer and build the shards unless the run already has them (rank 0 works, others wait).

    With a curriculum, a second build of the same corpus at curriculum_seq_length goes to data-<length>/.
    """
    from albertlm.data.build import build_dataset
    from albertlm.data.corpus import Corpus
    from albertlm.tokenizer import train_tokenizer

    tok_dir, data_dir = run_dir / "tokenizer", run_dir / "data"
    if ctx.is_main:
        check_stages(recipe, run_dir)
        if not (tok_dir / "spiece.model").exists():
            train_tokenizer(Corpus(recipe.corpus).sentences, tok_dir, vocab_size=recipe.vocab_size,
                            seed=recipe.build_seed, strict=False)
            atomic_write_text(tok_dir / STAGE_FILE, json.dumps(_tokenizer_stage(recipe), indent=1))
        short_dir = curriculum_dir(run_dir, recipe)
        for directory, length in ((data_dir, recipe.build.max_seq_length), (short_dir, recipe.curriculum_seq_length)):
            if directory is None or (directory / "meta.json").exists():
                continue
            build_dataset(recipe.corpus, tok_dir, directory, recipe.build_settings(length), progress=progress)
    barrier(ctx)
    return tok_dir, data_dir
