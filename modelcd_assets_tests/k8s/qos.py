"""Kubernetes Guaranteed QoS, in whole CPUs."""

from __future__ import annotations

from decimal import Decimal


def cpu_cores(quantity: str) -> Decimal:
    return Decimal(quantity[:-1]) / 1000 if quantity.endswith("m") else Decimal(quantity)


def guaranteed_qos_problems(pod_spec: dict) -> list[str]:
    """Why a pod would not get Guaranteed QoS with whole CPUs (what the static CPU manager pins to cores); [] when it would."""
    problems = []
    for c in pod_spec.get("initContainers", []) + pod_spec["containers"]:
        requests, limits = c.get("resources", {}).get("requests", {}), c.get("resources", {}).get("limits", {})
        for resource in ("cpu", "memory"):
            if resource not in limits:
                problems.append(f"{c['name']}: no {resource} limit")
            elif requests.get(resource, limits[resource]) != limits[resource]:
                problems.append(f"{c['name']}: {resource} request {requests[resource]} != limit {limits[resource]}")
        if "cpu" in limits and cpu_cores(limits["cpu"]) % 1:
            problems.append(f"{c['name']}: {limits['cpu']} is not a whole number of CPUs")
    return problems
