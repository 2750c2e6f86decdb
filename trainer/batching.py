"""The training examples as a torch `Dataset`, and the collator that pads a batch."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from trainer.data import Example
from trainer.formats import IGNORE_INDEX


class Examples(Dataset):
    def __init__(self, examples: list[Example]) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        return self.examples[index]


class Collator:
    """Pads a batch on the right to its longest example: `pad_id` in the inputs, -100 in the
    labels, 0 in the attention mask."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, batch: list[Example]) -> dict[str, torch.Tensor]:
        width = max(len(example.input_ids) for example in batch)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, example in enumerate(batch):
            length = len(example.input_ids)
            input_ids[row, :length] = torch.tensor(example.input_ids, dtype=torch.long)
            labels[row, :length] = torch.tensor(example.labels, dtype=torch.long)
            attention_mask[row, :length] = 1
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}
