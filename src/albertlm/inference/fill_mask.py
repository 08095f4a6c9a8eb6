"""Filling [MASK] with a pretrained directory's MLM head (`albertlm fill-mask`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from albertlm.errors import AlbertlmError
from albertlm.config import PRETRAINING_KEY
from albertlm.inference.load import MASKED_LM_ARCHITECTURES, load_model_dir, read_architecture
from albertlm.inference.settings import FillMaskSettings


@torch.no_grad()
def fill_mask(model_dir: str | Path, text: str, top_k: int = 5, device: str | torch.device = "cpu"
              ) -> tuple[str, list[list[tuple[str, float]]]]:
    """Fill every [MASK] of a text with a pretrained model's MLM head.

    Args:
        model_dir: a pretrained directory (ours, or transformers' AlbertForPreTraining / AlbertForMaskedLM).
        text: text containing at least one literal [MASK].
        top_k: candidates per mask.
        device: torch device.
    Returns:
        (the text with every mask replaced by its best piece, [[(piece, probability)] per mask]).
    """
    FillMaskSettings(top_k)
    arch, config = read_architecture(model_dir)
    pretraining = config.extra.get(PRETRAINING_KEY)
    rtd = isinstance(pretraining, dict) and pretraining.get("token_objective") == "rtd"
    if arch not in MASKED_LM_ARCHITECTURES and rtd:
        raise AlbertlmError(f"{model_dir}: the discriminator of a replaced-token-detection run, saved without a "
                            "masked-LM head (it learnt to tell replaced tokens, not to fill masks); fine-tune it with "
                            "albertlm finetune --model")
    if arch not in MASKED_LM_ARCHITECTURES:
        raise AlbertlmError(f"{model_dir}: holds an {arch}, which has no masked-LM head; fill-mask needs a "
                            f"pretrained directory ({' or '.join(MASKED_LM_ARCHITECTURES)})")
    loaded = load_model_dir(model_dir, device=device, pretrained=True)
    model, tokenizer = loaded.model, loaded.tokenizer
    ids, _ = tokenizer.build_inputs(tokenizer.encode(text))
    positions = np.flatnonzero(ids == tokenizer.special_ids.mask)
    if not len(positions):
        raise AlbertlmError("the text has no [MASK] to fill")
    if len(ids) > model.config.max_position_embeddings:
        raise AlbertlmError(f"the text has {len(ids)} pieces; the model takes at most "
                            f"{model.config.max_position_embeddings}")
    input_ids = torch.from_numpy(ids.astype(np.int64))[None].to(loaded.device)
    logits = model(input_ids).prediction_logits[0, positions].float()  # [masks, V]
    probs = torch.softmax(logits, -1)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    candidates = [[(tokenizer.convert_ids_to_tokens([int(i)])[0], float(p)) for p, i in zip(ps, ix)]
                  for ps, ix in zip(top.values, top.indices)]
    filled = ids.copy()
    filled[positions] = top.indices[:, 0].cpu().numpy()
    return tokenizer.decode(filled[1:-1]), candidates
