"""Release: what a registered folder is, the registry, candidate records, calibration sets and revisions, rollback, signatures,
attestations, the one reader of servability, and the monitoring loop over production models."""
