"""The model `albertlm compress` starts from: any BERT albertlm imports, or any unfactorized ALBERT.

A BERT directory (transformers or sentence-transformers) is read through `convert_bert.read_bert`
in memory, as `albertlm convert --from bert` reads it; an ALBERT directory (a plain one, or a
sentence-transformers one) through the usual readers. Either way the teacher is the backbone
(`AlbertModel`): task heads, if any, are left out, since compress distils hidden states.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from albertlm.config import AlbertConfig, read_json_file
from albertlm.convert_bert import is_bert_source, read_bert
from albertlm.errors import AlbertlmError
from albertlm.interop.hf import CONFIG_NAME
from albertlm.model import AlbertModel
from albertlm.st_directory import (ST_CONFIG_FILE, SentenceTransformersLayout, export_length, is_sentence_transformers,
                                   read_sentence_transformers, write_modules)


@dataclasses.dataclass
class Teacher:
    """The teacher backbone, its tokenizer and the sentence-transformers modules it came with."""

    model: AlbertModel
    vocabulary: object
    description: str
    layout: SentenceTransformersLayout | None = None
    settings: dict = dataclasses.field(default_factory=dict)

    def record(self, path: str | Path) -> dict:
        """What compress.json says of the teacher."""
        return {"path": str(path), "kind": self.description, "parameters": self.model.num_parameters(),
                "config": dataclasses.asdict(self.model.config.replace(extra={}), dict_factory=_plain)}

    def write_beside(self, student_config: AlbertConfig, out: Path) -> None:
        """The tokenizer, and the sentence-transformers modules when the teacher had them, beside the student in `out`."""
        self.vocabulary.save(out)
        if self.layout is not None:
            write_modules(out, student_config.hidden_size, self.layout.pooling, self.layout.normalize,
                          export_length(student_config, self.layout.max_seq_length),
                          do_lower_case=self.layout.do_lower_case, settings=self.settings)


def _plain(items):
    return {k: v for k, v in items if k != "extra"}


def load_teacher(src: str | Path) -> Teacher:
    """Read SRC as a teacher (see the module docstring).

    Raises:
        AlbertlmError: one line naming the file: not a model directory, a tokenizer missing, a model that
            is not a BERT or an ALBERT.
    """
    from albertlm.tokenizer.auto import load_model_vocabulary

    path = Path(src)
    if not path.is_dir():
        raise AlbertlmError(f"SRC {path}: not a directory; compress reads a BERT or ALBERT model directory")
    if is_bert_source(path):
        imported = read_bert(path)
        if imported.tokenizer is None:
            raise AlbertlmError(f"SRC {path}: no tokenizer (vocab.txt or tokenizer.json); compress needs the "
                                "teacher's to read its text")
        model = imported.model if isinstance(imported.model, AlbertModel) else imported.model.albert  # a head's backbone
        return Teacher(model.eval(), imported.tokenizer, imported.description, imported.layout,
                       imported.settings)
    layout = read_sentence_transformers(path) if is_sentence_transformers(path) else None
    model_dir = layout.model_dir if layout is not None else path
    if not (model_dir / CONFIG_NAME).is_file():
        raise AlbertlmError(f"SRC {path}: no {CONFIG_NAME}; compress reads a BERT or ALBERT model directory")
    model = AlbertModel.from_pretrained(model_dir)
    vocabulary = load_model_vocabulary(model_dir)
    settings = read_json_file(path / ST_CONFIG_FILE) if layout is not None and (path / ST_CONFIG_FILE).is_file() else {}
    kind = "sentence-transformers directory of an ALBERT" if layout is not None else "ALBERT directory"
    return Teacher(model.eval(), vocabulary, kind, layout, settings if isinstance(settings, dict) else {})
