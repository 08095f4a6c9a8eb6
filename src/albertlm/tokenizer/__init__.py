"""Tokenizers with ALBERT's ids: normalisation, the SentencePiece vocabulary, training, Chinese mode.

- normalize.py: the official text normalisation, one normaliser for single texts and batches;
- spiece.py: `Tokenizer`, the SentencePiece vocabulary (`spiece.model` + `tokenizer_config.json`);
- wordpiece.py: `WordPieceTokenizer`, a BERT WordPiece `vocab.txt` (Chinese ALBERT releases);
- tokenizer_json.py: `TokenizerJsonVocabulary`, a `tokenizer.json` (what transformers 5 saves), for
  directories with neither of the two files above;
- auto.py: `load_vocabulary`, the one place that picks the class from a directory's files, and
  `load_model_vocabulary`, which also holds a model directory's tokenizer to its config.json;
- training.py: `train_tokenizer`, from any iterable of sentences;
- chinese.py: Chinese mode (one piece per CJK character, jieba word starts);
- base.py: `Vocabulary`, what every kind of vocabulary offers the rest of albertlm.
The special-token ids (`SpecialIds`, a property of each vocabulary) and the pair layout are
albertlm.vocab's.
"""

from albertlm.tokenizer.auto import (TOKENIZER_FILES, check_matches_model, load_model_vocabulary, load_vocabulary,
                                     vocabulary_fingerprint, vocabulary_kind)
from albertlm.tokenizer.base import Vocabulary
from albertlm.tokenizer.chinese import looks_chinese, split_cjk
from albertlm.tokenizer.normalize import preprocess_batch, preprocess_text
from albertlm.tokenizer.spiece import CONFIG_FILE, CONFIG_VERSION, MODEL_FILE, Tokenizer
from albertlm.tokenizer.tokenizer_json import JSON_FILE, TokenizerJsonVocabulary
from albertlm.tokenizer.wordpiece import VOCAB_FILE, WordPieceTokenizer
from albertlm.tokenizer.training import DEFAULT_INPUT_SENTENCE_SIZE, TrainResult, train_tokenizer
from albertlm.vocab import (CLS_ID, CLS_TOKEN, MASK_ID, MASK_TOKEN, PAD_ID, PAD_TOKEN, SEP_ID, SEP_TOKEN,
                            SPECIAL_TOKENS, SPIECE_IDS, UNK_ID, UNK_TOKEN, SpecialIds)

__all__ = ["CLS_ID", "CLS_TOKEN", "CONFIG_FILE", "CONFIG_VERSION", "DEFAULT_INPUT_SENTENCE_SIZE", "JSON_FILE",
           "MASK_ID", "MASK_TOKEN", "MODEL_FILE", "PAD_ID", "PAD_TOKEN", "SEP_ID", "SEP_TOKEN", "SPECIAL_TOKENS",
           "SPIECE_IDS", "SpecialIds", "TOKENIZER_FILES", "TrainResult",
           "Tokenizer", "TokenizerJsonVocabulary", "UNK_ID", "UNK_TOKEN", "VOCAB_FILE", "Vocabulary",
           "WordPieceTokenizer", "check_matches_model", "load_model_vocabulary", "load_vocabulary", "looks_chinese",
           "preprocess_batch", "preprocess_text", "split_cjk", "train_tokenizer", "vocabulary_fingerprint",
           "vocabulary_kind"]
