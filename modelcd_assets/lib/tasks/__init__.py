"""Kinds of model (tasks) behind one interface: what loading, building, evaluating and probing a version means for a
classifier or for a causal LM. Gates, promotion, rollback, attestations, the sensor and the UI judge what a task hands
them and never ask which task it is."""
