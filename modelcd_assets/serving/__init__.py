"""The serving process: one base model in memory, LoRA adapters swapped in and out while it serves."""
