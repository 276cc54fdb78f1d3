"""What machine a bench ran on: every results file says which CPU printed its ratios."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# CPU features that decide INT8 speed: VNNI dot products, AMX tiles.
INT8_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8")


def int8_flags() -> list[str]:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split(":", 1)[1].split()
    except (OSError, StopIteration):
        return []
    return [f for f in INT8_FLAGS if f in flags]


def machine() -> dict:
    import onnxruntime

    return {
        "cpu": cpu_model(),
        "int8_flags": int8_flags(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
    }
