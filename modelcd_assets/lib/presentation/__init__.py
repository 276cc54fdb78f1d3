"""Presentation: terminal tables and the small plots embedded in Dagster metadata."""
