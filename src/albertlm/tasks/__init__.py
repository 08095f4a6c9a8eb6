"""Fine-tuning tasks: readers, features, post-processing and metrics, one file per family.

    glue.py             sentence (pair) classification and regression: GLUE, Chinese sets, generic tables
    squad.py            extractive QA: SQuAD v1.1 / v2.0, CMRC 2018
    multiple_choice.py  RACE-style reading comprehension
    ner.py              CoNLL-style and CLUENER named-entity recognition
    metrics.py          the official metrics
    registry.py         task names -> reader, labels, metric, default recipe (paper Table 14)

Tasks know the tokenizer but no network: features are numpy arrays.
"""

from albertlm.tasks.registry import TASKS, TaskSpec, generic_task, get_task

__all__ = ["TASKS", "TaskSpec", "generic_task", "get_task"]
