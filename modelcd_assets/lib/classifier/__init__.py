"""The classifier's model code: loading, merging LoRA adapters, training, FP32 export, the health probe, its I/O contract, and
what a classifier version serves."""
