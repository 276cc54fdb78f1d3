"""Chaos testing of a causal LM's server (`modelcd serve --chaos`, POST /v1/admin/faults on the admin API): a version made
slow, failing, or unable to stop before max_tokens, on every request it answers, shadow copies included, as a live-only
regression would be; the fault sandbox's live classes roll such a version out and expect it stopped."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

INJECTED = "injected fault (chaos testing through /v1/admin/faults)"


class LmFaultRequest(BaseModel):
    """A version's fault; all zero (or false) clears it."""

    model_config = ConfigDict(extra="forbid")
    version: str = Field(pattern=r"^[0-9]+$")
    latency_ms: float = Field(0.0, ge=0, le=60_000, description="Waited before the first token of each answer.")
    error_ratio: float = Field(0.0, ge=0, le=1, description="The share of answers that fail (500, counted as the version's errors).")
    ignore_eos: bool = Field(False, description="EOS is never chosen before max_tokens: every answer runs to its limit.")

    @property
    def clears(self) -> bool:
        return not (self.latency_ms or self.error_ratio or self.ignore_eos)
