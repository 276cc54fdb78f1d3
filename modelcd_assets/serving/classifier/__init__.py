"""A classifier's server: its gated INT8 artifact in ONNX Runtime, micro-batched, behind POST /v1/classify."""
