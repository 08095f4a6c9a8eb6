"""Every subcommand's --help works (docstrings are the help text), and errors are one line."""

import argparse
import subprocess
import sys

import pytest

from albertlm.cli import build_parser, main


def _all_command_paths(parser: argparse.ArgumentParser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from _all_command_paths(sub, (*prefix, name))


PATHS = list(_all_command_paths(build_parser()))


def test_there_are_commands():
    assert ("params",) in PATHS


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_help(path, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*path, "--help"])
    assert exc.value.code == 0
    assert "usage: albertlm" in capsys.readouterr().out


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "albertlm.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("albertlm ")


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_pretrain_options_change_the_named_recipe():
    from albertlm.cli import build_parser, pretrain_recipe
    from albertlm.train.pretrain import RECIPES

    parser = build_parser()
    assert pretrain_recipe(parser.parse_args(["pretrain"])) == RECIPES["quick"]
    paper = pretrain_recipe(parser.parse_args(["pretrain", "--recipe", "paper", "--steps", "10"]))
    assert paper.steps == 10 and paper.batch_size == 4096 and paper.build.max_seq_length == 512 and paper.lr == 0.00176
    quick = pretrain_recipe(parser.parse_args(["pretrain", "--batch-size", "8"]))
    assert quick.batch_size == 8 and quick.preset == RECIPES["quick"].preset


def test_a_full_disk_is_one_line(monkeypatch, capsys):
    import errno

    import albertlm.cli as cli

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "runs/x/checkpoints/.step-1/model.safetensors")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["params"].set_defaults(_run=full)
    assert cli.main(["params"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left" in err and ".step-1/model.safetensors" in err and "intact" in err


def test_every_build_setting_is_a_pretrain_flag():
    from albertlm.cli import build_parser, pretrain_recipe
    from albertlm.train.pretrain import RECIPES

    args = build_parser().parse_args(["pretrain", "--short-seq-prob", "0.3", "--block-documents", "16",
                                      "--max-ngram", "2", "--objective", "nsp", "--seed", "5", "--data-seed", "7"])
    recipe = pretrain_recipe(args)
    built = recipe.build_settings(16)  # the curriculum's build: its own length, the rest the same
    assert (built.short_seq_prob, built.block_documents, built.max_ngram, built.objective) == (0.3, 16, 2, "nsp")
    assert built.max_seq_length == 16 and built.seed == 7 and recipe.seed == 5
    assert recipe.build.heldout_fraction == RECIPES["quick"].build.heldout_fraction  # unset: the quick recipe's


def test_a_recipes_command_line_gives_the_recipe_back():
    import dataclasses
    import shlex

    from albertlm.cli import build_parser, pretrain_recipe
    from albertlm.train.pretrain import RECIPES
    from albertlm.train.pretrain_recipe import pretrain_command

    recipe = RECIPES["quick"].with_settings(max_seq_length=128, objective="nsp", short_seq_prob=0.2, steps=1900,
                                            sharing="none", curriculum_seq_length=32)
    command = pretrain_command(dataclasses.asdict(recipe), "r", "DIR")
    assert "--short-seq-prob 0.2" in command and "--objective nsp" in command
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert pretrain_recipe(args) == recipe


def test_a_recipes_command_line_gives_switches_back():
    """Boolean settings become --flag / --no-flag (argparse's BooleanOptionalAction), not 'True'."""
    import dataclasses
    import shlex

    from albertlm.cli import build_parser, pretrain_recipe
    from albertlm.train.pretrain import RECIPES
    from albertlm.train.pretrain_recipe import flat_settings, pretrain_command

    quick = flat_settings(dataclasses.asdict(RECIPES["quick"]))
    switches = {name: not value for name, value in quick.items() if isinstance(value, bool)}
    assert switches
    recipe = RECIPES["quick"].with_settings(**switches)
    args = build_parser().parse_args(shlex.split(pretrain_command(dataclasses.asdict(recipe), "r", "DIR"))[1:])
    assert pretrain_recipe(args) == recipe
