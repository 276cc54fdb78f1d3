"""A safetensors file's tensors as numpy arrays, without torch: bfloat16 and float16 widened to float32, exactly.

numpy has no bfloat16, so safetensors' numpy loader refuses a file that holds one ("data type 'bfloat16' not understood"),
and peft users often ship adapters in it. A bfloat16 is the top half of a float32: shifted back, it is the same number.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

_NUMPY = {
    "BOOL": np.bool_,
    "U8": np.uint8,
    "I8": np.int8,
    "I16": np.int16,
    "U16": np.uint16,
    "F16": np.float16,
    "I32": np.int32,
    "U32": np.uint32,
    "F32": np.float32,
    "I64": np.int64,
    "U64": np.uint64,
    "F64": np.float64,
}


def _array(dtype: str, shape: list[int], data: bytearray) -> np.ndarray:
    if dtype == "BF16":
        return (np.frombuffer(data, "<u2").astype("<u4") << 16).view("<f4").reshape(shape)
    if dtype not in _NUMPY:
        raise ValueError(f"a tensor of dtype {dtype} cannot be read as numbers here; save the weights as float32, float16 or bfloat16")
    value = np.frombuffer(data, np.dtype(_NUMPY[dtype]).newbyteorder("<")).reshape(shape)
    return value.astype(np.float32) if dtype == "F16" else value


def read_tensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file; floats as float32 (float64 as stored); reads the file's bytes, never pickle."""
    from safetensors import deserialize

    return {name: _array(t["dtype"], t["shape"], t["data"]) for name, t in deserialize(Path(path).read_bytes())}


def nonfinite_tensors(safetensors_file: Path) -> list[str]:
    """Names of tensors holding NaN or Inf (float16 and bfloat16 too); reads the file's bytes, never pickle."""
    return sorted(k for k, v in read_tensors(safetensors_file).items() if np.issubdtype(v.dtype, np.floating) and not np.isfinite(v).all())
