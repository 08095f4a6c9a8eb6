"""End-to-end fine-tuning per task family on synthetic data: a tiny random ALBERT, a tiny SentencePiece
vocabulary trained here, a few dozen steps; the loss must go down, the output directory must load in
transformers' class of the same name with equal logits, and the CLI commands must work on it."""

from __future__ import annotations

import importlib.util
import json
import random
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm import AlbertConfig, AlbertForPreTraining
from albertlm.cli import main
from albertlm.errors import AlbertlmError
from albertlm.heads import HEADS
from albertlm.tasks.common import pad_batch
from albertlm.tasks.registry import get_task
from albertlm.tokenizer import Tokenizer, train_tokenizer
from albertlm.inference.load import load_tokenizer
from albertlm.train.finetune import FinetuneRecipe, finetune, format_results
from albertlm.train.metrics import read_metrics

POS = "good great fun lovely superb".split()
NEG = "bad awful boring dull terrible".split()
FILL = "the movie was a film plot actor story and it very really quite so".split()
COLORS = "red blue green yellow purple".split()
ANIMALS = "cat dog horse bird fish".split()
PEOPLE = "john mary peter anna paul".split()
CITIES = "paris london berlin rome madrid".split()
VERBS = "went flew drove walked moved".split()


def _sent(r: random.Random, word: str) -> str:
    return " ".join([*r.choices(FILL, k=3), word, *r.choices(FILL, k=2)])


def _corpus() -> list[str]:
    r = random.Random(1)
    words = POS + NEG + FILL + COLORS + ANIMALS + PEOPLE + CITIES + VERBS + "what which color is to ? . - _".split()
    return [" ".join(r.choices(words, k=12)) for _ in range(600)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, one_thread) -> Path:
    """A randomly initialised tiny AlbertForPreTraining with a ~100-piece vocabulary trained here."""
    path = tmp_path_factory.mktemp("pretrained")
    train_tokenizer(_corpus(), path, vocab_size=100, log=lambda msg: None)
    vocab = Tokenizer.load(path).vocab_size
    config = AlbertConfig(vocab_size=vocab, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    AlbertForPreTraining(config).save_pretrained(path)
    return path


# ---------------------------------------------------------------------------- synthetic task files
def write_sst(d: Path, r: random.Random) -> None:
    for split, n in (("train", 300), ("dev", 60)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            y = r.randint(0, 1)
            rows.append(f"{_sent(r, r.choice(POS if y else NEG))} .\t{y}")
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")


def write_stsb(d: Path, r: random.Random) -> None:
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    for split, n in (("train", 300), ("dev", 60)):
        rows = [head]
        for i in range(n):
            k = r.randint(0, 3)
            words = r.sample(POS, k) + r.choices(FILL, k=5 - k)
            r.shuffle(words)
            rows.append(f"{i}\tmain-news\tx\t2012\t{i}\tnone\tnone\t{' '.join(words)}\t{_sent(r, 'film')}\t{k * 1.5:.3f}")
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")


def write_squad(d: Path, r: random.Random) -> None:
    for split, n in (("train", 200), ("dev", 40)):
        paragraphs = []
        for i in range(n):
            color = r.choice(COLORS)
            filler = r.randint(4, 30) if split == "dev" else r.randint(2, 8)  # long dev contexts need windows
            words = [*r.choices(FILL + ANIMALS, k=filler), "is", color, *r.choices(FILL + ANIMALS, k=4)]
            context = " ".join(words) + " ."
            start = context.index(f" is {color} ") + 4
            paragraphs.append({"context": context, "qas": [{"id": f"{split}{i}", "question": "what color is it ?",
                                                           "answers": [{"text": color, "answer_start": start}]}]})
        (d / f"{split}.json").write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))


def write_race(d: Path, r: random.Random) -> None:
    for split, n in (("train", 120), ("dev", 30)):
        (d / split / "middle").mkdir(parents=True)
        for a in range(n // 2):
            questions, options, answers = [], [], []
            for _ in range(2):
                opts = [r.choice(COLORS), *r.sample(ANIMALS, 3)]
                r.shuffle(opts)
                questions.append("which one is a color ?" if r.random() < 0.5 else "the color is _ .")
                options.append(opts)
                answers.append("ABCD"[next(i for i, o in enumerate(opts) if o in COLORS)])
            article = {"id": f"middle{a}.txt", "article": " ".join(r.choices(FILL, k=12)),
                       "questions": questions, "options": options, "answers": answers}
            (d / split / "middle" / f"{a}.txt").write_text(json.dumps(article))


def write_conll(d: Path, r: random.Random) -> None:
    """IOB1 tags as CoNLL-2003 (I- everywhere, B- only between adjacent entities of one type)."""
    for name, n in (("eng.train", 300), ("eng.testa", 60)):
        lines = ["-DOCSTART- -X- O O", ""]
        for _ in range(n):
            if r.random() < 0.2:  # two adjacent people: the second starts with B-PER
                toks = [(r.choice(PEOPLE), "I-PER"), (r.choice(PEOPLE), "B-PER"), (r.choice(VERBS), "O")]
            else:
                toks = [(r.choice(PEOPLE), "I-PER"), (r.choice(VERBS), "O"), ("to", "O"), (r.choice(CITIES), "I-LOC")]
            toks += [(w, "O") for w in r.choices(FILL, k=2)] + [(".", "O")]
            lines += [f"{w} NN I-NP {t}" for w, t in toks] + [""]
        (d / name).write_text("\n".join(lines))


FAMILIES = {  # task -> (writer, steps, lr)
    "sst-2": (write_sst, 150, 3e-3),
    "sts-b": (write_stsb, 150, 3e-3),
    "squad-v1.1": (write_squad, 150, 3e-3),
    "race": (write_race, 100, 3e-3),
    "conll2003": (write_conll, 100, 3e-3),
}


@pytest.fixture(scope="module")
def runs(model_dir, tmp_path_factory) -> dict[str, tuple[Path, Path, dict]]:
    """Fine-tune once per family: task -> (data dir, output dir, results)."""
    out = {}
    for task, (writer, steps, lr) in FAMILIES.items():
        data = tmp_path_factory.mktemp(f"data-{task}")
        writer(data, random.Random(zlib.crc32(task.encode())))  # stable across processes, unlike hash()
        recipe = FinetuneRecipe(lr=lr, batch_size=16, steps=steps, warmup_steps=5, log_every=1, eval_every=steps // 2,
                                max_seq_length=48, doc_stride=16, eval_batch_size=32)
        results = finetune(task, model_dir, data, tmp_path_factory.mktemp(f"out-{task}"), recipe, progress=False)
        out[task] = (data, Path(results["out_dir"]), results)
    return out


@pytest.mark.parametrize("task", FAMILIES)
def test_loss_goes_down(runs, task):
    _, out, results = runs[task]
    losses = [r["loss"] for r in read_metrics(out / "metrics.jsonl") if r["split"] == "train"]
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    print(f"LOSS {task}: first-5 mean {first:.4f} -> last-5 mean {last:.4f}; best {results['best']}")
    print(format_results(results))
    assert len(losses) == results["steps"]
    assert last < 0.8 * first


def test_easy_tasks_are_learned(runs):
    assert runs["sst-2"][2]["best"]["accuracy"] > 0.9
    assert runs["squad-v1.1"][2]["best"]["f1"] > 0.5
    assert runs["conll2003"][2]["best"]["f1"] > 0.5
    assert runs["conll2003"][2]["tag_decoding"] == "valid" and "tag_decoding" not in runs["sst-2"][2]


@pytest.mark.parametrize("task", FAMILIES)
def test_output_dir_loads_in_transformers(runs, task):
    tf = pytest.importorskip("transformers")
    data, out, _ = runs[task]
    config = json.loads((out / "config.json").read_text())
    spec = get_task(task)
    arch = spec.family.head
    assert config["architectures"] == [arch] and config["finetuning_task"] == task
    for name in ("config.json", "model.safetensors", "spiece.model", "tokenizer_config.json"):
        assert (out / name).is_file()
    if task == "sst-2":
        assert config["problem_type"] == "single_label_classification" and config["id2label"] == {"0": "0", "1": "1"}
    if task == "sts-b":
        # transformers writes num_labels as the size of id2label, and so do we
        assert config["problem_type"] == "regression" and len(config["id2label"]) == 1
    if task == "conll2003":
        # IOB1 -> BIO: every entity here is one token, so I-PER/I-LOC and the adjacent B-PER all become B-
        assert list(config["id2label"].values()) == ["O", "B-LOC", "B-PER"]
    theirs, info = getattr(tf, arch).from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ours = HEADS[arch].from_pretrained(out)
    tok = load_tokenizer(out)
    examples = spec.read(data, "dev")[:4]
    labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))] if task in ("sst-2", "conll2003") else None
    from albertlm.inference.features import feature_settings

    features = spec.family.featurize(spec, examples, tok, labels, feature_settings(
        FinetuneRecipe(max_seq_length=48).resolve(spec, 1), ours.config), False)
    batch = {k: torch.from_numpy(v) for k, v in pad_batch(features).items()
             if k in ("input_ids", "attention_mask", "token_type_ids")}
    theirs.eval()
    with torch.no_grad():
        a, b = ours(**batch), theirs(**batch)
    for name in spec.family.outputs:
        assert (getattr(a, name) - getattr(b, name)).abs().max() < 1e-5


def test_predictions_file_in_task_format(runs):
    assert (runs["sst-2"][1] / "predictions_dev.tsv").read_text().startswith("index\tprediction\n0\t")
    squad_preds = json.loads((runs["squad-v1.1"][1] / "predictions_dev.json").read_text())
    assert set(squad_preds) == {f"dev{i}" for i in range(40)}
    race_preds = json.loads((runs["race"][1] / "predictions_dev.json").read_text())
    assert set(race_preds.values()) <= set("ABCD") and "middle0.txt-0" in race_preds
    conll = (runs["conll2003"][1] / "predictions_dev.txt").read_text().split("\n")[0].split()
    assert len(conll) == 3 and conll[1] in ("B-PER", "I-PER")


def test_best_checkpoint_is_what_was_saved(runs):
    data, out, results = runs["sst-2"]
    from albertlm.inference.evaluate import evaluate_dir

    again = evaluate_dir(out, data)
    assert again["metrics"]["accuracy"] == pytest.approx(results["best"]["accuracy"])


def test_cli_evaluate_predict_fill_mask(runs, model_dir, tmp_path, capsys):
    data, out, _ = runs["sst-2"]
    assert main(["evaluate", "--model", str(out), "--data", str(data), "--json", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["accuracy"] > 0.9
    inputs = tmp_path / "in.txt"
    inputs.write_text("the movie was great fun .\nthe film was awful and boring .\n")
    assert main(["predict", "--model", str(out), str(inputs), "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["1", "0"]
    if torch.backends.mkldnn.is_available():  # the packed copy predicts the same labels and probabilities
        assert main(["predict", "--model", str(out), str(inputs), "--device", "cpu", "--prepack"]) == 0
        packed = capsys.readouterr().out.splitlines()
        assert [x.split("\t")[0] for x in packed] == ["1", "0"]
        assert [float(x.split("\t")[1]) for x in packed] == pytest.approx([float(x.split("\t")[1]) for x in lines], abs=1e-4)
    _, ner_out, _ = runs["conll2003"]
    inputs.write_text("john went to paris .\n")
    assert main(["predict", "--model", str(ner_out), str(inputs), "--device", "cpu"]) == 0
    assert capsys.readouterr().out.startswith("john/")
    _, qa_out, _ = runs["squad-v1.1"]
    inputs.write_text("what color is it ?\tthe cat is red .\n")
    assert main(["predict", "--model", str(qa_out), str(inputs), "--device", "cpu"]) == 0
    assert capsys.readouterr().out.strip() in ("red", "red .", "cat is red", "is red")
    _, mc_out, _ = runs["race"]
    inputs.write_text(json.dumps({"context": "a film", "question": "which one is a color ?",
                                  "options": ["cat", "blue", "dog", "fish"]}) + "\n")
    assert main(["predict", "--model", str(mc_out), str(inputs), "--device", "cpu"]) == 0
    assert capsys.readouterr().out.split("\t")[0] in "ABCD"
    assert main(["fill-mask", "--model", str(model_dir), "the movie was [MASK] .", "--top-k", "3", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and printed[1].startswith("[MASK] 1:")
    assert main(["fill-mask", "--model", str(model_dir), "no mask here", "--device", "cpu"]) == 2
    assert "no [MASK]" in capsys.readouterr().err


def test_cli_finetune_with_generic_columns(model_dir, tmp_path, capsys):
    r = random.Random(5)
    for split, n in (("train", 40), ("dev", 10)):
        rows = ["review,stars"] + [f'"{_sent(r, r.choice(POS + NEG))}, really",{r.choice(["low", "high"])}' for _ in range(n)]
        (tmp_path / f"{split}.csv").write_text("\n".join(rows) + "\n")
    code = main(["finetune", "--task", "classification", "--model", str(model_dir), "--data", str(tmp_path),
                 "--out", str(tmp_path / "out"), "--text-column", "review", "--label-column", "stars",
                 "--steps", "4", "--batch-size", "8", "--max-seq-length", "32", "--no-progress", "--device", "cpu"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "accuracy *" in printed and "4 steps" in printed
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["id2label"] == {"0": "high", "1": "low"}


def test_cli_finetune_errors_are_one_line(model_dir, tmp_path, capsys):
    assert main(["finetune", "--task", "nope", "--model", str(model_dir), "--data", str(tmp_path)]) == 2
    assert "unknown task 'nope'" in capsys.readouterr().err
    assert main(["finetune", "--task", "sst-2", "--model", str(model_dir), "--data", str(tmp_path)]) == 2
    assert "no train file" in capsys.readouterr().err
    assert main(["finetune", "--task", "sst-2", "--model", str(tmp_path), "--data", str(tmp_path)]) == 2
    assert "config.json: no such config file" in capsys.readouterr().err
    (tmp_path / "config.json").write_text((model_dir / "config.json").read_text())
    assert main(["finetune", "--task", "sst-2", "--model", str(tmp_path), "--data", str(tmp_path)]) == 2
    assert "no spiece.model" in capsys.readouterr().err
    # the output directory may not be the model (it would be overwritten), nor too short an input length
    assert main(["finetune", "--task", "sst-2", "--model", str(model_dir), "--data", str(tmp_path),
                 "--out", str(model_dir)]) == 2
    assert "would overwrite its own input" in capsys.readouterr().err
    assert main(["finetune", "--task", "mrpc", "--model", str(model_dir), "--data", str(tmp_path),
                 "--max-seq-length", "3"]) == 2
    assert "max_seq_length must be at least 8" in capsys.readouterr().err
    assert main(["finetune", "--task", "sst-2", "--model", str(model_dir), "--data", str(tmp_path),
                 "--max-seq-length", "100000"]) == 2
    assert "positions" in capsys.readouterr().err


def test_recipe_defaults_follow_table_14():
    sst = FinetuneRecipe().resolve(get_task("sst-2"), 67349)
    assert (sst.lr, sst.batch_size, sst.steps, sst.warmup_steps, sst.max_seq_length) == (1e-5, 32, 20935, 1256, 512)
    assert (sst.dropout, sst.classifier_dropout) == (0.0, 0.1)
    rte = FinetuneRecipe().resolve(get_task("rte"), 2490)
    assert (rte.lr, rte.dropout, rte.steps, rte.warmup_steps) == (3e-5, 0.1, 800, 200)
    squad = FinetuneRecipe().resolve(get_task("squad-v1.1"), 88000)
    assert (squad.lr, squad.batch_size, squad.max_seq_length) == (5e-5, 48, 384)
    # overriding the steps keeps Table 14's warmup share; epochs override steps
    short = FinetuneRecipe(steps=200).resolve(get_task("sst-2"), 67349)
    assert short.warmup_steps == 12
    epochs = FinetuneRecipe(epochs=2, batch_size=10).resolve(get_task("cola"), 1000)
    assert epochs.steps == 200 and epochs.warmup_steps == 12
    # tasks without a Table 14 row: 3 epochs, 10% warmup
    chn = FinetuneRecipe().resolve(get_task("chnsenticorp"), 9600)
    assert (chn.steps, chn.warmup_steps, chn.lr) == (900, 90, 2e-5)
    # the CLI types its flags from the type hints; the library refuses wrong types and non-finite numbers
    from albertlm.cli import build_parser

    args = build_parser().parse_args(["finetune", "--task", "sst-2", "--model", "m", "--data", "d", "--out", "o",
                                      "--steps", "7", "--dropout", "0.1", "--epochs", "none"])
    assert (args.steps, args.dropout, args.epochs) == (7, 0.1, None)
    for bad in ({"steps": "7"}, {"dropout": float("nan")}, {"lr": float("inf")}, {"steps": True}):
        with pytest.raises(AlbertlmError, match=next(iter(bad))):
            FinetuneRecipe(**bad)


def test_optimizer_precision_and_unpad_take_only_their_choices(capsys):
    """The Literal types are the one list: the library refuses anything else in one line naming the field, the
    flags list them in --help and argparse refuses others; the step settings share the precisions."""
    from albertlm.cli import build_parser, main
    from albertlm.train.loop import StepSettings

    for field, value, choices in (("optimizer", "sgd", "adamw, lamb"), ("precision", "auto", "fp32, bf16, fp16"),
                                  ("precision", "FP32", "fp32, bf16, fp16"), ("unpad", True, "auto, on, off")):
        with pytest.raises(AlbertlmError, match=rf"^{field} must be one of {choices}, got {value!r}$"):
            FinetuneRecipe(**{field: value})
    with pytest.raises(AlbertlmError, match=r"^precision 'fp64' is unknown; choose one of fp32, bf16, fp16$"):
        StepSettings(precision="fp64")
    required = ["finetune", "--task", "sst-2", "--model", "m", "--data", "d"]
    args = build_parser().parse_args([*required, "--optimizer", "lamb", "--precision", "bf16", "--unpad", "off"])
    assert (args.optimizer, args.precision, args.unpad) == ("lamb", "bf16", "off")
    assert FinetuneRecipe(optimizer=args.optimizer, precision=args.precision).optimizer == "lamb"
    with pytest.raises(SystemExit):
        main([*required, "--help"])
    shown = capsys.readouterr().out
    assert "{adamw,lamb}" in shown and "{fp32,bf16,fp16}" in shown and "{auto,on,off}" in shown
    for flag, value in (("--optimizer", "sgd"), ("--precision", "fp64"), ("--unpad", "yes")):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args([*required, flag, value])
        assert exc.value.code == 2 and f"argument {flag}: invalid choice: '{value}'" in capsys.readouterr().err


def test_finetune_from_a_transformers_masked_lm_directory(model_dir, runs, tmp_path):
    """A Hugging Face ALBERT directory (AlbertForMaskedLM, spiece.model only) is a valid starting point."""
    tf = pytest.importorskip("transformers")
    import shutil

    ours = AlbertConfig.from_json_file(model_dir / "config.json")
    hf_config = tf.AlbertConfig(**{k: v for k, v in ours.to_dict().items() if k not in ("sharing", "model_type")})
    tf.AlbertForMaskedLM(hf_config).save_pretrained(tmp_path / "hf")
    shutil.copy(model_dir / "spiece.model", tmp_path / "hf" / "spiece.model")
    data = runs["sst-2"][0]
    results = finetune("sst-2", tmp_path / "hf", data, tmp_path / "out",
                       FinetuneRecipe(steps=3, batch_size=8, max_seq_length=32), progress=False)
    assert results["steps"] == 3 and "accuracy" in results["best"]
    assert tf.AlbertForSequenceClassification.from_pretrained(tmp_path / "out").config.num_labels == 2


def test_cli_int8_evaluate_and_predict(runs, tmp_path, capsys):
    """--int8 scores and predicts like fp32 on a trained model (its margins dwarf the int8 rounding)."""
    data, out, _ = runs["sst-2"]
    inputs = tmp_path / "in.txt"
    inputs.write_text("the movie was great fun .\nthe film was awful and boring .\n")
    for backend in ("fbgemm", "torchao") if importlib.util.find_spec("torchao") else ("fbgemm",):
        flags = ["--device", "cpu", "--int8", "--int8-backend", backend]
        assert main(["evaluate", "--model", str(out), "--data", str(data), "--json", *flags]) == 0
        assert json.loads(capsys.readouterr().out)["metrics"]["accuracy"] > 0.9
        assert main(["predict", "--model", str(out), str(inputs), *flags]) == 0
        assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == ["1", "0"]
    assert main(["predict", "--model", str(out), str(inputs), "--int8", "--prepack"]) == 2
    assert "exclusive" in capsys.readouterr().err


def test_cli_inference_refusals_and_aligned_outputs(runs, model_dir, tmp_path, capsys):
    data, out, _ = runs["sst-2"]
    # one output line per input line, blank lines included
    inputs = tmp_path / "in.txt"
    inputs.write_text("the movie was great fun .\n\n   \nthe film was awful and boring .\n")
    assert main(["predict", "--model", str(out), str(inputs), "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert len(lines) == 4 and lines[1] == lines[2] == "" and lines[0].startswith("1\t") and lines[3].startswith("0\t")
    # invalid UTF-8 is one line naming the file
    inputs.write_bytes(b"good \xff movie\n")
    assert main(["predict", "--model", str(out), str(inputs), "--device", "cpu"]) == 2
    assert f"{inputs}: not valid UTF-8" in capsys.readouterr().err
    # a split without labels: nothing to score unless predictions are asked for
    unlabelled = tmp_path / "unlabelled"
    unlabelled.mkdir()
    (unlabelled / "test.tsv").write_text("index\tsentence\n0\tthe movie was great fun .\n1\tawful .\n")
    assert main(["evaluate", "--model", str(out), "--data", str(unlabelled), "--split", "test"]) == 2
    assert "no labels" in capsys.readouterr().err
    preds = tmp_path / "preds.tsv"
    assert main(["evaluate", "--model", str(out), "--data", str(unlabelled), "--split", "test",
                 "--predictions", str(preds)]) == 0 and preds.exists()
    capsys.readouterr()
    # bad numbers and an unwritable predictions path fail before any scoring
    assert main(["evaluate", "--model", str(out), "--data", str(data), "--batch-size", "0"]) == 2
    assert "--batch-size" in capsys.readouterr().err
    assert main(["predict", "--model", str(out), str(inputs), "--batch-size", "0"]) == 2
    assert "--batch-size" in capsys.readouterr().err
    assert main(["evaluate", "--model", str(out), "--data", str(data), "--predictions",
                 str(tmp_path / "missing-dir" / "p.tsv")]) == 2
    assert "does not exist" in capsys.readouterr().err
    # fill-mask needs a masked-LM head and a positive top-k
    assert main(["fill-mask", "--model", str(out), "the movie was [MASK] ."]) == 2
    assert "no masked-LM head" in capsys.readouterr().err
    for k in ("0", "-1"):
        assert main(["fill-mask", "--model", str(model_dir), "the movie was [MASK] .", "--top-k", k]) == 2
        assert "--top-k" in capsys.readouterr().err


def test_a_training_file_without_its_label_column_is_one_line(model_dir, tmp_path, capsys):
    for split in ("train", "dev"):
        (tmp_path / f"{split}.tsv").write_text("sentence\nthe movie was good .\nbad film .\n")
    assert main(["finetune", "--task", "sst-2", "--model", str(model_dir), "--data", str(tmp_path),
                 "--out", str(tmp_path / "out"), "--steps", "2"]) == 2
    assert "2 of 2 train examples have no label" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_max_answer_length_fits_the_language():
    from albertlm.inference.features import feature_settings, saved_settings

    config = AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=32)
    recipe = FinetuneRecipe(max_seq_length=64)
    assert feature_settings(recipe, config).max_answer_length == 30
    assert feature_settings(recipe, config, chinese=True).max_answer_length == 64  # character pieces
    assert feature_settings(FinetuneRecipe(max_seq_length=64, max_answer_length=12), config,
                            chinese=True).max_answer_length == 12
    # a directory fine-tuned elsewhere gets the language default; evaluate can override what was saved
    assert saved_settings(config, chinese=True).max_answer_length == 64
    saved = config.replace(extra={"albertlm_features": {"max_seq_length": 64, "max_answer_length": 30}})
    assert saved_settings(saved, chinese=True).max_answer_length == 30
    assert saved_settings(saved, chinese=True, max_answer_length=80).max_answer_length == 80


def test_results_record_the_dev_curve_and_whether_it_was_still_improving(tmp_path, model_dir):
    write_sst(tmp_path, random.Random(3))
    results = finetune("sst-2", model_dir, tmp_path, tmp_path / "out",
                       FinetuneRecipe(steps=8, eval_every=2, batch_size=16, max_seq_length=32, lr=1e-3), progress=False)
    evals = [r for r in read_metrics(tmp_path / "out" / "metrics.jsonl") if r["split"] == "eval"]
    assert results["dev_curve"] == [[r["step"], r["accuracy"]] for r in evals] and len(evals) == 4
    assert results["improving_at_end"] == (results["best_step"] == 8)
    assert ("still improving" in format_results(results)) == results["improving_at_end"]


def test_weight_average_follows_its_formula():
    from albertlm.train.finetune import weight_average

    model = torch.nn.Linear(3, 2)
    averaged = weight_average(model, decay=0.5)
    expected = [p.detach().clone() for p in model.parameters()]
    for n in range(6):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        averaged.update_parameters(model)
        keep = 0.0 if n == 0 else min(0.5, (1 + n) / (10 + n))  # the first update copies the weights
        expected = [e * keep + p.detach() * (1 - keep) for e, p in zip(expected, model.parameters())]
    for e, a in zip(expected, averaged.module.parameters()):
        torch.testing.assert_close(a, e)


def test_ema_scores_and_saves_the_averaged_weights_and_records_the_trained_ones(tmp_path, model_dir):
    from albertlm.inference.evaluate import evaluate_dir

    write_sst(tmp_path, random.Random(3))
    recipe = FinetuneRecipe(steps=12, eval_every=4, batch_size=16, max_seq_length=32, lr=1e-3, ema_decay=0.9)
    results = finetune("sst-2", model_dir, tmp_path, tmp_path / "ema", recipe, progress=False)
    plain = finetune("sst-2", model_dir, tmp_path, tmp_path / "plain", FinetuneRecipe(
        **{**recipe.__dict__, "ema_decay": 0.0}), progress=False)
    # the same training: the trained weights score as the run without averaging, at every evaluation
    assert results["trained_weights"]["dev_curve"] == plain["dev_curve"] and "trained_weights" not in plain
    assert results["trained_weights"]["best"] == max(v for _, v in plain["dev_curve"])
    # what is kept and saved is the average: it scores as results say, and its weights are not the trained ones
    assert evaluate_dir(tmp_path / "ema", tmp_path)["metrics"]["accuracy"] == pytest.approx(
        results["best"]["accuracy"])
    from safetensors.torch import load_file
    ema_w = load_file(tmp_path / "ema" / "model.safetensors")
    plain_w = load_file(tmp_path / "plain" / "model.safetensors")
    assert any(not torch.equal(ema_w[k], plain_w[k]) for k in ema_w)
    assert [s for s, _ in results["dev_curve"]] == [4, 8, 12]


@pytest.mark.parametrize("decay", ["1", "-0.1"])
def test_ema_decay_outside_its_range_is_one_line(decay, model_dir, tmp_path, capsys):
    write_sst(tmp_path, random.Random(3))
    assert main(["finetune", "--task", "sst-2", "--model", str(model_dir), "--data", str(tmp_path), "--out",
                 str(tmp_path / "out"), "--ema-decay", decay]) == 2
    err = capsys.readouterr().err.strip()
    assert "ema_decay must lie in [0, 1)" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task,writer", [("conll2003", write_conll), ("sst-2", write_sst)])
def test_unpadded_training_follows_the_padded_run(task, writer, tmp_path, model_dir, monkeypatch):
    """--unpad on and off train the same model: the same losses step by step and the same dev curve; and
    on, the training passes do go unpadded (evaluation batches by length, padded)."""
    from albertlm.model import AlbertModel

    writer(tmp_path, random.Random(5))
    forward, calls = AlbertModel.forward, []

    def spy(self, *args, **kwargs):
        calls.append(bool(kwargs.get("unpad", args[5] if len(args) > 5 else False)))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(AlbertModel, "forward", spy)
    runs = {}
    for unpad in ("off", "on"):
        calls.clear()
        recipe = FinetuneRecipe(steps=12, eval_every=6, batch_size=16, max_seq_length=32, lr=1e-3, log_every=1,
                                unpad=unpad)
        results = finetune(task, model_dir, tmp_path, tmp_path / f"out-{unpad}", recipe, progress=False)
        train = [r["loss"] for r in read_metrics(tmp_path / f"out-{unpad}" / "metrics.jsonl") if r["split"] == "train"]
        runs[unpad] = (results, train, calls.count(True))
    (off, off_losses, off_unpadded), (on, on_losses, on_unpadded) = runs["off"], runs["on"]
    assert off_unpadded == 0 and on_unpadded >= 12  # every training step
    assert len(on_losses) == len(off_losses) == 12
    np.testing.assert_allclose(on_losses, off_losses, rtol=0, atol=1e-4)
    np.testing.assert_allclose([v for _, v in on["dev_curve"]], [v for _, v in off["dev_curve"]], rtol=0, atol=1e-3)
    assert on["recipe"]["unpad"] == "on" and off["recipe"]["unpad"] == "off"
