"""CUDA provider checks: run only where onnxruntime-gpu sees a device (the `gpu` extra). CPU CI skips them."""

import numpy as np
import onnxruntime as ort
import pytest

from modelcd_assets.lib.classifier.export import export_onnx
from modelcd_assets.lib.demo.tickets import generate
from modelcd_assets.lib.inference.runtime import logits, providers, session
from modelcd_assets.lib.inference.tokens import encode

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(), reason="needs onnxruntime-gpu and a CUDA device"),
]


def test_cuda_is_preferred_and_matches_cpu(tiny_trained, tmp_path):
    assert providers()[0] == "CUDAExecutionProvider"
    onnx_path = export_onnx(tiny_trained, tmp_path / "model.onnx")
    feeds = encode(tiny_trained, [e.text for e in generate(64, 3)])
    gpu = session(onnx_path, provider="CUDAExecutionProvider")
    assert gpu.get_providers()[0] == "CUDAExecutionProvider"
    cpu = logits(session(onnx_path, provider="CPUExecutionProvider"), feeds)
    assert np.abs(logits(gpu, feeds) - cpu).max() < 1e-3
