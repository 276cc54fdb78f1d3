"""Where the Kubernetes files live, and their contents parsed."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

K8S = Path(__file__).resolve().parents[2] / "k8s"
MANIFESTS = K8S / "manifests"
VALUES = K8S / "values.yaml"
VALUES_SCHEMA = K8S / "values.schema.json"
INSTANCE = K8S / "dagster-instance.yaml"
DOCKERFILE = K8S / "Dockerfile"
# The namespace the manifests, the RoleBinding's subject and the run launcher's jobNamespace all name.
NAMESPACE = "modelcd"
STATE_CLAIM = "modelcd-state"


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def manifest_documents() -> list[tuple[str, dict]]:
    """Every object in k8s/manifests/*.yaml, as (file:kind/name, object)."""
    docs = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((f"{path.name}:{doc.get('kind')}/{doc.get('metadata', {}).get('name')}", doc))
    return docs


def code_location_image() -> str:
    """The image of the code server, which the chart passes to it as DAGSTER_CURRENT_IMAGE and runs then use."""
    image = load_yaml(VALUES)["dagster-user-deployments"]["deployments"][0]["image"]
    return f"{image['repository']}:{image['tag']}"


def manifest(kind: str, name: str) -> dict:
    found = [doc for _, doc in manifest_documents() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name} in {MANIFESTS}, found {len(found)}"
    return found[0]


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) for each instruction, continuation lines joined and comments dropped."""
    instructions, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        instruction, _, args = (pending + stripped).partition(" ")
        instructions.append((instruction.upper(), args.strip()))
        pending = ""
    return instructions


def exec_form(args: str) -> list[str]:
    """The argv of a CMD or ENTRYPOINT: its JSON (exec) form, or the shell form as /bin/sh -c would run it."""
    try:
        argv = json.loads(args)
    except json.JSONDecodeError:
        return ["/bin/sh", "-c", args]
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv), f"not an exec-form argv: {args}"
    return argv


def dockerfile_env(text: str) -> dict[str, str]:
    """The ENV a Dockerfile sets (KEY=VALUE form)."""
    env = {}
    for instruction, args in dockerfile_instructions(text):
        if instruction == "ENV":
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                env[key] = value
    return env
