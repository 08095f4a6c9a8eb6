"""albertlm: ALBERT (A Lite BERT) in PyTorch.

Public API:
    AlbertConfig, PRESETS, get_preset         the model's shape (config.py)
    AlbertModel, AlbertForPreTraining         the network (model.py)
    AlbertForSequenceClassification, AlbertForTokenClassification,
    AlbertForQuestionAnswering, AlbertForMultipleChoice
                                              fine-tuning heads (heads.py)
"""

from albertlm.config import PRESETS, AlbertConfig, get_preset
from albertlm.errors import AlbertlmError, ConfigError
from albertlm.heads import (AlbertForMultipleChoice, AlbertForQuestionAnswering, AlbertForSequenceClassification,
                            AlbertForTokenClassification)
from albertlm.model import AlbertForPreTraining, AlbertModel

__version__ = "0.1.0"

__all__ = [
    "AlbertConfig", "AlbertForMultipleChoice", "AlbertForPreTraining", "AlbertForQuestionAnswering",
    "AlbertForSequenceClassification", "AlbertForTokenClassification", "AlbertModel", "AlbertlmError",
    "ConfigError", "PRESETS", "get_preset", "__version__",
]
