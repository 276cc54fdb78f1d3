"""Candidates are a dynamic partition keyed NAME:VERSION of the registered model version."""

import dagster as dg

candidates = dg.DynamicPartitionsDefinition(name="candidates")
