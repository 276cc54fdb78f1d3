"""The base build: one INT8 decoder per base with LoRA slots as graph inputs, and its FP32 twin, the fidelity reference.

The ONNX Runtime GenAI builder makes the FP32 decoder (GroupQueryAttention with a KV cache) with LoRA MatMuls for the
targets; their weights then become graph inputs whose default initializers are zeros, so with no adapter the graph is
the true base. The INT8 decoder quantizes every other MatMul to 8-bit weight-only MatMulNBits: quantizing the LoRA
MatMuls would bake one adapter in (lib/causal_lm/variants.py makes it, as it makes the 4-bit variants, and packs the
query, key and value projections, and the gate and up projections, into one MatMulNBits each). A candidate's
own build is then an adapter file (lib/causal_lm/adapter_file.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from modelcd_assets.lib.causal_lm.slots import SLOT, TARGETS, AdapterSlots
from modelcd_assets.lib.causal_lm.variants import INT8, quantize_variant, variant_named
from modelcd_assets.lib.errors import BadCandidate, ModelcdError
from modelcd_assets.lib.hashing import folder_hash, text_hash
from modelcd_assets.lib.inference.builds import folder_lock, read_json, write_json

# Bump when the way base builds are made changes, so stale cached builds are not reused. 2: build.json records the INT8
# files' sha256, which the throughput gate checks the served graph against. 3: the LoRA products computed in float64. 4:
# in float32 again, the batched session taking them per row (lib/causal_lm/variants.py says why that is the batch-1 step).
# 5: the projections that read one input packed into one MatMulNBits (lib/causal_lm/packed_matmuls.py): the same
# logits, other bytes.
BASE_BUILD_RECIPE = "modelcd-llm-base-5"
MODEL_FILE = "model.onnx"


@dataclass(frozen=True)
class BaseBuildOptions:
    rank: int = 8
    targets: tuple[str, ...] = ("q_proj", "v_proj")
    accuracy_level: int = 4  # MatMulNBits' compute type: 4 is INT8 activations (fast); 1 is FP32 (closer, ~10x slower here)
    block_size: int = 32

    def key(self) -> str:
        return json.dumps(
            {"rank": self.rank, "targets": sorted(self.targets), "accuracy_level": self.accuracy_level, "block_size": self.block_size},
            sort_keys=True,
        )


@dataclass(frozen=True)
class BaseBuild:
    dir: Path

    @classmethod
    def for_content(cls, builds_root: Path, base_hash: str, options: BaseBuildOptions) -> "BaseBuild":
        return cls(Path(builds_root) / text_hash(BASE_BUILD_RECIPE, base_hash, options.key())[:24])

    @property
    def fp32(self) -> Path:
        return self.dir / "fp32"

    @property
    def int8(self) -> Path:
        return self.dir / INT8.name

    def weights(self, variant: str) -> Path:
        """The decoder folder of one weight variant (lib/causal_lm/variants.py): int8/ is made with the build, the others
        by make_variant when the fidelity gate first considers them."""
        return self.dir / variant_named(variant).name

    @property
    def slots_file(self) -> Path:
        return self.dir / "slots.json"

    @property
    def timing_dir(self) -> Path:
        """The build's own timings, one file per timing setup (lib/causal_lm/benchmark.build_timing)."""
        return self.dir / "timing"

    @property
    def recorded_int8_sha256(self) -> str | None:
        """The INT8 decoder folder's hash as the build recorded it when it was made (None for a build that did not)."""
        return self.recorded_sha256(INT8.name)

    def recorded_sha256(self, variant: str) -> str | None:
        """A variant's decoder folder hash as recorded when it was made (None where nothing recorded it)."""
        path = self.dir / ("build.json" if variant == INT8.name else f"{variant_named(variant).name}.json")
        return json.loads(path.read_text()).get("int8_sha256" if variant == INT8.name else "sha256") if path.is_file() else None

    def options(self) -> dict:
        return read_json(self.dir / "build.json")["options"]

    @property
    def done(self) -> bool:
        return self.slots_file.is_file() and (self.int8 / MODEL_FILE).is_file() and (self.fp32 / MODEL_FILE).is_file()

    def slots(self) -> AdapterSlots:
        return AdapterSlots.read(self.slots_file)


def _zero_adapter(base_dir: Path, out: Path, options: BaseBuildOptions) -> None:
    """A peft adapter of the base with the slots' rank and targets (B is zero), for the builder to lay the slots out."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    peft_model = get_peft_model(
        model, LoraConfig(r=options.rank, lora_alpha=options.rank, target_modules=list(options.targets), task_type="CAUSAL_LM")
    )
    peft_model.save_pretrained(str(out))


def _run_builder(base_dir: Path, adapter: Path, out: Path, cache: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "onnxruntime_genai.models.builder",
        "-i",
        str(base_dir),
        "-o",
        str(out),
        "-p",
        "fp32",
        "-e",
        "cpu",
        "-c",
        str(cache),
        "--extra_options",
        f"adapter_path={adapter}",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0 or not (out / MODEL_FILE).is_file():
        tail = (done.stdout + done.stderr)[-1500:]
        raise ModelcdError(
            f"the ONNX Runtime GenAI builder could not build {base_dir} (exit {done.returncode}): {tail}\n"
            "check that the base is a causal LM the builder supports (Llama, Mistral, Qwen, Phi, Gemma, SmolLM)"
        )


def _slots_as_inputs(raw: Path) -> tuple:
    """The builder's FP32 graph with each LoRA weight a graph input defaulting to zeros; and the slots."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(raw / MODEL_FILE))
    shapes = {}
    for init in model.graph.initializer:
        shape = tuple(init.dims)
        if SLOT.match(init.name):
            shapes[init.name] = shape
            init.CopyFrom(numpy_helper.from_array(np.zeros(shape, np.float32), init.name))
            model.graph.input.append(helper.make_tensor_value_info(init.name, onnx.TensorProto.FLOAT, list(shape)))
    return model, shapes


def copy_side_files(raw: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for f in raw.iterdir():
        if not f.name.startswith(MODEL_FILE):
            shutil.copy2(f, out / f.name)


def build_base(base_dir: Path, build: BaseBuild, options: BaseBuildOptions) -> BaseBuild:
    """Make build's fp32/ and int8/ decoders and slots.json from the base folder, unless already made; atomic."""
    import onnx

    if build.done:
        return build
    if unknown := sorted(set(options.targets) - set(TARGETS)):
        raise BadCandidate(
            f"no LoRA slot can be made for {unknown}: the targets must be among the decoder's projections {', '.join(TARGETS)}"
        )
    build.dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=build.dir.parent, prefix=".base-build-") as work:
        work = Path(work)
        _zero_adapter(Path(base_dir), work / "zero_adapter", options)
        _run_builder(Path(base_dir), work / "zero_adapter", work / "raw", work / "hf_cache")
        model, shapes = _slots_as_inputs(work / "raw")
        slots = AdapterSlots.of(options.rank, options.targets, shapes)
        staged = work / "staged"
        copy_side_files(work / "raw", staged / "fp32")
        onnx.save(model, str(staged / "fp32" / MODEL_FILE), save_as_external_data=True, location=MODEL_FILE + ".data")
        copy_side_files(work / "raw", staged / "int8")
        quantize_variant(
            staged / "fp32" / MODEL_FILE, staged / "int8" / MODEL_FILE, replace(INT8, block_size=options.block_size), options.accuracy_level
        )
        slots.write(staged / "slots.json")
        (staged / "build.json").write_text(
            json.dumps(
                {"recipe": BASE_BUILD_RECIPE, "options": json.loads(options.key()), "int8_sha256": folder_hash(staged / "int8")}, indent=2
            )
        )
        shutil.rmtree(build.dir, ignore_errors=True)
        staged.rename(build.dir)
    return build


def make_variant(build: BaseBuild, variant: str) -> Path:
    """The build's decoder folder for variant, quantized from its FP32 twin with the build's own block size and
    accuracy_level unless already made; atomic, and recorded beside it (what was made, and the folder's hash)."""
    folder = build.weights(variant)
    if (folder / MODEL_FILE).is_file():
        return folder
    with folder_lock(build.dir, f".{folder.name}.lock"):
        if (folder / MODEL_FILE).is_file():
            return folder
        options = build.options()
        with tempfile.TemporaryDirectory(dir=build.dir, prefix=f".{folder.name}-") as work:
            staged = Path(work) / folder.name
            copy_side_files(build.fp32, staged)
            made = quantize_variant(
                build.fp32 / MODEL_FILE,
                staged / MODEL_FILE,
                replace(variant_named(variant), block_size=options["block_size"]),
                options["accuracy_level"],
            )
            write_json(build.dir / f"{folder.name}.json", made | {"sha256": folder_hash(staged)})
            staged.rename(folder)
    return folder
