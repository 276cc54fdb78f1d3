"""Errors a user can act on."""


class ModelcdError(Exception):
    """A problem with the user's input or environment; the message says what to do."""


class BadCandidate(ModelcdError):
    """The candidate artifact is malformed or does not fit its base model."""


class RegistryUnavailable(Exception):
    """The registry could not give an answer; nothing may be decided on a guess."""


class Superseded(Exception):
    """Production moved while a candidate was gated against it; the candidate must be re-gated."""
