"""The fault sandbox: faulty candidates derived from production, gated in an isolated copy, each against its expected outcome."""
