"""The demo's registered models, by the task each demonstrates: the demo's data, read by the CLI without importing the demo."""

from modelcd_assets.lib.tasks.names import CAUSAL_LM, CLASSIFICATION

DEMO_MODELS = {CLASSIFICATION: "ticket-intent", CAUSAL_LM: "support-reply"}
LM_BASE_NAME = "support-reply-base"  # the causal LM demo's base, registered before its adapters
