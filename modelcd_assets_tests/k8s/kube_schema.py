"""Strict validation of Kubernetes objects against the schemas kubernetes-validate ships, offline."""

from __future__ import annotations

import kubernetes_validate

# The oldest release still supported by the managed Kubernetes services when this was written; kubernetes-validate
# ships its schemas, so nothing is fetched.
K8S_VERSION = "1.30"


def schema_problems(resource: dict) -> list[str]:
    """Why resource does not validate, strictly (no unknown fields), against Kubernetes K8S_VERSION; [] when it does.

    A kind with no schema is a problem, not a warning: an object nothing checked must not pass as checked.
    """
    try:
        kubernetes_validate.validate(resource, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path) or "(top level)"
        return [f"{path}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"no schema: {e.message}"]
    return []
