"""Errors a user can act on."""


class ModelcdError(Exception):
    """A problem with the user's input or environment; the message says what to do."""


class BadCandidate(ModelcdError):
    """The candidate artifact is malformed or does not fit its base model."""
