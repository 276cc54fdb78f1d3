"""The two tasks modelcd ships, declared as any other task is (lib/tasks/names.declare_task): a classifier and a causal LM.

lib/tasks/names imports this module by name when the tasks are first asked for, as it imports a plugin's."""

from modelcd_assets.lib.tasks.adapter_files import CLASSIFIER_ADAPTER_FILES, LM_ADAPTER_FILES
from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION, Gate, LiveMetric, TaskDeclaration, declare_task

# The gates both built-in tasks have, each judged by its own measure.
_FIDELITY = (
    "The served quantized weights agree with FP32 by the task's measure (a classifier: its INT8 variant's top-1 agreement; a causal"
    " LM: the chosen weight variant's tokens, KL and perplexity)."
)
_GOLDEN = "Every golden case declared in the policy gives its expected answer (a label; a causal LM's greedy completion)."
_SPEED = (
    "A classifier: the paired ratio at batch 1 and 32 and the p99 SLO. A causal LM: the served graph is the base build's by hash, the "
    "adapter's values hold nothing that slows a CPU on it, and the build's own timing meets the TTFT SLO."
)
_COST = "What a unit of work costs (a request, an answer), under the policy's ceilings and against production's."
# What every task's rollout judges on live traffic: the server's per-version request, error and NaN counters.
_ERRORS = LiveMetric(
    "error_rate",
    "rate",
    ("modelcd_request_errors_total", "modelcd_requests_total"),
    "Requests that failed on the server's side, of those the version answered.",
    critical=True,
)
# What a request cost: its share of the node's time while in flight, priced at cost.node_usd_per_hour (serving/node_share.py).
# Judged at canary steps only: a shadow copy runs in the server's spare capacity after production's answer, so its share
# of the node is not what answering the request would cost. Its floors are tokens per answer's: a cost moves with load.
_COST_DEFAULTS = (("max_mean_ratio", 1.25), ("max_tail_ratio", 1.5))
_LIVE_COST = LiveMetric(
    "cost_per_request_usd",
    "shift",
    ("modelcd_request_cost_usd",),
    "Per request: its share of the node's time while in flight (the time divided among the requests in flight), in USD.",
    arms=("canary",),
    defaults=_COST_DEFAULTS,
)
_NAN = LiveMetric(
    "nan_rate",
    "rate",
    ("modelcd_nan_outputs_total", "modelcd_requests_total"),
    "Requests whose outputs held NaN or Inf, of those the version answered.",
    critical=True,
)

declare_task(
    TaskDeclaration(
        CLASSIFICATION,
        "modelcd_assets.lib.tasks.classification:ClassificationTask",
        peft_task_types=("SEQ_CLS",),
        adapter_files=CLASSIFIER_ADAPTER_FILES,
        gates=(
            Gate("int8_agrees_with_fp32", "quantized_model", "fidelity_verdict", _FIDELITY, "int8_fidelity", ("int8_fidelity",)),
            Gate(
                "accuracy_within_tolerance",
                "evaluation",
                "quality_verdict",
                "INT8 accuracy >= production's - tolerance, not significantly worse, and above the floor.",
                "quality",
                ("accuracy",),
            ),
            Gate("golden_cases_pass", "evaluation", "golden_verdict", _GOLDEN, None, ("golden",)),
            Gate("throughput_within_tolerance", "benchmark_results", "throughput_verdict", _SPEED, "speed", ("throughput",)),
            Gate("cost_within_budget", "benchmark_results", "cost_verdict", _COST, "cost", ("cost",)),
        ),
        policy_sections=("quantization", "calibration"),
        contract="modelcd_assets.lib.classifier.contract:diff_classifier_contracts",
        served="modelcd_assets.lib.classifier.served:classifier_served",
        subjects=("registered-files", "int8-model", "tokenizer", "calibration-set"),
        slo_latency=(("p99_latency_ms", "modelcd_request_duration_seconds"),),
        live_metrics=(
            LiveMetric(
                "latency_ms", "shift", ("modelcd_request_duration_seconds",), "Time to answer a classify request, ms.", scale=1000.0
            ),
            _LIVE_COST,
            _ERRORS,
            _NAN,
            LiveMetric(
                "label_agreement",
                "agreement",
                ("modelcd_shadow_agreements_total", "modelcd_shadow_pairs_total"),
                "Shadowed texts the candidate labels as production did.",
                arms=("shadow",),
            ),
            LiveMetric(
                "confidence_shift",
                "paired_shift",
                ("modelcd_shadow_confidence_shift",),
                "Per shadowed text: the candidate's top-class probability minus production's.",
                higher_is_worse=False,
                arms=("shadow",),
                defaults=(("max_shift", 0.05),),
            ),
        ),
        server="modelcd_assets.serving.classifier.router:classifier_server",
        server_api="POST /v1/classify",
        faults="modelcd_assets.faults.classifier_faults:CLASSIFIER_FAULTS",
        demo="modelcd_assets.demo.classifier:classifier_demo",
        demo_model="ticket-intent",
    )
)
declare_task(
    TaskDeclaration(
        CAUSAL_LM,
        "modelcd_assets.lib.tasks.causal_lm:CausalLmTask",
        architectures=("ForCausalLM",),
        peft_task_types=("CAUSAL_LM",),
        adapter_files=LM_ADAPTER_FILES,
        gates=(
            Gate(
                "int8_agrees_with_fp32",
                "quantized_model",
                "fidelity_verdict",
                _FIDELITY,
                "int8_fidelity",
                ("token_fidelity", "quantization"),
            ),
            Gate(
                "perplexity_within_tolerance",
                "evaluation",
                "quality_verdict",
                "Perplexity on the evaluation replies within tolerance of production's, paired per reply, and under the ceiling.",
                "quality",
                ("perplexity",),
            ),
            Gate("golden_cases_pass", "evaluation", "golden_verdict", _GOLDEN, None, ("golden_prompts",)),
            Gate(
                "generation_is_healthy",
                "evaluation",
                "generation_verdict",
                "Greedy generation on the golden and probe prompts: finite logits, EOS within max_new_tokens, repeated n-grams bounded.",
                None,
                ("generation",),
            ),
            Gate(
                "throughput_within_tolerance", "benchmark_results", "throughput_verdict", _SPEED, "speed", ("throughput", "adapter_slots")
            ),
            Gate("cost_within_budget", "benchmark_results", "cost_verdict", _COST, "cost", ("cost",)),
        ),
        contract="modelcd_assets.lib.causal_lm.contract:diff_lm_contracts",
        served="modelcd_assets.lib.causal_lm.served:lm_served",
        subjects=("registered-files", "int8-model", "adapter-file", "tokenizer"),
        slo_latency=(
            ("p99_ttft_ms", "modelcd_llm_time_to_first_token_seconds"),
            ("p99_tpot_ms", "modelcd_llm_time_per_output_token_seconds"),
        ),
        live_metrics=(
            LiveMetric("ttft_ms", "shift", ("modelcd_llm_time_to_first_token_seconds",), "Time to first token, ms.", scale=1000.0),
            LiveMetric(
                "tpot_ms",
                "shift",
                ("modelcd_llm_time_per_output_token_seconds",),
                "Mean time per output token after the first, ms.",
                scale=1000.0,
            ),
            LiveMetric(
                "answer_tokens",
                "shift",
                ("modelcd_llm_answer_tokens",),
                "Tokens per answer, EOS included: what an answer costs.",
                defaults=(("max_mean_ratio", 1.25), ("max_tail_ratio", 1.5)),
            ),
            _LIVE_COST,
            LiveMetric(
                "cost_per_1m_tokens_usd",
                "shift",
                ("modelcd_llm_answer_cost_usd_per_1m_tokens",),
                "Per answer: its cost over its tokens, x 1e6, in USD.",
                arms=("canary",),
                defaults=_COST_DEFAULTS,
            ),
            _ERRORS,
            _NAN,
            # Unpaired, at canary steps only: at a shadow step the candidate's answers are copies of a share of production's
            # (those the lane had room for), so the two arms' EOS shares differ by which prompts were copied; the pairs
            # judge it there (eos_kept). CI saw a byte-identical copy paused at its shadow step on 120/132 against 539/561.
            LiveMetric(
                "eos_share",
                "rate",
                ("modelcd_llm_answers_at_eos_total", "modelcd_requests_total"),
                "Answers that ended with the model's end of turn, not cut at max_tokens.",
                higher_is_worse=False,
                arms=("canary",),
                defaults=(("max_rate_increase", 0.05),),
            ),
            LiveMetric(
                "eos_kept",
                "agreement",
                ("modelcd_shadow_eos_kept_total", "modelcd_shadow_eos_pairs_total"),
                "Shadowed greedy generations that production ended with its end of turn and the candidate did too, on the same prompt.",
                arms=("shadow",),
                defaults=(("min_share", 0.9),),
            ),
            LiveMetric(
                "first_token_agreement",
                "agreement",
                ("modelcd_shadow_agreements_total", "modelcd_shadow_pairs_total"),
                "Shadowed greedy generations whose first token is production's.",
                arms=("shadow",),
                defaults=(("min_share", 0.8),),
            ),
            LiveMetric(
                "length_ratio",
                "paired_shift",
                ("modelcd_shadow_length_ratio",),
                "Per shadowed generation: log2 of the candidate's answer tokens over production's (1: twice as long).",
                arms=("shadow",),
                defaults=(("max_shift", 0.5),),
            ),
        ),
        server="modelcd_assets.serving.lm.router:lm_server",
        server_api="the OpenAI API: POST /v1/chat/completions, /v1/completions",
        faults="modelcd_assets.faults.lm_faults:LM_FAULTS",
        demo="modelcd_assets.demo.causal_lm:causal_lm_demo",
        demo_model="support-reply",
        demo_head_start="modelcd_assets.lib.demo.bases:prepare_lm_base",
    )
)
