"""Parameter / FLOP / communication accounting: analytic counts equal the built model's, the
released counts come out exactly, the paper's figures are matched, and `albertlm params` prints."""

import json

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from albertlm import PRESETS, AlbertForPreTraining, AlbertModel, get_preset
from albertlm.analysis.params import (
    BATCH_TOKENS, accounting, allreduce_bytes, count_parameters, flops_per_token, paper_rows)
from albertlm.cli import main

TINY = {
    "all": get_preset("test"),
    "attention": get_preset("test", sharing="attention"),
    "ffn": get_preset("test", sharing="ffn"),
    "none": get_preset("test", sharing="none"),
    "G2K2": get_preset("test", num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2),
    "G1K2": get_preset("test", inner_group_num=2),
    "G3": get_preset("test", num_hidden_layers=6, num_hidden_groups=3),
    "albert_zh": get_preset("test", embedding_layout="albert_zh"),
}


@pytest.mark.parametrize("name", TINY)
def test_counts_equal_built_model(name):
    config = TINY[name]
    count = count_parameters(config)
    assert count.backbone == AlbertModel(config).num_parameters()
    assert count.with_heads == AlbertForPreTraining(config).num_parameters()


@pytest.mark.parametrize("table,name,config", [r[:3] for r in paper_rows()], ids=lambda x: str(x)[:20])
def test_counts_equal_built_model_big(table, name, config):
    with torch.device("meta"):  # shapes only: no memory, no time
        backbone, full = AlbertModel(config).num_parameters(), AlbertForPreTraining(config).num_parameters()
    count = count_parameters(config)
    assert (count.backbone, count.with_heads) == (backbone, full)


def test_released_counts():
    # The counts Hugging Face and Keras report for the released v2 models.
    backbone = {"albert-base": 11_683_584, "albert-large": 17_683_968,
                "albert-xlarge": 58_724_864, "albert-xxlarge": 222_595_584}
    with_heads = {"albert-base": 11_813_810, "albert-large": 17_847_474,
                  "albert-xlarge": 59_021_490, "albert-xxlarge": 223_158_450}
    for name in backbone:
        count = count_parameters(PRESETS[name])
        assert (count.backbone, count.with_heads) == (backbone[name], with_heads[name]), name


def test_breakdown_parts():
    count = count_parameters(PRESETS["albert-base"])
    assert count.embeddings == (30000 + 512 + 2) * 128 + 2 * 128
    assert count.projection == 128 * 768 + 768
    assert (count.num_attention_blocks, count.num_ffn_blocks) == (1, 1)
    bert = count_parameters(PRESETS["bert-large"])
    assert (bert.num_attention_blocks, bert.num_ffn_blocks) == (24, 24)
    attention = count_parameters(get_preset("albert-base", sharing="attention"))
    assert (attention.num_attention_blocks, attention.num_ffn_blocks) == (1, 12)


def test_albert_zh_layout_counts_each_tensor():
    # The count is the sum of the tensors' sizes, part by part: H-wide position/type tables and
    # LayerNorm, a bias-free E×H word projection, no E→H projection after the sum, an H→H MLM dense.
    config = TINY["albert_zh"]
    V, E, H = config.vocab_size, config.embedding_size, config.hidden_size
    P, T = config.max_position_embeddings, config.type_vocab_size
    count = count_parameters(config)
    model = AlbertForPreTraining(config)
    emb = model.albert.embeddings
    assert count.embeddings == sum(p.numel() for p in emb.parameters()) == V * E + E * H + (P + T) * H + 2 * H
    assert count.projection == sum(p.numel() for p in model.albert.project.parameters()) == 0
    assert count.mlm_head == sum(p.numel() for p in model.mlm.parameters()) == H * H + H + 2 * H + V
    assert count.with_heads == sum(p.numel() for p in model.parameters())


def test_every_paper_figure_within_2m_except_xxlarge():
    records = [r for r in accounting() if r.paper_M is not None]
    assert len(records) == 6 + 8 + 8  # Tables 1, 3, 4
    for r in records:
        if r.name == "albert-xxlarge":
            assert r.within_tolerance is False and "222.6M" in r.note
            assert r.paper_M == 235
        else:
            assert r.within_tolerance and abs(r.backbone / 1e6 - r.paper_M) <= 2.0, r.name
    # The paper prints no figure for these.
    blank = {r.name for r in accounting() if r.paper_M is None}
    assert blank == {"bert-xlarge", "albert-tiny", "albert-mini", "albert-small", "test"}


@pytest.mark.parametrize("name", ["G2K2", "attention", "none", "albert_zh"])
def test_flops_match_torch_flop_counter(name):
    # The math SDPA backend decomposes into bmm, so the counter sees the attention terms too.
    config = TINY[name]
    model = AlbertForPreTraining(config)
    B, S, masked = 2, 16, 4
    ids = torch.randint(0, config.vocab_size, (B, S))
    labels = torch.full((B, S), -100)
    labels[:, :masked] = ids[:, :masked]
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        out = model(ids, labels=labels, sentence_order_label=torch.zeros(B, dtype=torch.long))
        forward = counter.get_total_flops()
        out.loss.backward()
    fraction = masked / S
    assert forward / (B * S) == pytest.approx(flops_per_token(config, S, training=False, mlm_fraction=fraction))
    assert counter.get_total_flops() / (B * S) == pytest.approx(flops_per_token(config, S, mlm_fraction=fraction))


def test_sharing_saves_parameters_not_flops():
    base = PRESETS["albert-base"]
    none = get_preset("albert-base", sharing="none")
    assert flops_per_token(base) == flops_per_token(none)
    assert count_parameters(none).backbone > 7 * count_parameters(base).backbone
    # Twice the layer applications, twice the layer FLOPs, the same parameters.
    deep = base.replace(num_hidden_layers=24)
    assert count_parameters(deep).backbone == count_parameters(base).backbone
    assert flops_per_token(deep) > 1.9 * flops_per_token(base)


def test_allreduce_bytes():
    large, bert = PRESETS["albert-large"], PRESETS["bert-large"]
    assert allreduce_bytes(large) == 17_847_474 * 4
    assert allreduce_bytes(large, dtype_bytes=2) == 17_847_474 * 2
    assert allreduce_bytes(large, heads=False) == 17_683_968 * 4
    assert allreduce_bytes(bert) > 18 * allreduce_bytes(large)  # the paper's "lower communication"


def test_cli_json(capsys):
    assert main(["params", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in records]
    assert set(PRESETS) <= set(names) and len(names) == len(PRESETS) + 16
    base = records[names.index("albert-base")]
    assert base["backbone"] == 11_683_584 and base["with_heads"] == 11_813_810
    assert base["batch_tokens"] == BATCH_TOKENS
    assert base["train_flops_per_step"] == pytest.approx(base["train_flops_per_token"] * BATCH_TOKENS)
    assert base["allreduce_bytes_fp32"] == 2 * base["allreduce_bytes_bf16"]


def test_cli_batch_tokens(capsys):
    assert main(["params", "--json", "--batch-tokens", "1000"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert all(r["batch_tokens"] == 1000 for r in records)


def test_cli_table(capsys):
    assert main(["params"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["name", "L", "H"]
    assert max(map(len, lines)) <= 100
    for name in [*PRESETS, "t3-e64-none", "t4-e128-attention"]:
        assert any(line.split()[0].rstrip("*") == name for line in lines if line.strip()), name
    assert "222,595,584" in out and "223,158,450" in out
    assert "albert-xxlarge*" in out and "235M in Table 1" in out


def test_cli_rejects_bad_batch_tokens(capsys):
    assert main(["params", "--batch-tokens", "0"]) == 2
    assert "--batch-tokens" in capsys.readouterr().err
