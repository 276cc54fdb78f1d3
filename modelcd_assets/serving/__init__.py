"""The serving process: one base model in memory, LoRA adapters swapped in and out while it serves."""

# Response headers naming what served a request; shared by the server and its clients.
HASH_HEADER = "X-Modelcd-Adapter-Sha256"
VERSION_HEADER = "X-Modelcd-Version"
