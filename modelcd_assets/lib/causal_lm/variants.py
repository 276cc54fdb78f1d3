"""The weight variants a causal LM's base build can be served as, each made from its FP32 twin by ONNX Runtime's
MatMulNBitsQuantizer with the LoRA MatMuls left float, so that every adapter of the base runs on each variant unchanged.

- `int8`: 8-bit weights, symmetric round-to-nearest in blocks of 32: the base build's own INT8 decoder.
- `int4-rtn`: the same at 4 bits, the weakest 4-bit recipe (bench-llm-serving measured it far outside the fidelity gate).
- `int4-rtn-asym-mixed`: asymmetric round-to-nearest 4-bit (a scale and an integer zero point per block), with the
  MatMuls llama.cpp's mixed strategy finds most sensitive at 8 bits (below).
- `int4-kquant-mixed`: k-quant 4-bit (asymmetric, a scale and minimum searched per block), with the MatMuls llama.cpp's
  mixed strategy finds most sensitive kept at 8 bits (symmetric round-to-nearest): the head, and in the first and last
  eighth of the layers and every third layer between, the value and down projections (ONNX Runtime GenAI's builder's
  `matmul_mixed_precision=last_matmul:int8,mixed_layers:int8`, which picks its layers in float arithmetic).
- `int4-hqq-mixed`: HQQ 4-bit (half-quadratic optimisation of each block's scale and zero, no calibration data), with the
  same MatMuls at 8 bits.

Every MatMulNBits computes at the build's accuracy_level (4: activations quantized to INT8 inside each MatMul), whatever
the quantizer wrote. Which variant a base is served as is the fidelity gate's to choose; this module only makes them.

Every LoRA MatMul stays float32. A float32 GEMM sums in an order that depends on how many rows it is given, and
MatMulNBits' INT8 activations amplify the difference: decoding rows together through one LoRA weight (ONNX Runtime
GenAI's batching, one adapter per generator) differed from the batch-1 step by up to 1.02 in the logits
(bench/batch_dependence.py). The server never batches that way: its batched session takes the LoRA weights per row, so
each row's product is a GEMM of its own rows, the one the row alone computes (lib/causal_lm/batched.py). Build recipe 3
computed every LoRA product in float64 as well; per row in float32 a batch of 4 rows on two adapters was the rows alone
and GenAI's batch-1 logits bit for bit, and a decode step took 6.56 ms instead of 6.99 at batch 1 and 10.5 instead of
12.25 at batch 4 (the demo's INT8 build, AMD EPYC, 2 cores).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from modelcd_assets.lib.causal_lm.packed_matmuls import pack_shared_inputs
from modelcd_assets.lib.errors import ModelcdError

MODEL_FILE = "model.onnx"
# The selectors a variant may keep at 8 bits, as ONNX Runtime GenAI's builder names them.
LAST_MATMUL = "last_matmul"
MIXED_LAYERS = "mixed_layers"
_LAYER_MATMUL = re.compile(r"^/model/layers\.(\d+)/(attn|mlp)/(\w+)/MatMul$")
# llama.cpp's mixed strategy upgrades attn_v (attn_qkv where fused) and ffn_down.
_MIXED_PROJECTIONS = {"qkv_proj", "v_proj", "down_proj"}


@dataclass(frozen=True)
class Variant:
    name: str
    algorithm: str  # "rtn" (MatMulNBitsQuantizer's default quantizer), "k_quant" or "hqq"
    bits: int
    eight_bit: tuple[str, ...] = ()  # selectors kept at 8 bits
    symmetric: bool = True  # rtn only: k_quant and hqq are asymmetric by design
    block_size: int = 32

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "algorithm": self.algorithm,
            "bits": self.bits,
            "eight_bit": list(self.eight_bit),
            "symmetric": self.symmetric,
            "block_size": self.block_size,
        }


INT8 = Variant("int8", "rtn", 8)
VARIANTS = {
    v.name: v
    for v in (
        INT8,
        Variant("int4-rtn", "rtn", 4),
        Variant("int4-rtn-asym-mixed", "rtn", 4, (LAST_MATMUL, MIXED_LAYERS), symmetric=False),
        Variant("int4-kquant-mixed", "k_quant", 4, (LAST_MATMUL, MIXED_LAYERS), symmetric=False),
        Variant("int4-hqq-mixed", "hqq", 4, (LAST_MATMUL, MIXED_LAYERS), symmetric=False),
    )
}


def variant_named(name: str) -> Variant:
    if name not in VARIANTS:
        raise ModelcdError(f"no weight variant is named {name!r}: the variants are {', '.join(VARIANTS)}")
    return VARIANTS[name]


def lora_matmuls(graph) -> list[str]:
    """The adapter slots' MatMuls, which stay float in every variant."""
    return [n.name for n in graph.node if n.op_type == "MatMul" and ("/lora_A/" in n.name or "/lora_B/" in n.name)]


def weight_matmuls(graph) -> list[str]:
    """The MatMuls whose weights a variant quantizes: every MatMul with an initializer input, the LoRA slots' excepted."""
    inits = {i.name for i in graph.initializer}
    lora = set(lora_matmuls(graph))
    return [n.name for n in graph.node if n.op_type == "MatMul" and n.name not in lora and any(i in inits for i in n.input)]


def eight_bit_matmuls(graph, selectors: tuple[str, ...]) -> list[str]:
    """The weight MatMuls the selectors keep at 8 bits. mixed_layers is llama.cpp's rule over the decoder's layers
    (llama-quant.cpp's use_more_bits, in integer arithmetic as there): layer i of n when i < n//8, i >= 7n//8, or
    (i - n//8) % 3 == 2. ONNX Runtime GenAI's builder divides in floats instead, which picks other layers when n is not a
    multiple of 8 (SmolLM2's 30)."""
    names = weight_matmuls(graph)
    if unknown := sorted(set(selectors) - {LAST_MATMUL, MIXED_LAYERS}):
        raise ModelcdError(f"no MatMuls are selected by {unknown}: a variant keeps {LAST_MATMUL} and {MIXED_LAYERS} at 8 bits")
    chosen = []
    if LAST_MATMUL in selectors:
        head = [n for n in names if n == "/lm_head/MatMul"]
        if not head:
            raise ModelcdError(
                f"the decoder has no /lm_head/MatMul to keep at 8 bits (its head is not a MatMul the GenAI builder named so): "
                f"choose a variant without {LAST_MATMUL}"
            )
        chosen += head
    if MIXED_LAYERS in selectors:
        layers = {int(m.group(1)) for n in names if (m := _LAYER_MATMUL.match(n))}
        n_layers = max(layers) + 1 if layers else 0
        upgraded = {i for i in range(n_layers) if i < n_layers // 8 or i >= 7 * n_layers // 8 or (i - n_layers // 8) % 3 == 2}
        chosen += [n for n in names if (m := _LAYER_MATMUL.match(n)) and int(m.group(1)) in upgraded and m.group(3) in _MIXED_PROJECTIONS]
    return chosen


def _default_pass(model, bits: int, block_size: int, symmetric: bool, accuracy_level: int, exclude: list[str]):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    q = MatMulNBitsQuantizer(
        model, bits=bits, block_size=block_size, is_symmetric=symmetric, accuracy_level=accuracy_level, nodes_to_exclude=exclude
    )
    q.process()
    return q.model.model


def _variant_pass(model, variant: Variant, accuracy_level: int, exclude: list[str]):
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        HQQWeightOnlyQuantConfig,
        KQuantWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    if variant.algorithm == "rtn":
        return _default_pass(model, variant.bits, variant.block_size, variant.symmetric, accuracy_level, exclude)
    if variant.algorithm == "k_quant":
        if variant.bits != 4:  # ONNX Runtime's k-quant path writes 4-bit blocks whatever bits says
            raise ModelcdError(
                f"variant {variant.name} asks k_quant for {variant.bits} bits: ONNX Runtime's k-quant makes 4-bit weights only"
            )
        config = KQuantWeightOnlyQuantConfig()
    elif variant.algorithm == "hqq":
        config = HQQWeightOnlyQuantConfig(block_size=variant.block_size, bits=variant.bits)
    else:
        raise ModelcdError(f"variant {variant.name} names algorithm {variant.algorithm!r}: it must be rtn, k_quant or hqq")
    q = MatMulNBitsQuantizer(
        model,
        bits=variant.bits,
        block_size=variant.block_size,
        is_symmetric=variant.symmetric,
        accuracy_level=accuracy_level,
        nodes_to_exclude=exclude,
        algo_config=config,
    )
    q.process()
    return q.model.model


def quantize_variant(fp32_model: Path, out_model: Path, variant: Variant, accuracy_level: int) -> dict:
    """out_model (with its weights beside it as out_model.data): fp32_model's weight MatMuls quantized as variant says,
    the LoRA slots float, and those that read one input at one width packed into one (lib/causal_lm/packed_matmuls.py).
    Returns what was made: how many MatMuls at each width (before packing), and which were packed together."""
    import onnx
    from onnxruntime.quantization.onnx_model import ONNXModel

    model = onnx.load(str(fp32_model))
    lora = lora_matmuls(model.graph)
    weights = weight_matmuls(model.graph)
    if not weights:
        raise ModelcdError(f"{fp32_model} has no weight MatMul to quantize: it is not a decoder the GenAI builder made")
    eight = eight_bit_matmuls(model.graph, variant.eight_bit)
    if eight:  # first the MatMuls kept at 8 bits, each a MatMulNBits the variant's own pass then leaves alone
        kept = set(eight)
        others = [n for n in weights if n not in kept]
        model = _default_pass(model, 8, variant.block_size, True, accuracy_level, lora + others)
    model = _variant_pass(model, variant, accuracy_level, lora)
    widths = {}
    for node in model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        attrs = {a.name: a for a in node.attribute}
        widths[attrs["bits"].i] = widths.get(attrs["bits"].i, 0) + 1
        # The compute type every served MatMul runs at, whatever the quantizer wrote; 0 (the op's default) is written as the
        # quantizer writes it, by leaving the attribute out.
        if "accuracy_level" in attrs:
            attrs["accuracy_level"].i = accuracy_level
        elif accuracy_level:
            node.attribute.append(onnx.helper.make_attribute("accuracy_level", accuracy_level))
    quantizable = set(weights)
    if left := [n.name for n in model.graph.node if n.op_type == "MatMul" and n.name in quantizable]:
        raise ModelcdError(
            f"variant {variant.name} left {len(left)} weight MatMuls unquantized (first: {left[0]}): ONNX Runtime's "
            f"{variant.algorithm} quantizer takes only a 2-D weight as a MatMul's second input; use the int8 variant for this base"
        )
    packed = pack_shared_inputs(model)
    out_model.parent.mkdir(parents=True, exist_ok=True)
    # As the quantizer itself saves: sorted, with every tensor in out_model.data (the base build's INT8 bytes as before).
    ONNXModel(model).save_model_to_file(str(out_model), use_external_data_format=True)
    return {
        "variant": variant.to_dict(),
        "matmuls_by_bits": {str(k): v for k, v in sorted(widths.items())},
        "lora_float": len(lora),
        "packed": packed,
    }
