"""The hand-written baseline of bench/bench_serving.py: the server a user writes without modelcd; not part of modelcd.

    python bench/baseline_server.py --base BASE_DIR --adapter ADAPTER_DIR --port PORT [--host 127.0.0.1]

It serves the same model as modelcd: the base loaded with the project's own loader, the LoRA adapter applied with
peft and merged, PyTorch eager FP32, the transformers tokenizer cut at 128 tokens and padded to the longest text of
each request, and the same HTTP shape (POST /v1/classify, GET /readyz). Inference runs through run_in_executor on a
pool with one worker per core. Torch keeps its default intra-op thread count (one per core), as a user would leave
it, so when the pool is busy the workers' torch threads oversubscribe the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel, Field

from modelcd_assets.lib.classifier.config import labels_of
from modelcd_assets.lib.classifier.model_io import load_classifier, load_tokenizer

MAX_TEXTS = 64
MAX_LENGTH = 128  # modelcd cuts inputs at lib/inference/tokens.MAX_LENGTH; the baseline writes its own tokenizer call


class ClassifyRequest(BaseModel):
    texts: list[str] = Field(min_length=1, max_length=MAX_TEXTS)


def load_merged(base_dir: Path, adapter_dir: Path) -> torch.nn.Module:
    """The base classifier with the LoRA adapter folded in, in eval mode."""
    from peft import PeftModel

    torch.manual_seed(0)  # as merge_adapter: the head is replaced by the adapter's saved copy; seed what it overwrites
    merged = PeftModel.from_pretrained(load_classifier(base_dir), str(adapter_dir), is_trainable=False).merge_and_unload()
    return merged.eval()


def create_app(base_dir: Path, adapter_dir: Path) -> FastAPI:
    """The baseline app, with its model loaded before it answers anything."""
    model = load_merged(base_dir, adapter_dir)
    tokenizer, labels = load_tokenizer(base_dir), labels_of(base_dir)
    tokenizer_lock = threading.Lock()  # a fast tokenizer raises "Already borrowed" when two threads call it at once
    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="inference")

    def logits(texts: list[str]) -> list[list[float]]:
        with tokenizer_lock:
            enc = tokenizer(texts, truncation=True, max_length=MAX_LENGTH, padding="longest", return_tensors="pt")
        with torch.inference_mode():
            return model(**enc).logits.float().tolist()

    app = FastAPI(title="hand-written baseline")

    @app.get("/readyz")
    async def readyz():
        return {"status": "ready"}

    @app.post("/v1/classify")
    async def classify(body: ClassifyRequest):
        rows = await asyncio.get_running_loop().run_in_executor(pool, logits, body.texts)
        return {"labels": labels, "predictions": [{"label": labels[r.index(max(r))], "logits": r} for r in rows]}

    return app


def main() -> None:
    p = argparse.ArgumentParser(description="Hand-written baseline classifier server (bench only, not part of modelcd).")
    p.add_argument("--base", required=True, type=Path, help="Hugging Face sequence-classification model folder")
    p.add_argument("--adapter", required=True, type=Path, help="peft LoRA adapter folder")
    p.add_argument("--port", required=True, type=int)
    p.add_argument("--host", default="127.0.0.1")
    args = p.parse_args()
    uvicorn.run(create_app(args.base, args.adapter), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
