"""`albertlm report` end to end on a very tiny study (the `test` preset, a corpus written here),
plus the speed measurements and the CLI surface."""

import dataclasses
import json
import re
import shutil

import pytest
import torch

from albertlm.data.corpus import Corpus
from albertlm import AlbertForPreTraining, get_preset
from albertlm.analysis.params import flops_per_token
from albertlm.analysis import report
from albertlm.analysis.report import ReportSettings, run_report
from albertlm.analysis.report_md import render
from albertlm.analysis.results import from_json
from albertlm.analysis.speed import (SpeedSettings, bert_twin, fastest_threads, measure_speed,
                                     saved_activation_bytes, time_training)
from albertlm.analysis.study import StudySettings, plan_steps, variants
from albertlm.cli import main
from albertlm.tokenizer import train_tokenizer
from conftest import write_story_corpus

PNG = b"\x89PNG\r\n\x1a\n"


def _corpus(path):
    return write_story_corpus(path, documents=60)


TINY_SPEED = SpeedSettings(presets=("test",), reference="test", inference=("test",), seq_len=16, repeats=1,
                           inference_seq_len=16, inference_repeats=1)


def _tiny_settings(corpus, **kw):
    study = StudySettings(preset="test", corpus=str(corpus), vocab_size=64, max_seq_length=64, batch_size=8,
                          eval_examples=32, embedding_sizes=(8, 16, 0), heldout_fraction=0.1, calibration_steps=1,
                          min_steps=4)
    # the inference memory runs two fresh processes (~3 s): test_speed_measurements covers it
    return ReportSettings(budget_minutes=0.25, threads=1, study=study, speed=dataclasses.replace(TINY_SPEED, memory=False),
                          **kw)


def test_report_on_a_tiny_study(tmp_path):
    corpus = _corpus(tmp_path / "corpus.txt")
    # an HF-format checkpoint with its own vocabulary, for the smoothness figure
    hf = tmp_path / "hf"
    train_tokenizer(Corpus(str(corpus)).sentences, hf, vocab_size=48, strict=False)
    AlbertForPreTraining(get_preset("test", vocab_size=48)).save_pretrained(hf)

    # a few SST-2 rows: the downstream score's pipeline (forced on; auto needs a 120-minute budget)
    sst2 = tmp_path / "SST-2"
    sst2.mkdir()
    rows = [f"the {w} dog sat near the river \t{i % 2}" for i, w in enumerate(["good", "bad"] * 12)]
    (sst2 / "train.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    (sst2 / "dev.tsv").write_text("sentence\tlabel\n" + "\n".join(rows[:8]) + "\n")

    out = tmp_path / "report"
    path = run_report(_tiny_settings(corpus, hf_checkpoint=str(hf), downstream="on", sst2_data=str(sst2)), out,
                      command="albertlm report --test")
    text = path.read_text()
    results = json.loads((out / "results.json").read_text())
    # results.json reads back into the typed Report, which renders the same report.md
    assert render(from_json(out / "results.json")) == text

    for n, title in enumerate(["Parameters", "Speed", "Embedding size", "SOP vs NSP", "Smoothness",
                               "Reproducibility"], 1):
        assert re.search(rf"^## {n}\. .*{title}", text, re.M | re.I), title
    for name in results["figures"].values():
        assert (out / name).read_bytes()[:8] == PNG
        assert f"]({name})" in text
    assert "albertlm report --test" in text and f"torch {torch.__version__}" in text
    # every variant ran once per seed, every run trained the planned steps (the first third at 16 tokens)
    study = results["study"]
    steps = study["plan"]["steps"]
    names = variants(_tiny_settings(corpus).study)
    assert steps >= 4 and study["seeds"] == [0, 1]
    assert len(names) == 8 and len(study["runs"]) == 16 and set(study["variants"]) == {v.name for v in names}
    for name, run in study["runs"].items():
        assert run["summary"]["steps"] == steps and name == f"{run['variant']['name']}-s{run['seed']}"
        assert run["recipe"]["curriculum_steps"] == steps // 3 and run["recipe"]["curriculum_seq_length"] == 16
    # Tables 3 and 4 show each variant's mean over its seeds, each seed and the spread
    for name, v in study["variants"].items():
        accs = [study["runs"][f"{name}-s{seed}"]["summary"]["eval"]["mlm_mask_accuracy"] for seed in (0, 1)]
        assert v["mask_accuracy"] == accs and v["mask_accuracy_mean"] == pytest.approx(sum(accs) / 2)
        assert v["mask_accuracy_spread"] == pytest.approx(max(accs) - min(accs))
        if v["variant"]["objective"] == "sop":
            cell = f"**{100 * v['mask_accuracy_mean']:.1f}** ({100 * accs[0]:.1f}, {100 * accs[1]:.1f})"
            assert cell in text, name
    assert "seed spread" in text
    # every run's SST-2 score is the best dev accuracy its own fine-tuning recorded, on the 8 dev rows written above
    for name, run in study["runs"].items():
        tuned = json.loads((out / "study" / "runs" / name / "sst2" / "results.json").read_text())
        assert run["downstream"]["accuracy"] == tuned["best"]["accuracy"] and run["downstream"]["dev_examples"] == 8
    for v in study["variants"].values():
        assert v["downstream"] == [study["runs"][r]["downstream"]["accuracy"] for r in v["runs"]]
    assert "SST-2 dev %" in text
    # Table 5: three objectives, each seed's model scored on all three held-out sets; SOP against chance
    assert set(study["table5"]) == {"none", "nsp", "sop"}
    for row in study["table5"].values():
        assert [x["seed"] for x in row["per_seed"]] == [0, 1]
        for x in row["per_seed"]:
            scores = x["scores"]
            assert set(scores) == {"none", "nsp", "sop"}
            # MLM read on the `none` pairs, NSP and SOP from the sentence head on their own builds' pairs
            assert (x["mlm_accuracy"], x["nsp_accuracy"], x["sop_accuracy"]) == (
                scores["none"]["mlm_mask_accuracy"], scores["nsp"]["sop_accuracy"], scores["sop"]["sop_accuracy"])
            # every model is scored on the same held-out pairs
            assert {t: scores[t]["examples"] for t in ("nsp", "sop")} == row["pairs"]
        assert row["sop_accuracy"] == pytest.approx(sum(x["sop_accuracy"] for x in row["per_seed"]) / 2)
    assert "the SOP-trained model on SOP: mean" in text and "(SE)" in text
    # Figure 1: the two study models (trained and at initialisation) plus the checkpoint, one point per layer
    curves = study["smoothness"]
    assert len(curves) == 5 and all(c["layers"] == 3 and c["tokens"] > 0 for c in curves.values())
    assert sum("untrained" in k for k in curves) == 2 and sum("--hf-checkpoint" in k for k in curves) == 1
    # the equivalent per-run commands parse as pretrain commands
    assert text.count("albertlm pretrain --name") == 16
    assert (out / "study" / "runs" / "e16-all-s1" / "model" / "config.json").exists()
    report._check_study_dir(out / "study")  # a rerun takes the study it wrote as its own: nothing refused


def test_plan_steps_splits_the_budget():
    s = StudySettings(batch_size=16, eval_examples=160, min_steps=5)
    plan = plan_steps(1000.0, 10, 0.5, s)
    assert plan["per_run_seconds"] == 100.0
    assert plan["steps"] == int((100.0 - 3.0 - 10 * 0.5 / 3) / 0.5)
    assert plan_steps(1.0, 10, 0.5, s)["steps"] == 5  # never below min_steps
    assert plan_steps(1000.0, 10, 0.5, s, finetune_share=0.3)["pretrain_seconds"] == pytest.approx(70.0)


def test_speed_measurements():
    config = get_preset("test")
    twin = bert_twin(config)
    assert twin.embedding_size == twin.hidden_size and twin.sharing == "none"
    model = AlbertForPreTraining(config)
    ids = torch.randint(5, config.vocab_size, (2, 16))

    def run(batch):
        return lambda: model(input_ids=batch, labels=batch).loss

    one = saved_activation_bytes(run(ids[:1]), model.parameters())
    two = saved_activation_bytes(run(ids), model.parameters())
    assert 0 < one < two <= 2.2 * one  # activations grow with the batch; weights are not counted
    r = time_training(config, 1, 16, repeats=1)
    assert r["seconds"] > 0 and r["activation_bytes"] > 0
    threads = torch.get_num_threads()
    try:
        best, seconds = fastest_threads(config, 1, 16, (1, 1))
        assert best == 1 and list(seconds) == [1] and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    # the BERT twin of `test` timed for training too: its ratios to the reference come out of its own rows
    settings = dataclasses.replace(TINY_SPEED, presets=("test", "twin"))
    speed = measure_speed(settings, log=lambda _: None, configs={"twin": twin})
    ref, other = speed.training
    assert other.speedup == pytest.approx(other.tokens_per_s / ref.tokens_per_s)
    assert other.flops_speedup == pytest.approx(flops_per_token(config, 16) / flops_per_token(twin, 16))
    assert other.flops_speedup < 1.0 and other.parameters > ref.parameters  # E = H: more compute, nothing shared
    assert [x.name for x in speed.inference] == ["test", "test BERT twin"]
    albert, bert = speed.inference
    assert bert.parameters > albert.parameters and albert.parameter_bytes == 4 * albert.parameters
    assert albert.rss is None or albert.rss.peak_kib >= albert.rss.rss_built_kib


def test_report_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--budget", "--out", "--quick", "--hf-checkpoint"):
        assert flag in out


def test_report_rejects_a_bad_checkpoint_before_any_work(tmp_path, capsys):
    corpus = _corpus(tmp_path / "c.txt")
    code = main(["report", "--out", str(tmp_path / "r"), "--corpus", str(corpus), "--hf-checkpoint",
                 str(tmp_path / "missing")])
    assert code == 2
    assert "--hf-checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_quick_report_cli(tmp_path):
    """The documented smoke run: `albertlm report --quick` (several minutes on 2 cores)."""
    if shutil.which("albertlm") is None:
        pytest.skip("the albertlm console script is not installed")
    assert main(["report", "--quick", "--out", str(tmp_path / "q"), "--downstream", "off"]) == 0
    assert (tmp_path / "q" / "report.md").exists()


def test_downstream_needs_an_sst2_directory_given():
    from albertlm.analysis.report import ReportSettings, _sst2

    path, why = _sst2(ReportSettings(downstream="on"))
    assert path is None and "--sst2" in why
    assert _sst2(ReportSettings(downstream="off"))[0] is None


def test_report_flags_come_from_its_settings_class():
    from albertlm.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["report", "--budget", "30", "--sst2", "d", "--steps", "100", "--seeds", "3",
                              "--downstream", "off", "--quick"])
    assert (args.budget_minutes, args.sst2_data, args.steps, args.seeds, args.downstream, args.quick) == (
        30.0, "d", 100, 3, "off", True)
    for bad in (["--budget", "nan"], ["--steps", "x"], ["--downstream", "maybe"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["report", *bad])
