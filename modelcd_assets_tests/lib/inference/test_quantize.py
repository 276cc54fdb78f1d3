"""Where INT8 weights need 7 bits: x86 CPUs whose INT8 kernels saturate (no VNNI), and only those."""

import pytest

from modelcd_assets.lib.inference import quantize
from modelcd_assets.lib.inference.quantize import DYNAMIC, STATIC, artifact_id, weights_in_7_bits

AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma"})


@pytest.mark.parametrize(
    "machine, flags, seven",
    [
        ("x86_64", AVX2, True),  # this project's AMD EPYC machines without AVX-512: VPMADDUBSW saturates
        ("x86_64", AVX2 | {"avx512f", "avx512bw"}, True),  # AVX-512 without VNNI saturates too
        ("x86_64", AVX2 | {"avx512f", "avx512_vnni"}, False),
        ("x86_64", AVX2 | {"avx_vnni"}, False),
        ("x86_64", AVX2 | {"amx_int8", "avx512_vnni"}, False),
        ("aarch64", frozenset(), False),  # Arm's int8 dot products do not saturate this way
    ],
)
def test_seven_bit_weights_only_where_int8_kernels_saturate(machine, flags, seven):
    assert weights_in_7_bits(machine, flags) is seven


def test_a_seven_bit_build_has_a_name_of_its_own(monkeypatch):
    monkeypatch.setattr(quantize, "weights_in_7_bits", lambda: True)
    assert (artifact_id(DYNAMIC, "ab" * 32), artifact_id(STATIC, "ab" * 32)) == ("dynamic_7bit", f"static_{'ab' * 8}_7bit")
    monkeypatch.setattr(quantize, "weights_in_7_bits", lambda: False)
    assert (artifact_id(DYNAMIC, "ab" * 32), artifact_id(STATIC, "ab" * 32)) == ("dynamic", f"static_{'ab' * 8}")
