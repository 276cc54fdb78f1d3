"""Torch-side model code: loading, merging LoRA adapters, training, FP32 export and the health probe."""
