"""Release: the registry, candidate records, calibration sets and revisions, rollback, signatures, attestations, and the one reader of
servability."""
