"""ONNX builds and inference: content-addressed builds, INT8 quantization, runtime sessions, tokenization, evaluation and timing."""
