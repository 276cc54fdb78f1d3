"""The Open Inference Protocol's shapes (KServe V2, as Triton and Seldon MLServer speak it) for a classifier: the
metadata of the server and of a model, an inference request read within the serving limits, with its tensors as JSON or
in the binary tensor data extension, and its answer in either form.

A classifier takes one input, `text` (BYTES, shape [N] or [N, 1]), and answers `logits` (FP32, [N, labels]) and
`label` (BYTES, [N]). A parameter the protocol defines and this server does not honour is refused by name."""

from __future__ import annotations

import json
import struct

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from modelcd_assets.lib.judging.policy import ServingPolicy
from modelcd_assets.serving.rejections import BAD_REQUEST, Rejected, check_text_count, check_texts, check_unicode

INPUT, LOGITS, LABEL = "text", "logits", "label"
HEADER_LENGTH = "Inference-Header-Content-Length"  # the binary tensor data extension: bytes of JSON before the tensors
EXTENSIONS = ["binary_tensor_data"]


def bad(message: str) -> Rejected:
    return Rejected(400, BAD_REQUEST, message)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RequestInput(_Strict):
    name: str
    shape: list[int]
    datatype: str
    parameters: dict | None = None
    data: list | None = None


class RequestOutput(_Strict):
    name: str
    parameters: dict | None = None


class InferRequest(_Strict):
    id: str | None = None
    parameters: dict | None = None
    inputs: list[RequestInput] = Field(min_length=1)
    outputs: list[RequestOutput] | None = None


def _refuse_parameters(parameters: dict | None, allowed: set[str], where: str) -> dict:
    parameters = parameters or {}
    for name in parameters:
        if name not in allowed:
            served = ", ".join(sorted(allowed)) or "none"
            raise bad(f"{where} parameter {name!r} is not served here (served: {served})")
    return parameters


def split_body(raw: bytes, header_length: str | None) -> tuple[dict, bytes]:
    """The JSON part of a request and the binary tensors after it (the binary tensor data extension)."""
    if header_length is None:
        head, rest = raw, b""
    else:
        if not (header_length.isascii() and header_length.isdigit()) or int(header_length) > len(raw):
            raise bad(f"{HEADER_LENGTH} {header_length!r} is not a length within the body's {len(raw)} bytes")
        head, rest = raw[: int(header_length)], raw[int(header_length) :]
    try:
        return json.loads(head), rest
    except (ValueError, RecursionError) as e:
        raise bad(f"the inference request is not JSON: {e}") from None


def decode_bytes_tensor(blob: bytes, count: int) -> list[bytes]:
    """BYTES elements in the binary form: each a 4-byte little-endian length, then its bytes."""
    out, at = [], 0
    for _ in range(count):
        if at + 4 > len(blob):
            raise bad(f"the binary {INPUT!r} tensor ends after {len(out)} of {count} elements")
        (n,) = struct.unpack_from("<I", blob, at)
        if at + 4 + n > len(blob):
            raise bad(f"element {len(out)} of the binary {INPUT!r} tensor runs past its end")
        out.append(blob[at + 4 : at + 4 + n])
        at += 4 + n
    if at != len(blob):
        raise bad(f"the binary {INPUT!r} tensor holds {len(blob) - at} bytes beyond its {count} elements")
    return out


def encode_bytes_tensor(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(b)) + b for b in items)


class Inference:
    """A read inference request: its texts, the outputs asked for (in order) and which of them go back in binary."""

    def __init__(self, id: str | None, texts: list[str], outputs: list[str], binary: set[str]):
        self.id, self.texts, self.outputs, self.binary = id, texts, outputs, binary


def read_inference(raw: bytes, header_length: str | None, policy: ServingPolicy) -> Inference:
    """The request's texts and outputs, or Rejected (400; 413 and the classify API's limits on texts, answered as 400)."""
    body, binary = split_body(raw, header_length)
    try:
        req = InferRequest.model_validate(body)
    except ValidationError as e:
        err = e.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(x) for x in err["loc"]) or "body"
        raise bad(f"not an inference request: {where}: {err['msg']}") from None
    asked = _refuse_parameters(req.parameters, {"binary_data_output"}, "request")
    if len(req.inputs) != 1 or req.inputs[0].name != INPUT:
        raise bad(f"a classifier takes one input, {INPUT!r}; got {[i.name for i in req.inputs]}")
    tensor = req.inputs[0]
    if tensor.datatype != "BYTES":
        raise bad(f"input {INPUT!r} is BYTES (UTF-8 texts); got {tensor.datatype}")
    if not (len(tensor.shape) == 1 or (len(tensor.shape) == 2 and tensor.shape[1] == 1)) or tensor.shape[0] < 1:
        raise bad(f"input {INPUT!r} has shape [N] or [N, 1] with N at least 1; got {tensor.shape}")
    count = tensor.shape[0]
    check_text_count(count, policy)
    size = _refuse_parameters(tensor.parameters, {"binary_data_size"}, f"input {INPUT!r}").get("binary_data_size")
    if size is not None:
        if tensor.data is not None:
            raise bad(f"input {INPUT!r} has both data and binary_data_size")
        if size != len(binary):
            raise bad(f"input {INPUT!r} declares {size} binary bytes; the body holds {len(binary)} after its JSON")
        items = decode_bytes_tensor(binary, count)
    else:
        if binary:
            raise bad(f"{len(binary)} bytes follow the JSON, and no input declares binary_data_size")
        data = tensor.data
        if data is None:
            raise bad(f"input {INPUT!r} has neither data nor binary_data_size")
        while data and isinstance(data[0], list):  # the JSON form may nest by shape
            data = [x for row in data for x in row]
        if len(data) != count or not all(isinstance(x, str) for x in data):
            raise bad(f"input {INPUT!r} of shape {tensor.shape} takes {count} strings; got {len(data)} elements")
        items = [x.encode() for x in data]
    texts = []
    for i, item in enumerate(items):
        try:
            texts.append(item.decode("utf-8"))
        except UnicodeDecodeError:
            raise bad(f"element {i} of input {INPUT!r} is not UTF-8") from None
    check_texts({"texts": texts}, policy)
    check_unicode(texts)
    wanted = [o.name for o in req.outputs] if req.outputs else [LOGITS, LABEL]
    binary_out = set(wanted) if asked.get("binary_data_output") else set()
    for o in req.outputs or []:
        if o.name not in (LOGITS, LABEL):
            raise bad(f"a classifier answers outputs {LOGITS!r} and {LABEL!r}; {o.name!r} is not one")
        if _refuse_parameters(o.parameters, {"binary_data"}, f"output {o.name!r}").get("binary_data"):
            binary_out.add(o.name)
    return Inference(req.id, texts, wanted, binary_out)


def infer_response(model: str, version: str, inference: Inference, logits: np.ndarray, labels: list[str]) -> tuple[bytes, dict]:
    """The answer's body and headers: JSON, with the outputs asked for in binary after it (and its length in the header)."""
    tensors = {
        LOGITS: ("FP32", list(logits.shape), logits.astype("<f4")),
        LABEL: ("BYTES", [len(labels)], labels),
    }
    outputs, blobs = [], []
    for name in inference.outputs:
        datatype, shape, value = tensors[name]
        out = {"name": name, "datatype": datatype, "shape": shape}
        if name in inference.binary:
            blob = value.tobytes() if datatype == "FP32" else encode_bytes_tensor([s.encode() for s in value])
            out["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            out["data"] = [float(x) for x in value.reshape(-1)] if datatype == "FP32" else list(value)
        outputs.append(out)
    head = {"model_name": model, "model_version": version, "outputs": outputs} | ({"id": inference.id} if inference.id else {})
    raw = json.dumps(head).encode()
    if not blobs:
        return raw, {"content-type": "application/json"}
    return raw + b"".join(blobs), {"content-type": "application/octet-stream", HEADER_LENGTH: str(len(raw))}


def model_metadata(model: str, versions: list[str], labels: list[str]) -> dict:
    return {
        "name": model,
        "versions": versions,
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": INPUT, "datatype": "BYTES", "shape": [-1]}],
        "outputs": [
            {"name": LOGITS, "datatype": "FP32", "shape": [-1, len(labels)], "parameters": {"labels": labels}},
            {"name": LABEL, "datatype": "BYTES", "shape": [-1], "parameters": {"labels": labels}},
        ],
    }
