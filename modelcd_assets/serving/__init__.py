"""The serving process: each version's gated INT8 artifact on ONNX Runtime, swapped in and out while it serves."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modelcd_assets.serving.versions import ServedVersion

# Response headers naming what served a request; shared by the server and its clients.
HASH_HEADER = "X-Modelcd-Adapter-Sha256"  # the registered version's files
VERSION_HEADER = "X-Modelcd-Version"
ARTIFACT_HEADER = "X-Modelcd-Artifact-Sha256"  # the INT8 model that served it: the one quantized_model recorded and the gates judged
ARM_HEADER = "X-Modelcd-Arm"  # "canary" on an answer the candidate gave at a canary step
CALLER_HEADER = "X-Modelcd-Caller"  # who a request is from, for sticky canary buckets, where the API has no `user` field


def served_headers(served: ServedVersion) -> dict[str, str]:
    """The headers naming what served a request: its version, that version's registered files and the INT8 model."""
    return {HASH_HEADER: served.content_hash, VERSION_HEADER: served.version, ARTIFACT_HEADER: served.artifact_sha256}
