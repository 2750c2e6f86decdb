"""A tiny random Llama and its tokenizer, made offline in a second or two, for tests and demos.

`build_tiny_model(path)` trains a byte-level BPE tokenizer on a small built-in English corpus
and saves it beside a 2-layer Llama, so `AutoTokenizer.from_pretrained(path)` and
`AutoModelForCausalLM.from_pretrained(path)` load them with no network. The model is random:
it learns the toy tasks of `trainer.demo_data` within a few dozen LoRA steps, and nothing else.
`python -m trainer.tiny PATH` builds one.
"""

from __future__ import annotations

import sys
from pathlib import Path

BOS, EOS, PAD, UNK = "<s>", "</s>", "<pad>", "<unk>"
LM_HEAD_STD = 0.2

# Enough English, and the words of the prompt templates, for a few hundred useful merges.
CORPUS = [
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.",
    "Below is an instruction that describes a task, paired with an input that provides "
    "further context.",
    "### Instruction:\n### Input:\n### Response:\n",
    "<|im_start|>system\n<|im_start|>user\n<|im_start|>assistant\n<|im_end|>\n",
    "Reverse the letters. Reverse: a b c d e f g h -> h g f e d c b a\nAnswer:",
    "You reverse letters. You are a helpful assistant.",
    "The quick brown fox jumps over the lazy dog.",
    "Training a language model means showing it text and asking it to predict the next word.",
    "A small model learns quickly, forgets quickly and is cheap to run on a laptop.",
    "The capital of France is Paris. The capital of Italy is Rome. "
    "The capital of Spain is Madrid. The capital of Germany is Berlin.",
    "Once upon a time there was a little robot who wanted to learn how to write poems.",
    "Question: what is two plus two? Answer: four. Question: what is three plus four? "
    "Answer: seven.",
    "She sells sea shells by the sea shore, and the shells she sells are surely sea shells.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Checkpoints are saved every few steps so that a stopped run can resume where it left off.",
    "The weather today is sunny with a light breeze from the west and no rain in sight.",
    "Please summarise the following paragraph in one sentence, keeping the main idea.",
    "Translate into French: good morning, how are you? Bonjour, comment allez-vous ?",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000",
]


def build_tiny_model(path: str | Path, *, vocab_size: int = 512, seed: int = 0) -> Path:
    """Save a tiny random Llama and its tokenizer in `path` (created); the path.

    The same `vocab_size` and `seed` give the same tokenizer and the same weights.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils.logging import disable_progress_bar

    disable_progress_bar()

    specials = [UNK, BOS, EOS, PAD]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(specials) + 16:
        raise ValueError(f"vocab_size must be at least {len(alphabet) + len(specials) + 16}")

    bpe = Tokenizer(models.BPE(unk_token=UNK))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            initial_alphabet=alphabet,
            show_progress=False,
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK
    )

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # Llama draws every weight with std 0.02, which leaves a random model's logits within about
    # ±1: a LoRA on the attention alone could then barely move them, and the toy tasks would
    # take thousands of steps. A wider output layer lets them be learned in a few dozen.
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, LM_HEAD_STD)

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m trainer.tiny PATH")
    print(build_tiny_model(sys.argv[1]))
