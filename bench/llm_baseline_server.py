"""What a user writes by hand to serve a LoRA adapter of a causal LM: FastAPI, transformers + peft (the adapter
unmerged), FP32, `generate()` with its KV cache, streamed through TextIteratorStreamer as OpenAI-style SSE chunks.

    python bench/llm_baseline_server.py BASE_DIR ADAPTER_DIR PORT
"""

from __future__ import annotations

import json
import os
import sys
import threading

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, TextIteratorStreamer


def build(base_dir: str, adapter_dir: str) -> FastAPI:
    torch.set_num_threads(os.cpu_count() or 1)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32), adapter_dir).eval()
    app = FastAPI()

    @app.get("/readyz")
    def readyz():
        return {"status": "ready"}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        ids = tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, return_tensors="pt", return_dict=True)
        streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        out = {}

        def run():
            with torch.no_grad():
                out["ids"] = model.generate(
                    **ids,
                    max_new_tokens=int(body.get("max_tokens", 64)),
                    do_sample=False,
                    streamer=streamer,
                    pad_token_id=tokenizer.eos_token_id,
                )

        thread = threading.Thread(target=run)
        thread.start()

        def events():
            for text in streamer:
                if text:
                    yield f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': text}}]})}\n\n"
            thread.join()
            made = int(out["ids"].shape[1] - ids["input_ids"].shape[1])
            last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"completion_tokens": made}}
            yield f"data: {json.dumps(last)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


if __name__ == "__main__":
    uvicorn.run(build(sys.argv[1], sys.argv[2]), host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")
