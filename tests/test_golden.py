"""Golden loss curves: 20 deterministic CPU steps of pretraining and of fine-tuning on the `test`
preset, compared with the losses stored in tests/golden/curves.json.

A change to masking, initialisation, the data pipeline or the losses that still "learns" changes
these numbers and fails here. When a change is meant to alter them, regenerate the file with
`ALBERTLM_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py` and say why in the commit.
"""

import json
import os
from pathlib import Path

import pytest
import torch

from albertlm.train.finetune import FinetuneRecipe, finetune
from albertlm.train.metrics import read_metrics
from albertlm.train.pretrain import PretrainRecipe, pretrain
from conftest import write_story_corpus

GOLDEN = Path(__file__).parent / "golden" / "curves.json"
RTOL = 1e-4  # float reductions may differ in the last bits between CPUs; real changes move far more


@pytest.fixture(scope="module")
def curves(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root = tmp_path_factory.mktemp("golden")
        corpus = write_story_corpus(root / "corpus.txt", documents=60)
        recipe = PretrainRecipe().with_settings(preset="test", corpus=str(corpus), vocab_size=64, max_seq_length=64,
                                curriculum_seq_length=16, curriculum_steps=5, batch_size=8, steps=20, warmup_steps=4,
                                lr=3e-3, eval_every=20, eval_examples=32, log_every=1, checkpoint_every=20,
                                heldout_fraction=0.1, precision="fp32", workers=1)
        pretrain(recipe, root / "pre", progress=False)
        pre = [r["loss"] for r in read_metrics(root / "pre" / "metrics.jsonl") if r["split"] == "train"]
        data = root / "sst"
        data.mkdir()
        words = {0: "bad awful boring dull".split(), 1: "good great fun lovely".split()}
        for split, n in (("train", 80), ("dev", 16)):
            rows = ["sentence\tlabel"] + [f"the {words[i % 2][i % 4]} cat sat near the river\t{i % 2}"
                                          for i in range(n)]
            (data / f"{split}.tsv").write_text("\n".join(rows) + "\n")
        out = {"pretrain": pre}
        # Padded, and unpadded (the CPU default): with dropout on, the two draw their masks over differently
        # shaped tensors, so their curves part after the first step and each has its own golden curve.
        for name, unpad in (("finetune", "off"), ("finetune_unpadded", "auto")):
            ft = FinetuneRecipe(lr=1e-3, batch_size=8, steps=20, warmup_steps=2, max_seq_length=32, eval_every=20,
                                log_every=1, dropout=0.1, seed=0, unpad=unpad)
            finetune("sst-2", root / "pre" / "model", data, root / name, ft, progress=False)
            out[name] = [r["loss"] for r in read_metrics(root / name / "metrics.jsonl") if r["split"] == "train"]
        return out
    finally:
        torch.set_num_threads(threads)


def test_loss_curves_match_the_golden_file(curves):
    assert all(len(curve) == 20 for curve in curves.values())
    if os.environ.get("ALBERTLM_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(curves, indent=1) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert curves["finetune"][0] == pytest.approx(curves["finetune_unpadded"][0], rel=RTOL)  # the same start
    for name in ("pretrain", "finetune", "finetune_unpadded"):
        assert curves[name] == pytest.approx(golden[name], rel=RTOL), name
