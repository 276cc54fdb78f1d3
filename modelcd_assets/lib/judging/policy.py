"""The per-model gate policy: a YAML file validated into typed thresholds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.rollout_policy import RolloutPolicy
from modelcd_assets.lib.judging.stats import median_ci_min_n
from modelcd_assets.lib.judging.trigger_policy import TriggerPolicy
from modelcd_assets.lib.operations.traffic_log import record_bytes_bound


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AccuracyPolicy(_Strict):
    tolerance_points: float = Field(
        0.3, ge=0, le=100, description="How far INT8 accuracy may fall below production's, in percentage points."
    )
    absolute_floor: float = Field(0.75, ge=0, le=1, description="Minimum INT8 accuracy on the evaluation split, as a fraction.")
    alpha: float = Field(0.05, gt=0, lt=0.5, description="One-sided significance level for 'candidate is worse than production'.")
    bootstrap_samples: int = Field(2000, ge=200, le=100_000, description="Paired bootstrap resamples for the confidence interval.")


class FidelityPolicy(_Strict):
    min_top1_agreement: float = Field(0.99, ge=0, le=1, description="INT8 vs FP32 top-1 agreement on the evaluation split.")


class PerplexityPolicy(_Strict):
    max_relative_increase: float = Field(
        0.01,
        ge=0,
        description="How far the candidate's perplexity on the evaluation replies may rise above production's, as a fraction (0.01: +1%).",
    )
    max_perplexity: float = Field(
        50.0, gt=1, description="Perplexity ceiling on the evaluation replies; the first candidate is judged on it alone."
    )
    alpha: float = Field(
        0.05,
        gt=0,
        lt=0.5,
        description=(
            "One-sided significance level of the paired sign test for 'the candidate is worse on more replies than it is better'. "
            "A significant result blocks when the median reply's perplexity also rose by more than max_relative_increase (its effect size)."
        ),
    )
    min_nll_difference: float = Field(
        1e-3,
        ge=0,
        description=(
            "A reply counts as worse or better only when its mean NLL moved by more than this, nats per token: numerical noise is a tie."
        ),
    )
    bootstrap_samples: int = Field(
        2000, ge=200, le=100_000, description="Paired bootstrap resamples of the replies for the CI on the perplexity change."
    )


class TokenFidelityPolicy(_Strict):
    min_top1_in_top5: float = Field(
        0.997, ge=0, le=1, description="Share of teacher-forced evaluation positions where INT8's top-1 token is among FP32's top 5."
    )
    max_mean_kl: float = Field(0.01, ge=0, description="Mean KL(FP32 || INT8) per position, nats.")
    max_perplexity_change: float = Field(
        0.01, ge=0, description="How far INT8's perplexity may rise above FP32's (same adapter, same replies), as a fraction."
    )


class AdapterSlotsPolicy(_Strict):
    rank: int = Field(8, ge=1, le=256, description="LoRA rank of the base build's adapter slots: every adapter of the base must have it.")
    targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "v_proj"],
        min_length=1,
        description="Modules the slots sit on: every adapter of the base must target exactly these.",
    )
    accuracy_level: int = Field(
        4,
        ge=0,
        le=4,
        description="MatMulNBits compute type of the INT8 base: 4 computes in INT8 (fast), 1 in FP32 (closer to FP32, slower).",
    )


class GenerationPolicy(_Strict):
    max_new_tokens: int = Field(
        64, ge=1, le=4096, description="Greedy generation on the golden and probe prompts must reach EOS within this many tokens."
    )
    evaluation_replies: int = Field(
        200, ge=10, le=100_000, description="Evaluation chats whose replies are scored (perplexity, INT8 fidelity)."
    )
    drift_prompts: int = Field(
        32, ge=4, le=10_000, description="Traffic prompts generated from by candidate and production for the output drift."
    )
    speed_prompts: int = Field(4, ge=1, le=256, description="Evaluation prompts each timed trial generates from.")
    speed_tokens: int = Field(16, ge=2, le=1024, description="Most tokens each timed generation makes.")
    concurrency: list[int] = Field(
        default_factory=lambda: [1, 4], min_length=1, description="Concurrent generations the speed is timed at; each is judged."
    )
    ttft_p99_slo_ms: float = Field(
        1000.0, gt=0, description="p99 time to first token of the timed generations, milliseconds (throughput gate)."
    )
    probe_prompts: int = Field(8, ge=1, le=512, description="Evaluation prompts generated from greedily, besides the golden prompts.")
    min_eos_share: float = Field(1.0, ge=0, le=1, description="Share of those generations that must stop at EOS.")
    ngram: int = Field(3, ge=1, le=16, description="n of the repeated n-gram share.")
    max_repeated_ngram_share: float = Field(
        0.5, ge=0, le=1, description="Most repeated n-grams any one generation may hold (a loop nears 1)."
    )


class CostPolicy(_Strict):
    node_usd_per_hour: float = Field(
        0.10, gt=0, description="What one serving node costs an hour, USD: cost per token = this / (tokens/s x 3600)."
    )
    tolerance: float = Field(
        0.15,
        ge=0,
        description=(
            "How far the candidate's cost per unit (a causal LM's: per answer) may rise above production's, as a fraction, judged at the"
            " fast end of the paired speed CI (0.15 matches throughput.min_ratio 0.88: 1/0.88 - 1 = 0.136)."
        ),
    )
    max_usd_per_1m_tokens: float = Field(5.0, gt=0, description="Ceiling on a causal LM's cost per 1M generated tokens, USD.")
    max_usd_per_1k_requests: float = Field(0.05, gt=0, description="Ceiling on a classifier's cost per 1,000 requests at batch 1, USD.")
    max_usd_per_1k_answers: float = Field(
        0.3,
        gt=0,
        description=(
            "Ceiling on a causal LM's cost per 1,000 answers, USD: its mean generated tokens per answer on the drift gate's traffic prompts"
            " x the base build's cost per token (0.3: 64-token answers at the 5 USD per 1M tokens ceiling cost 0.32)."
        ),
    )


class GoldenPrompt(_Strict):
    prompt: str = Field(min_length=1, description="The user's message, rendered in the model's chat template.")
    expect: str = Field(
        min_length=1, description="What the greedy completion must contain (or equal, with match: equals), compared case-insensitively."
    )
    match: str = Field("contains", pattern="^(contains|equals)$")


class QuantizationPolicy(_Strict):
    variant: str = Field(
        "auto",
        pattern="^(auto|[a-z0-9][a-z0-9-]*)$",
        description=(
            "Variant to deploy: auto picks the fastest that passes fidelity; pin one for reproducible numerics across versions. "
            "A classifier's are static and dynamic (INT8); a causal LM's are its base build's weight variants (int8, int4-rtn, "
            "int4-rtn-asym-mixed, int4-kquant-mixed, int4-hqq-mixed). Its task refuses a name that is not its own."
        ),
    )


class CalibrationPolicy(_Strict):
    min_examples: int = Field(200, ge=1, description="Fewest texts a new calibration set may hold.")
    max_examples: int = Field(100_000, ge=1, description="Most texts a new calibration set may hold, from a file or inline.")
    max_text_chars: int = Field(20_000, ge=1, description="Most characters (code points) in one text of a new calibration set.")
    max_median_length_ratio: float = Field(
        3.0,
        ge=1,
        description="How far a new calibration set's median token length may be from the evaluation split's, as a factor up or down.",
    )


class HealthPolicy(_Strict):
    max_weight_scale_ratio: float = Field(
        10.0, gt=1, description="How far any weight matrix's norm may move from production's, as a factor up or down."
    )


class DriftPolicy(_Strict):
    prediction_threshold: float = Field(
        0.1, gt=0, le=1, description="Jensen-Shannon distance between candidate and production predicted labels on the same traffic."
    )
    input_numeric_threshold: float = Field(
        0.1, gt=0, description="Normed Wasserstein distance per numeric input descriptor, traffic vs reference."
    )
    input_drift_share: float = Field(0.5, gt=0, le=1, description="The gate fails when at least this share of input descriptors drifted.")
    live_window: int = Field(
        1000,
        ge=1,
        description=(
            "Newest sampled texts of production's live traffic that live_traffic judges against the reference, by the same thresholds."
        ),
    )
    live_min_records: int = Field(
        200, ge=1, description="Fewer sampled texts than this in the window: not enough traffic to judge live drift, reported as such."
    )

    @model_validator(mode="after")
    def _window_fits(self) -> "DriftPolicy":
        if self.live_window < self.live_min_records:
            raise ValueError(
                f"live_window ({self.live_window}) must be at least live_min_records ({self.live_min_records}), or live drift could never"
                " be judged"
            )
        return self


class ThroughputPolicy(_Strict):
    min_ratio: float = Field(0.88, gt=0, description="Candidate throughput / production throughput, judged on the median of paired ratios.")
    p99_slo_ms: float = Field(100.0, gt=0, description="p99 latency SLO at batch 1, milliseconds.")
    pairs: int = Field(
        12,
        ge=2,
        le=200,
        description=(
            "Interleaved A/B trial pairs per batch size in the first round; at least what the median CI needs for `confidence` (6 at 0.95)."
        ),
    )
    max_pairs: int = Field(36, ge=2, le=1000, description="Pairs allowed in total before the verdict is 'inconclusive'.")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Two-sided confidence of the interval on the median ratio.")
    on_inconclusive: str = Field("block", pattern="^(block|pass)$", description="What an inconclusive throughput verdict does.")
    # A trained LoRA holds no subnormal value: an update of size ~learning rate lands within 1.2e-38 of zero with odds of
    # ~1e-34, and float16 or bfloat16 weights widen to normal float32 values. Any share above 0 is a choice to let some through.
    max_subnormal_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description=(
            "Causal LM: the share of an adapter's served float32 LoRA values that may be subnormal (below 1.18e-38, a slow path of CPU "
            "floating point on the base build's graph); NaN and Inf are never allowed."
        ),
    )

    @model_validator(mode="after")
    def _pairs_fit(self) -> "ThroughputPolicy":
        need = median_ci_min_n(self.confidence)
        if self.pairs < need:
            raise ValueError(
                f"pairs ({self.pairs}) is too few for a {100 * self.confidence:g}% CI on the median ratio: even (min, max) of "
                f"{self.pairs} pairs covers the median only {100 * (1 - 2 * 0.5**self.pairs):g}% of the time; use at least {need} pairs"
            )
        if self.max_pairs < self.pairs:
            raise ValueError(f"max_pairs ({self.max_pairs}) must be at least pairs ({self.pairs})")
        return self


class SafetyPolicy(_Strict):
    max_file_mb: float = Field(2048, gt=0, description="Largest single file a candidate may contain, MiB.")
    max_total_mb: float = Field(4096, gt=0, description="Largest candidate in all, MiB.")
    max_files: int = Field(200, ge=1, description="Most files a candidate may contain.")
    allow: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list,
        description=(
            "Glob patterns (fnmatch, on the path relative to the artifact folder; * crosses folders) of files exempt from the file-type"
            " allowlist. Pickles, code, links, and malformed safetensors or ONNX are refused whatever they match."
        ),
    )

    def limits(self):
        from modelcd_assets.lib.judging.safety import SafetyLimits

        return SafetyLimits(
            max_total_bytes=int(self.max_total_mb * 2**20),
            max_file_bytes=int(self.max_file_mb * 2**20),
            max_files=self.max_files,
            allow=tuple(self.allow),
        )


class ServingPolicy(_Strict):
    # The probe replays texts whose INT8 logits quantized_model recorded with the very artifact it judged: same bytes,
    # same runtime, same batches, so the served logits match to float rounding; a wrong artifact, head or tokenizer moves them by far more.
    probe_examples: int = Field(
        16,
        ge=4,
        le=2000,
        description="Evaluation texts every swap is probed on: served logits vs the gated INT8 logits recorded at gating.",
    )
    max_abs_logit_diff: float = Field(
        1e-4, gt=0, description="Largest |logit difference| allowed between the served model and the gated INT8 outputs on the probe set."
    )
    min_top1_agreement: float = Field(
        0.997, ge=0, le=1, description="Top-1 agreement served vs gated INT8 on the probe set; below it the swap is refused."
    )
    poll_seconds: float = Field(5.0, gt=0, le=3600, description="How often the server checks where the production alias points.")
    max_batch: int = Field(
        32,
        ge=1,
        le=256,
        description=(
            "A classifier: texts coalesced into one model call from concurrent requests for the same version. A causal LM: greedy "
            "generations of one base build decoded together at each step, whichever of its versions each is for (1 decodes each "
            "alone)."
        ),
    )
    max_wait_ms: float = Field(
        2.0,
        ge=0,
        le=1000,
        description=(
            "A classifier: how long the first request of a batch waits for others to join it, milliseconds. A causal LM's generations "
            "join a running batch between two steps, and never wait."
        ),
    )
    max_loaded_versions: int = Field(
        8, ge=1, le=1000, description="Versions kept loaded; beyond it the least recently used one that is not the default is unloaded."
    )
    sample_ratio: float = Field(
        0.1,
        ge=0,
        le=1,
        description=(
            "Share of successfully served requests whose texts go to the traffic log that live drift is judged on; 0 turns sampling off."
        ),
    )
    sample_max: int = Field(
        10_000, ge=10, description="Most sampled texts the traffic log keeps (newest first); older ones are rotated out."
    )
    sample_max_bytes: int = Field(
        64 * 2**20, ge=2**20, description="Most bytes the traffic log keeps on disk, both files together; older records are rotated out."
    )
    # Checked on the raw request, before any JSON model or tokenizer sees it: a 4 MiB text costs seconds of tokenization.
    max_body_bytes: int = Field(
        2**20,
        ge=1024,
        le=256 * 2**20,
        description="Largest classify request body, bytes; beyond it the request is refused with 413 unread.",
    )
    max_text_chars: int = Field(
        20_000, ge=1, le=10**6, description="Most characters (code points) in one text of a classify request; beyond it 422."
    )
    max_texts: int = Field(64, ge=1, le=4096, description="Most texts in one classify request; beyond it 422.")
    # A causal LM's server (the OpenAI API): every bound is checked before a token is generated.
    probe_prompts: int = Field(
        1,
        ge=1,
        le=64,
        description="Causal LM: probe prompts every load regenerates greedily, tokens and first logits against those recorded at gating.",
    )
    probe_tokens: int = Field(
        4,
        ge=1,
        le=16,
        description=(
            "Causal LM: greedy tokens each probe prompt regenerates on load, against the first ones recorded at gating "
            "(16 are recorded); each costs a decode step, after the prompt's prefill."
        ),
    )
    max_prompt_tokens: int = Field(
        4096, ge=1, description="Causal LM: most prompt tokens of one request (and never beyond the model's context); beyond it 400."
    )
    max_completion_tokens: int = Field(1024, ge=1, description="Causal LM: the largest max_tokens a request may ask for; beyond it 400.")
    default_max_tokens: int = Field(
        256, ge=1, description="Causal LM: max_tokens of a request that names none (cut to the context left after the prompt)."
    )
    max_kv_cache_mb: float = Field(
        512.0,
        gt=0,
        description="Causal LM: most KV cache one request may hold, (prompt + max_tokens) x bytes per token, MiB; beyond it 413.",
    )
    max_generations: int = Field(
        4, ge=1, le=1024, description="Causal LM: generations running at once; a request beyond them is answered 429 with Retry-After."
    )
    max_choices: int = Field(
        4,
        ge=1,
        le=128,
        description=(
            "Causal LM: most choices one request may ask for (n, times the prompts of a text completion), each a generation of its own "
            "among serving.max_generations; beyond it 400."
        ),
    )
    retry_after_s: int = Field(1, ge=1, le=3600, description="Causal LM: the Retry-After a 429 answer carries, seconds.")
    max_shadow_in_flight: int = Field(
        1,
        ge=1,
        le=1024,
        description=(
            "A rollout's shadow copies running at once; a copy beyond them is dropped and counted, never queued, so shadowing a saturated "
            "server costs production nothing more."
        ),
    )
    shadow_below_generations: int | None = Field(
        None,
        ge=1,
        le=1024,
        description=(
            "Causal LM: a shadow copy generates its next token only while fewer of the callers' generations than this run, and waits "
            "otherwise, so that on a saturated server it takes no core from them; unset: the cores this server may use."
        ),
    )
    shadow_max_wait_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="Causal LM: how long a shadow copy may wait for room in all; beyond it the copy is stopped, dropped and counted.",
    )

    @model_validator(mode="after")
    def _a_record_fits_the_log(self) -> "ServingPolicy":
        # Rotation is by halves, so each file must hold at least the largest record a request can bring.
        if self.sample_max_bytes // 2 <= record_bytes_bound(self.max_text_chars):
            raise ValueError(
                f"sample_max_bytes ({self.sample_max_bytes}) is too small for a text of max_text_chars ({self.max_text_chars}); "
                f"use at least {2 * record_bytes_bound(self.max_text_chars) + 2}"
            )
        return self


class SloPolicy(_Strict):
    p99_latency_ms: float = Field(250.0, gt=0, description="p99 request latency of the production version over the window, milliseconds.")
    p99_ttft_ms: float = Field(
        1000.0, gt=0, description="Causal LM: p99 time to first token of the production version over the window, milliseconds."
    )
    p99_tpot_ms: float = Field(
        100.0, gt=0, description="Causal LM: p99 of each generation's mean time per output token after the first, milliseconds."
    )
    max_error_ratio: float = Field(
        0.01, ge=0, le=1, description="Failed requests / all requests of the production version over the window."
    )
    max_nan_ratio: float = Field(0.0, ge=0, le=1, description="Requests whose outputs contained NaN / all requests over the window.")
    window: str = Field("5m", pattern=r"^[0-9]+[smh]$", description="PromQL range the rates are taken over, e.g. 5m.")
    min_samples: int = Field(100, ge=1, description="Fewer requests than this in the window make the evaluation inconclusive.")
    consecutive_failures: int = Field(3, ge=1, le=100, description="Failing evaluations in a row that trigger a rollback.")


class GoldenCase(_Strict):
    text: str = Field(min_length=1)
    label: str = Field(min_length=1)


class Policy(BaseModel):
    """Every section modelcd reads, and those the declared tasks add (lib/tasks/names.TaskDeclaration.policy_models), each validated
    by its task's model; any other section is refused by name."""

    model_config = ConfigDict(extra="allow", frozen=True)
    accuracy: AccuracyPolicy = AccuracyPolicy()
    int8_fidelity: FidelityPolicy = FidelityPolicy()
    health: HealthPolicy = HealthPolicy()
    quantization: QuantizationPolicy = QuantizationPolicy()
    calibration: CalibrationPolicy = CalibrationPolicy()
    safety: SafetyPolicy = SafetyPolicy()
    drift: DriftPolicy = DriftPolicy()
    throughput: ThroughputPolicy = ThroughputPolicy()
    serving: ServingPolicy = ServingPolicy()
    slo: SloPolicy = SloPolicy()
    golden: list[GoldenCase] = Field(default_factory=list, description="Inference tests: inputs with the label the candidate must predict.")
    perplexity: PerplexityPolicy = PerplexityPolicy()
    token_fidelity: TokenFidelityPolicy = TokenFidelityPolicy()
    generation: GenerationPolicy = GenerationPolicy()
    cost: CostPolicy = CostPolicy()
    golden_prompts: list[GoldenPrompt] = Field(
        default_factory=list, description="Causal LMs: prompts whose greedy completion must contain (or equal) the expected answer."
    )
    adapter_slots: AdapterSlotsPolicy = AdapterSlotsPolicy()
    triggers: list[TriggerPolicy] = Field(
        default_factory=list,
        description="Feedback triggers: a live metric held past a threshold for a while, and the action it calls for (trigger_sensor).",
    )
    rollout: RolloutPolicy | None = Field(
        None, description="The steps on live traffic a version takes before it is production; unset: it is promoted when its gates pass."
    )

    @property
    def feedback_triggers(self) -> list[TriggerPolicy]:
        """What trigger_sensor evaluates: the slo: section's rollback (TriggerPolicy.of_slo) first, then triggers: in order."""
        return [TriggerPolicy.of_slo(self.slo.consecutive_failures), *self.triggers]

    @model_validator(mode="after")
    def _task_sections(self) -> "Policy":
        added = task_policy_models()
        for name, value in (self.model_extra or {}).items():
            if name not in added:
                known = ", ".join([*type(self).model_fields, *added])
                raise ValueError(f"unknown section {name!r}; the policy's sections are {known}")
            self.model_extra[name] = added[name].model_validate(value if not isinstance(value, BaseModel) else value.model_dump())
        return self

    def section(self, name: str) -> BaseModel:
        """A section a task added (TaskDeclaration.policy_models), validated; its defaults when the file does not set it."""
        added = task_policy_models()
        if name not in added:
            raise ModelcdError(f"no declared task adds a policy section {name!r}; the tasks add {', '.join(added) or 'none'}")
        return (self.model_extra or {}).get(name) or added[name]()

    @model_validator(mode="after")
    def _traffic_log_fits_window(self) -> "Policy":
        # Rotation is by halves: right after one, the log holds only sample_max // 2 texts.
        kept = self.serving.sample_max // 2
        if self.serving.sample_ratio > 0 and kept < self.drift.live_min_records:
            raise ValueError(
                f"serving.sample_max ({self.serving.sample_max}) keeps as few as {kept} sampled texts, fewer than drift.live_min_records"
                f" ({self.drift.live_min_records}), so live drift could never be judged; set sample_max to at least"
                f" {2 * self.drift.live_min_records}"
            )
        return self


def task_policy_models() -> dict[str, type[BaseModel]]:
    """The policy sections the declared tasks add, by name: their pydantic models."""
    from modelcd_assets.lib.tasks.names import declarations, load_declared

    return {
        name: load_declared(spec, f"task {d.name!r}'s policy section {name!r}") for d in declarations() for name, spec in d.policy_models
    }


def policy_path(policy_dir: Path, model_name: str) -> Path:
    """Where a registered model's policy file lives, whether or not it exists: <policy_dir>/<model name>.yaml."""
    return Path(policy_dir) / f"{model_name}.yaml"


def policy_file(policy_dir: Path, model_name: str) -> Path | None:
    """The model's policy file when it exists; None means the defaults."""
    path = policy_path(policy_dir, model_name)
    return path if path.is_file() else None


def load_policy(path: Path | None) -> Policy:
    """Read and validate a policy file; a missing path means the defaults."""
    if path is None:
        return Policy()
    path = Path(path)
    if not path.is_file():
        raise ModelcdError(f"policy file {path} does not exist; create it or remove the reference to use the defaults")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ModelcdError(f"policy file {path} is not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ModelcdError(
            f"policy file {path} must hold a mapping of sections (accuracy, int8_fidelity, quantization, calibration, drift, throughput,"
            " safety, serving, slo, golden; for causal LMs perplexity, token_fidelity, generation, cost, golden_prompts)"
        )
    try:
        return Policy.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join((f"{'.'.join(str(x) for x in err['loc'])}: " if err["loc"] else "") + err["msg"] for err in e.errors())
        raise ModelcdError(f"policy file {path} is invalid: {problems}") from e


def policy_for(policy_dir: Path, model_name: str) -> Policy:
    """The validated policy of one registered model: <policy_dir>/<model name>.yaml, or the defaults when there is none."""
    return load_policy(policy_file(policy_dir, model_name))
