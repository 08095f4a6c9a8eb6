"""The inference commands' flags come from settings dataclasses (options.py): the same names and defaults as
before, every choice a Literal listed by --help and checked by the dataclass, one --device for every command."""

from __future__ import annotations

import argparse

import pytest

from albertlm.cli import build_parser, main
from albertlm.errors import AlbertlmError

# command -> (required arguments, {dest: default}) as the commands had them before their settings classes
DEFAULTS = {
    "evaluate": (["--model", "M", "--data", "D"], {
        "model": "M", "data": "D", "task": None, "split": "dev", "batch_size": 64, "max_examples": None,
        "predictions": None, "max_answer_length": None, "device": "auto", "json": False, "patience": None,
        "regression_threshold": 0.1, "int8": False, "int8_backend": "fbgemm"}),
    "predict": (["--model", "M"], {
        "model": "M", "files": [], "batch_size": 64, "device": "auto", "prepack": False, "patience": None,
        "regression_threshold": 0.1, "int8": False, "int8_backend": "fbgemm"}),
    "fill-mask": (["--model", "M", "a [MASK] ."], {"model": "M", "text": "a [MASK] .", "top_k": 5, "device": "auto"}),
    "export": (["DIR", "OUT"], {"model": "DIR", "out": "OUT", "format": "onnx", "int8": False, "exporter": "dynamo",
                                "pooling": None, "normalize": None, "onnx": False, "max_seq_length": None,
                                "model_name": None, "max_batch_size": None, "max_queue_delay_us": None}),
}
CHOICES = {("evaluate", "--split"): ["dev", "test", "train"], ("evaluate", "--int8-backend"): ["fbgemm", "torchao"],
           ("predict", "--int8-backend"): ["fbgemm", "torchao"], ("export", "--format"): ["onnx", "sentence-transformers", "triton"],
           ("export", "--pooling"): ["cls", "pooler", "mean", "max", "None"],
           ("export", "--exporter"): ["dynamo", "legacy"]}


def _subparser(name: str) -> argparse.ArgumentParser:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


@pytest.mark.parametrize("command", DEFAULTS)
def test_every_flag_keeps_its_name_and_default(command):
    required, defaults = DEFAULTS[command]
    args = vars(build_parser().parse_args([command, *required]))
    assert {k: v for k, v in args.items() if k not in ("command", "_run")} == defaults


def test_the_flags_parse_into_their_settings():
    flags = ["evaluate", "--model", "M", "--data", "D", "--split", "test", "--batch-size", "8", "--max-examples",
             "3", "--predictions", "p.tsv", "--max-answer-length", "20", "--patience", "2", "--regression-threshold",
             "0.5", "--int8", "--int8-backend", "torchao", "--device", "cpu", "--json", "--task", "sst-2"]
    args = build_parser().parse_args(flags)
    assert (args.split, args.batch_size, args.max_examples, args.predictions, args.max_answer_length) == (
        "test", 8, 3, "p.tsv", 20)
    assert (args.patience, args.regression_threshold, args.int8, args.int8_backend, args.device, args.json,
            args.task) == (2, 0.5, True, "torchao", "cpu", True, "sst-2")
    args = build_parser().parse_args(["export", "DIR", "OUT", "--int8", "--exporter", "legacy", "--format", "onnx"])
    assert (args.int8, args.exporter) == (True, "legacy")
    args = build_parser().parse_args(["predict", "--model", "M", "a.txt", "-", "--prepack", "--batch-size", "1"])
    assert (args.files, args.prepack, args.batch_size) == (["a.txt", "-"], True, 1)


@pytest.mark.parametrize(("command", "flag"), CHOICES)
def test_help_lists_every_choice(command, flag, capsys):
    required = DEFAULTS[command][0]
    with pytest.raises(SystemExit):
        main([command, *required, "--help"])
    assert "{" + ",".join(CHOICES[command, flag]) + "}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:  # and argparse refuses anything else
        build_parser().parse_args([command, *required, flag, "nope"])
    assert exc.value.code == 2


def test_one_device_flag_for_every_command():
    """--device is defined once (options.DeviceSettings): every command that has it has the same choices,
    default and help."""
    found = {}
    for name in ("pretrain", "finetune", "distill", "evaluate", "predict", "fill-mask"):
        action = next(a for a in _subparser(name)._actions if "--device" in a.option_strings)
        found[name] = (tuple(action.choices), action.default, action.help)
    assert len(set(found.values())) == 1 and found["predict"][:2] == (("auto", "cpu", "cuda"), "auto")


def test_the_settings_check_their_choices_and_counts():
    """The one check of a settings class refuses what argparse refuses, for callers of the library too."""
    from albertlm.inference.settings import EarlyExitSettings, EvaluateSettings, FillMaskSettings, Int8Settings
    from albertlm.export import ExportSettings
    from albertlm.options import DeviceSettings

    for build, match in ((lambda: EvaluateSettings(split="validation"), "split must be one of dev, test, train"),
                         (lambda: Int8Settings(int8_backend="qnnpack"), "int8_backend must be one of fbgemm, torchao"),
                         (lambda: ExportSettings(exporter="tf"), "exporter must be one of dynamo, legacy"),
                         (lambda: DeviceSettings(device="tpu"), "device must be one of auto, cpu, cuda"),
                         (lambda: EvaluateSettings(batch_size=0), "--batch-size must be at least 1"),
                         (lambda: FillMaskSettings(top_k=0), "--top-k must be at least 1"),
                         (lambda: EarlyExitSettings(patience=True), "--patience must be a positive integer"),
                         (lambda: EarlyExitSettings(regression_threshold=-1.0), "must not be negative")):
        with pytest.raises(AlbertlmError, match=match):
            build()
    assert Int8Settings(int8=True).backend == "fbgemm" and Int8Settings().backend is None


def test_evaluate_dir_refuses_a_split_name_it_does_not_know(tmp_path):
    from albertlm.inference.evaluate import evaluate_dir

    with pytest.raises(AlbertlmError, match="split must be one of dev, test, train, got 'validation'"):
        evaluate_dir(tmp_path, tmp_path, "sst-2", "validation")
