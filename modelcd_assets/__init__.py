"""modelcd: gated continuous delivery for fine-tuned models."""
