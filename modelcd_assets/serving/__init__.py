"""The serving process: each version's gated INT8 artifact on ONNX Runtime, swapped in and out while it serves."""

# Response headers naming what served a request; shared by the server and its clients.
HASH_HEADER = "X-Modelcd-Adapter-Sha256"  # the registered version's files
VERSION_HEADER = "X-Modelcd-Version"
ARTIFACT_HEADER = "X-Modelcd-Artifact-Sha256"  # the INT8 model that served it: the one quantized_model recorded and the gates judged
