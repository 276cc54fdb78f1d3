"""A causal LM's server: one INT8 base session per base build with each version's adapter, behind the OpenAI API."""
