"""llama.cpp for the benches that compare modelcd with it: its files (a base converted to GGUF and quantized, an adapter
as a GGUF LoRA), its teacher-forced logits, and its native server's command line. Built by `make llama-cpp` (llama-cpp-python
from its sdist, with the sdist's converters) and `make llama-server` (llama-server and llama-quantize from the sources the
sdist vendors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

LLAMA_VENV = Path(__file__).resolve().parent.parent / ".venv-llamacpp"
LLAMA_SRC = LLAMA_VENV / "sdist" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
LLAMA_BIN = LLAMA_VENV / "llama-server-build" / "bin"
SERVER, QUANTIZE = LLAMA_BIN / "llama-server", LLAMA_BIN / "llama-quantize"

# Run by .venv-llamacpp's python: every position's logits of each sequence, teacher-forced, with the LoRA.
_LOGITS = """
import json, sys
import numpy as np
from llama_cpp import Llama
model, lora, ids_file, out = sys.argv[1:5]
seqs = json.load(open(ids_file))
llm = Llama(model_path=model, lora_path=lora, logits_all=True, n_ctx=max(len(s) for s in seqs) + 8, n_threads=2,
            n_batch=512, verbose=False)
rows = []
for ids in seqs:
    llm.reset()
    llm.eval(ids)
    rows.append(np.array(llm.scores[: len(ids)], dtype=np.float32))
np.save(out, np.concatenate(rows))
"""


def require_llama_server() -> None:
    """SystemExit naming the make target when llama-cpp-python, its converters or llama-server are not built here."""
    if not (LLAMA_VENV / "bin" / "python").is_file() or not (LLAMA_SRC / "convert_lora_to_gguf.py").is_file():
        raise SystemExit(f"llama-cpp-python is not built in {LLAMA_VENV}: run 'make llama-cpp' (about 5 minutes)")
    for binary in (SERVER, QUANTIZE):
        if not binary.is_file():
            raise SystemExit(f"{binary} is missing: run 'make llama-server' (about 10 minutes on 2 cores)")


def run(cmd: list[str], what: str, env: dict | None = None) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"{what} failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")


def _gguf_env() -> dict:
    return dict(os.environ, PYTHONPATH=str(LLAMA_SRC / "gguf-py"))


def llama_cpp_lora(base_dir: Path, adapter_dir: Path, out: Path) -> tuple[Path, str]:
    """The adapter as a GGUF LoRA at out, by llama.cpp's own converter (from the llama-cpp-python sdist), and what it made."""
    cmd = [sys.executable, str(LLAMA_SRC / "convert_lora_to_gguf.py"), "--base", str(base_dir), "--outfile", str(out)]
    run(cmd + ["--outtype", "f32", str(adapter_dir)], f"convert_lora_to_gguf.py of {adapter_dir.name}", _gguf_env())
    return out, f"converted by llama.cpp's convert_lora_to_gguf.py ({out.stat().st_size / 1e6:.2f} MB, F32)"


def base_gguf(base_dir: Path, out: Path) -> Path:
    """The FP32 base as an F32 GGUF, by llama.cpp's convert_hf_to_gguf.py."""
    cmd = [sys.executable, str(LLAMA_SRC / "convert_hf_to_gguf.py"), str(base_dir), "--outfile", str(out), "--outtype", "f32"]
    run(cmd, "convert_hf_to_gguf.py", _gguf_env())
    return out


def quantized(f32: Path, kind: str, out: Path) -> Path:
    """f32 quantized by llama-quantize to kind (Q8_0, Q5_K_M, ...)."""
    run([str(QUANTIZE), str(f32), str(out), kind, "2"], f"llama-quantize {kind}")
    return out


def reply_logits(gguf: Path, lora: Path, sequences: list[tuple[list[int], int]], tmp: Path) -> list[np.ndarray]:
    """llama.cpp's logits at each sequence's reply positions (as Decoder.reply_logits gives them), teacher-forced on the
    ids with the LoRA applied: what the fidelity gate's measure scores."""
    script, ids, out = tmp / "llama_logits.py", tmp / "llama_ids.json", tmp / f"logits-{gguf.stem}.npy"
    script.write_text(_LOGITS)
    ids.write_text(json.dumps([s for s, _ in sequences]))
    run([str(LLAMA_VENV / "bin" / "python"), str(script), str(gguf), str(lora), str(ids), str(out)], f"llama.cpp logits of {gguf.name}")
    every = np.load(out, mmap_mode="r")
    served, at = [], 0
    for s, start in sequences:
        served.append(np.asarray(every[at + start - 1 : at + len(s) - 1], np.float32))
        at += len(s)
    return served


def server_command(gguf: Path, loras: list[Path], port: int, parallel: int, threads: int, ctx_per_slot: int = 1024) -> list[str]:
    """llama-server on loopback: continuous batching over parallel slots, every LoRA loaded at scale 0 (a request names its
    own in its "lora" field), threads for decoding and for prompts."""
    cmd = [str(SERVER), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-np", str(parallel), "-cb"]
    cmd += ["-c", str(ctx_per_slot * parallel), "-t", str(threads), "-tb", str(threads), "--no-webui", "--log-disable"]
    for lora in loras:
        cmd += ["--lora", str(lora)]
    return cmd + (["--lora-init-without-apply"] if loras else [])
