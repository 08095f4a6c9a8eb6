"""Sentence-embedding objectives (train/embedding.py): the losses against hand-computed values, each objective
lowering its loss on a tiny set through `albertlm finetune --objective`, the output directory's pooling
read back by `albertlm embed` and the sentence-transformers copy, and the refusals in one line."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm import AlbertConfig, AlbertForPreTraining
from albertlm.cli import main
from albertlm.errors import AlbertlmError
from albertlm.inference.embed import EmbedSettings, load_embedder
from albertlm.inference.embed_eval import evaluate_embeddings
from albertlm.st_directory import read_sentence_transformers
from albertlm.tokenizer import Tokenizer, train_tokenizer
from albertlm.train.embedding import (EmbeddingSettings, cosent_loss, cosine_loss, finetune_embedder,
                                      in_batch_loss)
from albertlm.train.finetune import FinetuneRecipe
from albertlm.train.metrics import read_metrics

TOPICS = [w.split() for w in ("cat dog horse bird fish", "red blue green yellow purple", "paris london berlin rome madrid",
                              "john mary peter anna paul", "went flew drove walked moved")]
FILL = "the a and it very so of".split()


def _sentence(r: random.Random, topic: int) -> str:
    return " ".join(r.sample(TOPICS[topic], 3) + r.choices(FILL, k=2))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, one_thread) -> Path:
    """A random tiny AlbertForPreTraining with a SentencePiece vocabulary trained here."""
    path = tmp_path_factory.mktemp("pretrained")
    r = random.Random(0)
    words = [w for t in TOPICS for w in t] + FILL
    train_tokenizer([" ".join(r.choices(words, k=10)) for _ in range(400)], path, vocab_size=70, log=lambda m: None)
    config = AlbertConfig(vocab_size=Tokenizer.load(path).vocab_size, embedding_size=16, hidden_size=32,
                          num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    AlbertForPreTraining(config).save_pretrained(path)
    return path


def write_stsb(d: Path, n_train: int = 48, n_dev: int = 30, seed: int = 0) -> Path:
    """STS-B files: a pair of one topic scores 4.5-5, of two topics 0-1."""
    r = random.Random(seed)
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    d.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_dev)):
        rows = [head]
        for i in range(n):
            t = r.randrange(len(TOPICS))
            same = r.random() < 0.5
            u = t if same else (t + r.randrange(1, len(TOPICS))) % len(TOPICS)
            score = r.uniform(4.5, 5) if same else r.uniform(0, 1)
            rows.append(f"{i}\tnews\tx\t2012\t{i}\tnone\tnone\t{_sentence(r, t)}\t{_sentence(r, u)}\t{score:.3f}")
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return d


def write_sst(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    r = random.Random(1)
    for split in ("train", "dev"):
        (d / f"{split}.tsv").write_text("sentence\tlabel\n" + "".join(f"{_sentence(r, i % 5)}\t{i % 2}\n"
                                                                       for i in range(20)))
    return d


# ---------------------------------------------------------------------------- the losses by hand
def test_in_batch_loss_takes_each_anchor_s_own_positive_as_its_target():
    """Unit anchors e_0..e_2 and unit positives: the [3, 3] matrix is scale * A P^T; row i's target is
    column i, so the loss is mean_i(logsumexp(row i) - row_i[i]); permuting the positives moves each
    anchor's target with them."""
    anchors = torch.eye(3, 4, dtype=torch.float64)
    positives = torch.tensor([[0.6, 0.8, 0, 0], [0, 1.0, 0, 0], [0, 0, 0.28, 0.96]], dtype=torch.float64)
    scale = 20.0

    def by_hand(p: np.ndarray) -> float:
        sims = scale * anchors.numpy() @ p.T  # [3, 3]
        return float(np.mean([np.log(np.exp(row).sum()) - row[i] for i, row in enumerate(sims)]))

    loss = in_batch_loss(anchors, positives, scale)
    assert float(loss) == pytest.approx(by_hand(positives.numpy()), rel=1e-9)
    # only the rows' own positives are targets: here row 0's target is (0.6, 0.8), whose cosine with e_0 is 0.6,
    # while row 1's positive (0, 1) is a negative for row 0
    assert float(loss) == pytest.approx((math.log(math.exp(12) + math.exp(0) + math.exp(0)) - 12
                                         + math.log(math.exp(16) + math.exp(20) + 1) - 20
                                         + math.log(1 + 1 + math.exp(20 * 0.28)) - 20 * 0.28) / 3, rel=1e-9)
    perm = [2, 0, 1]
    permuted = in_batch_loss(anchors, positives[perm], scale)
    assert float(permuted) == pytest.approx(by_hand(positives.numpy()[perm]), rel=1e-9)
    assert float(permuted) > float(loss) + 5  # the targets moved to the wrong rows
    # vectors are compared by cosine: their lengths do not matter
    assert float(in_batch_loss(3 * anchors, 0.5 * positives, scale)) == pytest.approx(float(loss), rel=1e-9)


def test_cosent_and_cosine_losses_by_hand():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    b = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)  # cosines 1, 0, -1
    scores = torch.tensor([0.0, 5.0, 2.0], dtype=torch.float64)
    s = 20.0
    cos = [1.0, 0.0, -1.0]
    # pairs (i, j) with scores_i > scores_j: (1, 0), (1, 2), (2, 0); each adds exp(s * (cos_j - cos_i))
    expected = math.log(1 + math.exp(s * (cos[0] - cos[1])) + math.exp(s * (cos[2] - cos[1]))
                        + math.exp(s * (cos[0] - cos[2])))
    assert float(cosent_loss(a, b, scores, s)) == pytest.approx(expected, rel=1e-9)
    assert float(cosent_loss(a, b, torch.tensor([2.0, 1.0, 0.0]), s)) == pytest.approx(
        math.log(1 + 2 * math.exp(-20.0) + math.exp(-40.0)), rel=1e-6)  # cosines in the scores' order: almost 0
    assert float(cosent_loss(a, b, torch.ones(3), s)) == 0.0  # equal scores: nothing to order
    targets = torch.tensor([1.0, 0.5, 0.0])
    assert float(cosine_loss(a.float(), b.float(), targets)) == pytest.approx(((0) ** 2 + 0.5 ** 2 + 1) / 3)


# ---------------------------------------------------------------------------- training
OBJECTIVES = ("mnrl", "cosent", "cosine", "simcse")


@pytest.fixture(scope="module")
def runs(model_dir, tmp_path_factory) -> dict:
    """One tiny run per objective on the same STS-B-shaped data, the whole training set in every batch:
    objective -> its results, and "data" -> the data directory."""
    data = write_stsb(tmp_path_factory.mktemp("stsb"), n_train=32, n_dev=24)
    out: dict = {"data": data}
    for objective in OBJECTIVES:
        recipe = FinetuneRecipe(lr=3e-3, batch_size=32, steps=12, warmup_steps=2, log_every=1, eval_every=12,
                                max_seq_length=24, eval_batch_size=64)
        pooling = "max" if objective == "cosent" else "mean"
        out[objective] = finetune_embedder("sts-b", model_dir, data, tmp_path_factory.mktemp(f"out-{objective}"),
                                           recipe, EmbeddingSettings(objective, pooling=pooling), progress=False)
    return out


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_each_objective_lowers_its_loss(runs, objective):
    results = runs[objective]
    losses = [r["loss"] for r in read_metrics(Path(results["out_dir"]) / "metrics.jsonl") if r["split"] == "train"]
    first, last = np.mean(losses[:3]), np.mean(losses[-3:])
    print(f"LOSS {objective}: {first:.4f} -> {last:.4f}; dev {results['best']}")
    assert len(losses) == 12 and last < 0.8 * first
    assert results["main_metric"] == "spearman" and set(results["best"]) >= {"spearman", "pearson", "mrr"}


def test_the_output_is_a_model_directory_with_its_pooling(runs, model_dir):
    out = Path(runs["cosent"]["out_dir"])
    record = json.loads((out / "config.json").read_text())["albertlm_embedding"]
    assert set(record) == {"pooling", "objective", "task", "score_map"}  # graded pairs: a score map
    assert (record["pooling"], record["objective"], record["task"]) == ("max", "cosent", "sts-b")
    assert load_embedder(out).pooling == "max" and load_embedder(model_dir).pooling == "mean"
    st = read_sentence_transformers(out / "sentence-transformers")
    assert st.pooling == "max" and not st.normalize and st.max_seq_length == 24
    assert runs["cosent"]["sentence_transformers"] == str(out / "sentence-transformers")
    # the saved weights are the best dev checkpoint's: scoring them again gives the best dev score
    again = evaluate_embeddings(out, "sts-b", runs["data"], settings=EmbedSettings(max_seq_length=24, progress=False))
    assert again["metrics"]["spearman"] == pytest.approx(runs["cosent"]["best"]["spearman"], abs=1e-6)


def test_graded_pairs_give_a_score_map_fitted_on_the_training_pairs(runs, capsys):
    from albertlm.tasks.pairs import graded_scores, pairs_of, row_cosines, unit_rows
    from albertlm.tasks.registry import get_task
    from albertlm.tasks.score_map import ScoreMap, fit_score_map

    results, data = runs["cosent"], runs["data"]
    out = Path(results["out_dir"])
    saved = ScoreMap.from_record(json.loads((out / "config.json").read_text())["albertlm_embedding"]["score_map"], "")
    spec = get_task("sts-b")
    embedder = load_embedder(out, EmbedSettings(max_seq_length=24, progress=False))

    def cosines(split):
        pairs = pairs_of(spec, spec.read(data, split), split)
        return pairs, row_cosines(unit_rows(embedder.encode(pairs.text_a)), unit_rows(embedder.encode(pairs.text_b)))

    train, train_cos = cosines("train")
    by_hand = fit_score_map(train_cos, train.scores)
    assert saved.pairs == 32 and saved.cosine == pytest.approx(by_hand.cosine, abs=1e-5)
    assert saved.score == pytest.approx(by_hand.score, abs=1e-5)
    dev, dev_cos = cosines("dev")
    mapped = graded_scores(saved(dev_cos), dev.scores)
    assert results["score_map"]["knots"] == len(saved.cosine) and results["score_map"]["pairs"] == 32
    assert results["score_map"]["dev"] == pytest.approx(mapped, abs=1e-5)
    # evaluate scores the mapped cosines beside the raw ones; the raw ones are unchanged by the map
    again = evaluate_embeddings(out, "sts-b", data, settings=EmbedSettings(max_seq_length=24, progress=False))
    assert again["score_map"] == pytest.approx(mapped, abs=1e-5)
    assert again["metrics"]["pearson"] == pytest.approx(results["best"]["pearson"], abs=1e-6)
    from albertlm.inference.embed_eval import format_table

    assert f"pearson (mapped){100 * mapped['pearson']:>10.2f}" in format_table(again)
    # the terminal line of the run names the map and its dev scores
    from albertlm.train.embedding import format_embedding

    assert f"dev pearson {100 * results['score_map']['dev']['pearson']:.2f}" in format_embedding(results)


def test_a_malformed_score_map_is_refused_in_one_line(runs, tmp_path, capsys):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(runs["cosent"]["out_dir"], out)
    config = json.loads((out / "config.json").read_text())
    config["albertlm_embedding"]["score_map"]["score"].reverse()
    (out / "config.json").write_text(json.dumps(config))
    lines = tmp_path / "pairs.txt"
    lines.write_text("cat dog\tdog cat\n")
    assert main(["predict", "--model", str(out), str(lines)]) != 0
    err = capsys.readouterr().err.strip()
    assert "config.json: albertlm_embedding: score_map.score must be strictly increasing" in err and "\n" not in err


def test_a_rerun_replaces_the_earlier_copy(model_dir, tmp_path):
    data = write_stsb(tmp_path / "data", n_train=8, n_dev=6)
    out = tmp_path / "out"
    recipe = FinetuneRecipe(lr=1e-3, batch_size=8, steps=2, eval_every=2, max_seq_length=24)
    finetune_embedder("sts-b", model_dir, data, out, recipe, EmbeddingSettings("mnrl"), progress=False)
    assert (out / "sentence-transformers" / "modules.json").is_file()
    results = finetune_embedder("sts-b", model_dir, data, out, recipe, EmbeddingSettings("mnrl", pooling="pooler"),
                                progress=False)
    assert not (out / "sentence-transformers").exists()  # pooler has no sentence-transformers module
    assert results["sentence_transformers"] is None and "pooler" in results["sentence_transformers_note"]
    assert load_embedder(out).pooling == "pooler"


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_refusals_are_one_line(model_dir, tmp_path, capsys):
    stsb, sst = write_stsb(tmp_path / "stsb", 8, 6), write_sst(tmp_path / "sst")
    base = ["finetune", "--model", str(model_dir), "--out", str(tmp_path / "out"), "--steps", "1", "--no-progress"]
    cases = {("--task", "sts-b", "--data", str(stsb), "--objective", "simcse", "--dropout", "0"):
             "--objective simcse needs --dropout above 0",
             ("--task", "sst-2", "--data", str(sst), "--objective", "mnrl"): "task sst-2 has no sentence pairs",
             ("--task", "sst-2", "--data", str(sst), "--objective", "simcse"): "task sst-2 has no sentence pairs",
             ("--task", "sts-b", "--data", str(stsb), "--pooling", "max"): "--pooling applies to the embedding",
             ("--task", "sts-b", "--data", str(stsb), "--objective", "mnrl", "--mlm-weight", "1"):
             "--mlm-weight: --objective mnrl trains no task head",
             ("--task", "sts-b", "--data", str(stsb), "--objective", "cosent", "--similarity-scale", "0"):
             "--similarity-scale must be a positive number",
             ("--task", "sts-b", "--data", str(stsb), "--objective", "mnrl", "--max-seq-length", "1000"):
             "has only 64 positions"}
    for argv, message in cases.items():
        assert main([*base, *argv]) == 2, argv
        assert message in _one_line(capsys), argv
    assert not (tmp_path / "out").exists()
    with pytest.raises(AlbertlmError, match="no sentence pairs"):
        finetune_embedder("sst-2", model_dir, sst, tmp_path / "o2", FinetuneRecipe(steps=1),
                          EmbeddingSettings("cosent"), progress=False)


def test_cli_trains_and_prints_the_table(model_dir, tmp_path, capsys):
    data = write_stsb(tmp_path / "stsb", 16, 10)
    out = tmp_path / "out"
    assert main(["finetune", "--task", "sts-b", "--model", str(model_dir), "--data", str(data), "--out", str(out),
                 "--objective", "mnrl", "--steps", "3", "--batch-size", "8", "--max-seq-length", "24",
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "spearman *" in printed and "mean pooling, saved in config.json" in printed
    assert json.loads((out / "recipe.json").read_text())["embedding"]["objective"] == "mnrl"
    assert json.loads((out / "results.json").read_text())["sentence_transformers"] == str(out / "sentence-transformers")


def test_evaluate_scores_an_embedder_on_its_recorded_task(runs, capsys):
    out, data = runs["cosent"]["out_dir"], str(runs["data"])
    assert main(["evaluate", "--model", out, "--data", data, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["task"] == "sts-b" and result["main_metric"] == "spearman" and result["pooling"] == "max"
    assert result["metrics"]["spearman"] == pytest.approx(runs["cosent"]["best"]["spearman"], abs=1e-6)
    assert main(["evaluate", "--model", out, "--data", data]) == 0
    table = capsys.readouterr().out
    assert table.startswith("sts-b dev: 24 pairs") and "spearman *" in table


def test_predict_prints_the_cosine_of_each_pair_line(runs, tmp_path, capsys):
    out = runs["cosent"]["out_dir"]
    pairs = [("cat dog horse the a", "dog horse bird so of"), ("red blue green it", "paris rome madrid very")]
    lines = tmp_path / "pairs.txt"
    lines.write_text(f"{pairs[0][0]}\t{pairs[0][1]}\n\n{pairs[1][0]}\t{pairs[1][1]}\n")
    assert main(["predict", "--model", out, str(lines)]) == 0
    printed = capsys.readouterr().out.split("\n")
    embedder = load_embedder(out, EmbedSettings(progress=False))
    a = embedder.encode([p[0] for p in pairs])
    b = embedder.encode([p[1] for p in pairs])
    by_hand = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert printed[1] == "" and printed[3] == ""
    columns = [printed[0].split("\t"), printed[2].split("\t")]
    assert [float(c[0]) for c in columns] == pytest.approx(by_hand.tolist(), abs=1e-4)
    # trained on graded pairs: the second column is the cosine's score on the task's scale
    from albertlm.inference.embed_eval import saved_score_map

    assert [float(c[1]) for c in columns] == pytest.approx(saved_score_map(out)(by_hand).tolist(), abs=1e-3)


def test_an_embedder_refuses_what_only_a_task_head_does(runs, tmp_path, capsys):
    out, data = runs["cosent"]["out_dir"], str(runs["data"])
    one = tmp_path / "one.txt"
    one.write_text("cat dog\tdog horse\njust one text\n")
    cases = {("predict", "--model", out, str(one)): "input line 2: ",
             ("predict", "--model", out, "--patience", "2", str(one)): "--patience: ",
             ("predict", "--model", out, "--prepack", str(one)): "--prepack: ",
             ("evaluate", "--model", out, "--data", data, "--predictions", str(tmp_path / "p.txt")): "--predictions: ",
             ("evaluate", "--model", out, "--data", data, "--task", "sst-2"): "no column 'sentence'"}
    for argv, message in cases.items():
        assert main(list(argv)) == 2, argv
        assert message in _one_line(capsys), argv
    assert not (tmp_path / "p.txt").exists()
