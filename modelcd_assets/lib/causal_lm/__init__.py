"""Causal language models with LoRA adapters: bases, the INT8 base build with adapter slots and its FP32 twin, adapter
files, ONNX Runtime GenAI decoding, and the numbers the gates judge (per-reply NLL, token fidelity, generation health)."""
