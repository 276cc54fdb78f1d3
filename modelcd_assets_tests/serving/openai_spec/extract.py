"""Writes schemas.json: the response schemas the OpenAI API tests validate against, cut from OpenAI's OpenAPI spec with
every schema they reference, and the spec's commit. The tests cannot reach the network, so the cut is kept in the repo.

    git clone https://github.com/openai/openai-openapi && python extract.py openai-openapi
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOTS = (
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "CreateCompletionResponse",
    "ListModelsResponse",
    "Model",
    "ErrorResponse",
)


def closure(schemas: dict, roots) -> dict:
    kept: dict = {}

    def walk(node) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[1]
                if name not in kept:
                    kept[name] = schemas[name]
                    walk(schemas[name])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for name in roots:
        kept[name] = schemas[name]
        walk(schemas[name])
    return dict(sorted(kept.items()))


def main(repo: str) -> None:
    spec = json.loads((Path(repo) / "openapi.json").read_text())
    commit = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    out = {
        "source": "https://github.com/openai/openai-openapi/blob/{commit}/openapi.json".format(commit=commit),
        "commit": commit,
        "openapi": spec["openapi"],
        "version": spec["info"]["version"],
        "components": {"schemas": closure(spec["components"]["schemas"], ROOTS)},
    }
    (Path(__file__).parent / "schemas.json").write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
