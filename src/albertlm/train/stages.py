"""A pretraining run's stages: its tokenizer and data builds, made once and checked against the
settings on every later start (a rerun with other settings refuses, naming saved and new values).

The tokenizer is trained on the corpus, or copied from the recipe's `tokenizer` directory; either
way the data builds record the sha256 of the vocabulary file (spiece.model or vocab.txt) that made
them, and a build whose vocabulary differs from the run's tokenizer/ is refused."""

from __future__ import annotations

import dataclasses
import json
import shutil
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
    """What the tokenizer stage depends on: the given directory and its vocabulary, or the training settings."""
    from albertlm.tokenizer import vocabulary_fingerprint

    if recipe.tokenizer is not None:  # identified by its content: the directory may move
        return {"source": "copied", "sha256": vocabulary_fingerprint(recipe.tokenizer)["sha256"]}
    return {"source": "trained", "corpus": recipe.corpus, "vocab_size": recipe.vocab_size, "seed": recipe.build_seed}


def _vocabulary_sha256(tok_dir: Path) -> str | None:
    """The sha256 of the run's vocabulary file, None before the tokenizer stage has run."""
    from albertlm.tokenizer import MODEL_FILE, VOCAB_FILE, vocabulary_fingerprint

    if not ((tok_dir / MODEL_FILE).is_file() or (tok_dir / VOCAB_FILE).is_file()):
        return None
    return vocabulary_fingerprint(tok_dir)["sha256"]


def copy_tokenizer(source: str | Path, tok_dir: Path) -> None:
    """Copy a vocabulary directory's tokenizer files (spiece.model / vocab.txt, tokenizer_config.json).

    The vocabulary file is copied byte for byte (its sha256 identifies it); a source without
    tokenizer_config.json (Google's bare vocab.txt) gets the one `save` writes, so the final model
    directory loads in transformers with the right tokenizer class.
    """
    from albertlm.tokenizer import CONFIG_FILE, TOKENIZER_FILES, load_vocabulary

    source = Path(source)
    if not source.is_dir():
        raise AlbertlmError(f"{source}: the recipe's tokenizer must be a directory (with spiece.model or vocab.txt)")
    vocabulary = load_vocabulary(source)  # refuses a directory without a usable vocabulary, naming it
    tok_dir.mkdir(parents=True, exist_ok=True)
    if not (source / CONFIG_FILE).is_file():
        vocabulary.save(tok_dir)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, tok_dir / name)


def check_stages(recipe: PretrainRecipe, run_dir: Path) -> None:
    """Refuse (one line: saved vs new values and the fix) to reuse a tokenizer or data build that a
    run directory holds from other settings."""
    from albertlm.tokenizer import CONFIG_FILE

    problems: list[str] = []

    def compare(stage: str, saved: dict[str, Any], wanted: dict[str, Any]) -> None:
        diffs = [f"{k}: saved {saved[k]!r}, now {v!r}" for k, v in wanted.items() if k in saved and saved[k] != v]
        if diffs:
            problems.append(f"{stage} ({'; '.join(diffs)})")

    tok_dir = run_dir / "tokenizer"
    stage: dict[str, Any] = {}
    if (tok_dir / STAGE_FILE).exists():
        stage = read_json_object(tok_dir / STAGE_FILE)
        compare("tokenizer/", stage, _tokenizer_stage(recipe))
    elif (tok_dir / CONFIG_FILE).exists():  # placed there by hand: what its config records
        saved = read_json_object(tok_dir / CONFIG_FILE).get("albertlm", {})
        compare("tokenizer/", {"vocab_size": saved["requested_vocab_size"]} if "requested_vocab_size" in saved else {},
                {"vocab_size": recipe.vocab_size})
    vocab_sha = _vocabulary_sha256(tok_dir)
    if recipe.tokenizer is not None and vocab_sha is not None and "sha256" not in stage:
        compare("tokenizer/", {"sha256": vocab_sha}, {"sha256": _tokenizer_stage(recipe)["sha256"]})
    short_dir = curriculum_dir(run_dir, recipe)
    for directory, length in ((run_dir / "data", recipe.build.max_seq_length), (short_dir, recipe.curriculum_seq_length)):
        if directory is None or not (directory / "meta.json").exists():
            continue
        meta = read_json_object(directory / "meta.json")
        saved = {**meta.get("settings", {}), "corpus": meta.get("corpus")}
        wanted = {**dataclasses.asdict(recipe.build_settings(length)), "corpus": recipe.corpus}
        wanted.pop("workers")  # how many processes built it changes nothing in it
        compare(f"{directory.name}/", saved, wanted)
        built_with = meta.get("tokenizer", {}).get("sha256") if isinstance(meta.get("tokenizer"), dict) else None
        if vocab_sha is not None and built_with is not None and built_with != vocab_sha:
            problems.append(f"{directory.name}/ (built with another vocabulary than tokenizer/ holds)")
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
        if _vocabulary_sha256(tok_dir) is None:
            if recipe.tokenizer is not None:
                copy_tokenizer(recipe.tokenizer, tok_dir)
            else:
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
