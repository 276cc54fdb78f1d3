"""A causal LM's loaded versions: one INT8 base session per base build, each version an adapter file loaded into it.

A version gets in as every version does (serving/versions.py: a valid verdict over its registered files, the INT8 base
build and its adapter file, which is read once, hashed, and loaded from a private copy of exactly those bytes), then
its probe prompts (serving.probe_prompts) are regenerated greedily for serving.probe_tokens tokens: they must equal
the first ones recorded at gating, and the logits the first token was chosen from must be within
serving.max_abs_logit_diff of the recorded ones. A generation holds its version from start to end:
a version evicted or unloaded meanwhile leaves the base session when its last generation finishes.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from modelcd_assets.lib.causal_lm.batched import Adapter, BatchedSession, probe_in_batch
from modelcd_assets.lib.causal_lm.chats import Chat
from modelcd_assets.lib.causal_lm.decoder import PROBE_LOGITS_OF, Decoder
from modelcd_assets.lib.causal_lm.turns import Turns
from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.hashing import bytes_sha256, folder_hash
from modelcd_assets.lib.release import attestation, servable
from modelcd_assets.lib.release.candidate import CandidateRecord
from modelcd_assets.lib.release.registry import CandidateRef
from modelcd_assets.lib.tasks.names import CAUSAL_LM
from modelcd_assets.serving.consistency import Consistency, SwapRefused
from modelcd_assets.serving.versions import Steps, VersionPool, scan


@dataclass(eq=False)
class Base:
    """One base build's weights opened once: its decoder (ONNX Runtime GenAI), the session its batches decode greedy
    generations in (lib/causal_lm/batched.py; None where serving.max_batch is 1), and the hash of the folder both were
    opened from."""

    folder: Path
    decoder: Decoder
    sha256: str
    batched: BatchedSession | None = None

    @classmethod
    def open(cls, folder: Path, sha256: str, threads: int | None, batched: bool) -> Base:
        """The sessions on folder's weights. With a batched session, the two take turns (lib/causal_lm/turns.py): they
        run on the same cores, so a version's load probe or a sampled generation runs between the batch's passes instead
        of beside them."""
        if not batched:
            return cls(folder, Decoder(folder, threads=threads), sha256)
        turns = Turns()
        return cls(folder, Decoder(folder, threads=threads, turns=turns), sha256, BatchedSession(folder, threads=threads, turns=turns))


@dataclass(eq=False)
class LmServed:
    """What one generation is served by: a registry version, as an adapter loaded into its base's session."""

    model: str
    version: str
    content_hash: str  # the registered adapter's files
    artifact_sha256: str  # the INT8 base build the gates judged
    adapter_sha256: str  # the adapter file the gates judged, loaded from these very bytes
    variant: str
    base: Base
    adapter: str  # its name in the base's decoder
    adapter_file: Path  # the private copy it was loaded from
    lora: Adapter | None = None  # its weights as the batched session's inputs, read from the same private copy
    _holders: int = 0
    _retired: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def adapter_label(self) -> str:
        return self.content_hash[:12]

    @property
    def decoder(self) -> Decoder:
        return self.base.decoder

    @contextlib.contextmanager
    def held(self) -> Iterator[LmServed]:
        """For one generation, start to end: the adapter stays loaded while any generation holds it."""
        with self._lock:
            self._holders += 1
        try:
            yield self
        finally:
            with self._lock:
                self._holders -= 1
                done = self._retired and not self._holders
            if done:
                self._unload()

    def retire(self) -> None:
        """No longer loaded in the pool: the adapter leaves the session now, or when its last generation ends."""
        with self._lock:
            self._retired = True
            done = not self._holders
        if done:
            self._unload()

    def _unload(self) -> None:
        self.base.decoder.unload_adapter(self.adapter)
        self.adapter_file.unlink(missing_ok=True)


class LmPool(VersionPool):
    """Loaded versions of one registered causal LM, on a session per base build."""

    task = CAUSAL_LM

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._bases: dict[Path, Base] = {}
        self._names = itertools.count(1)
        self._private = Path(tempfile.mkdtemp(prefix="modelcd-adapters-"))  # 0700: the loaded copies are this process's own

    def _base(self, folder: Path) -> Base:
        folder = folder.resolve()
        base = self._bases.get(folder)
        if base is None:
            sha = folder_hash(folder)  # once per process: every version on this base is checked against it
            try:
                base = self._bases[folder] = Base.open(folder, sha, self.threads, batched=self.policy.max_batch > 1)
            except ModelcdError as e:
                raise SwapRefused(f"the base build's weights at {folder} cannot be opened: {e}") from e
        return base

    def _open(self, ref: CandidateRef, record: CandidateRecord, gated: dict, step: Steps) -> tuple[LmServed, Consistency]:
        what, rerun = ref.uri, f"run 'modelcd gate {ref.name} {ref.version}'"
        probe = gated.get("probe") or {}
        if "logits" not in probe:
            raise SwapRefused(f"{what} was gated by an older modelcd that recorded no probe logits for the server to reproduce; {rerun}")
        if probe.get("logits_of") != PROBE_LOGITS_OF:
            raise SwapRefused(
                f"{what} was gated by an older modelcd whose probe logits are the second token's, not those its first token was "
                f"chosen from; {rerun}"
            )
        served = servable.served_files(record)
        folder = served.int8
        if not folder.is_dir():
            raise SwapRefused(f"{what}: the INT8 base build its gates judged is missing ({folder}); {rerun}")
        base = self._base(folder)
        adapter_path = served.paths[attestation.ADAPTER_FILE]
        try:
            data = adapter_path.read_bytes()
        except OSError as e:
            raise SwapRefused(f"{what}: the adapter file its gates judged cannot be read ({e}); {rerun}") from e
        checked = self._check(ref, base.sha256)
        adapter_sha = bytes_sha256(data)
        if adapter_sha != checked.verdict.subjects[attestation.ADAPTER_FILE]:
            raise SwapRefused(
                f"{what}: the adapter file changed while it was being checked (sha256 {adapter_sha[:12]}, attested "
                f"{checked.verdict.subjects[attestation.ADAPTER_FILE][:12]}); not loaded"
            )
        step("verdict verified over the registered files, INT8 base build, adapter file and tokenizer")
        scan(Path(record.artifact_dir), what, self.limits)
        step("registered files scanned")
        name = f"v{ref.version}-{next(self._names)}"
        private = self._private / f"{name}.onnx_adapter"
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            base.decoder.load_adapter(private, name)
        except Exception as e:
            private.unlink(missing_ok=True)
            raise SwapRefused(f"{what}: ONNX Runtime GenAI refused its adapter file: {e}") from e
        try:
            lora = base.batched.adapter(private) if base.batched else None
        except Exception as e:
            base.decoder.unload_adapter(name)
            private.unlink(missing_ok=True)
            raise SwapRefused(f"{what}: the batched session refused its adapter file: {e}") from e
        attested = checked.verdict.subjects
        served = LmServed(
            self.model,
            ref.version,
            attested[attestation.REGISTERED_FILES],
            attested[attestation.INT8_MODEL],
            adapter_sha,
            gated["chosen"],
            base,
            name,
            private,
            lora,
        )
        step("adapter loaded")
        try:
            consistency = self._probe(served, record, probe, what)
        except BaseException:
            served.retire()
            raise
        step("probed against the gated generations")
        return served, consistency

    def _probe(self, served: LmServed, record: CandidateRecord, probe: dict, what: str) -> Consistency:
        path = record.build.dir / probe["logits"]
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise SwapRefused(f"{what}: the probe logits recorded at gating cannot be read ({e})") from e
        if bytes_sha256(raw) != probe.get("logits_sha256"):
            raise SwapRefused(f"{what}: the probe logits recorded at gating ({path}) are not the file its gating wrote; re-gate it")
        recorded = np.load(io.BytesIO(raw))
        n = min(self.policy.probe_prompts, len(probe["prompts"]))
        k = min(
            self.policy.probe_tokens, int(probe["max_new_tokens"])
        )  # greedy search is deterministic: k tokens are the recorded ones' first k
        decoder, worst, same = served.decoder, 0.0, 0
        prompts = [decoder.encode_chat(Chat(probe["system"], probe["prompts"][i], "").messages()) for i in range(n)]
        for i, ids in enumerate(prompts):
            run = decoder.generate(ids, k, served.adapter)
            if run.first_logits is None or not run.finite:
                raise SwapRefused(f"{what}: probe prompt {i} produced non-finite logits; the version was not switched in")
            worst = max(worst, float(np.max(np.abs(run.first_logits - recorded[i]))))
            same += run.tokens == list(probe["tokens"][i])[:k]
        if served.lora is not None:
            # And as the batches serve greedy generations: every probe prompt in one batch, beside a row on other LoRA
            # weights (the base build's own slots), as other versions' rows share the batch when it serves.
            runs = probe_in_batch(served.base.batched, prompts, k, served.lora, decoder.eos_ids)
            for i, (tokens, first) in enumerate(runs):
                if not np.isfinite(first).all():
                    raise SwapRefused(f"{what}: probe prompt {i} produced non-finite logits in a batch; the version was not switched in")
                worst = max(worst, float(np.max(np.abs(first - recorded[i]))))
                same += tokens == list(probe["tokens"][i])[:k]
        sequences = n * (2 if served.lora is not None else 1)
        result = Consistency(n, worst, same / sequences if n else 0.0)
        if same < sequences or worst > self.policy.max_abs_logit_diff:
            raise SwapRefused(
                f"{what}: served and gated generations disagree on {n} probe prompts ({same} of {sequences} greedy sequences of {k} "
                f"tokens equal, alone{' and in one batch with other LoRA weights' if served.lora is not None else ''}; "
                f"max |Δlogit| of the first token {worst:.2e}, limit {self.policy.max_abs_logit_diff:.0e}); the version was not switched in"
            )
        return result

    def _forget(self, served: LmServed) -> None:
        served.retire()
