"""The load generator starts in a fraction of a second: the demo and the fault sandbox start it when a rollout's first step
has begun, so each second it spends importing is a second of the step without a request. Importing the serving package's
rollout module pulled in the registry and MLflow (7 s on a busy 2-core machine), and a sandbox step of 8 s had none."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("mlflow", "dagster", "onnxruntime", "torch", "numpy", "fastapi")


def test_the_load_generator_imports_none_of_the_heavy_packages():
    code = "import sys, modelcd_assets.serving.loadgen; print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in %r)))" % (HEAVY,)
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout.split()
    assert got == [], f"modelcd_assets.serving.loadgen imports {sorted({m.split('.')[0] for m in got})}"
