"""`albertlm compress`: a pretrained BERT (or unfactorized ALBERT) cut to the paper's shapes, then distilled.

- surgery.py: the factorized embedding (LayerNorm-aware SVD), cross-layer sharing inits, FFN pruning;
- objective.py: what the student learns from the teacher (hidden states, pooled vectors);
- text.py: the unlabelled examples, from any corpus `data/corpus.py` reads;
- teacher.py: the teacher, from a BERT or ALBERT directory;
- run.py: the run itself (budget, checkpoints, resume, the output directory).
"""

from albertlm.compress.run import CompressRecipe, compress
from albertlm.compress.teacher import load_teacher

__all__ = ["CompressRecipe", "compress", "load_teacher"]
