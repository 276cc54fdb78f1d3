"""Finds secrets written out literally: a password, token or key as a value, rather than a reference to a Secret."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import yaml

# Words of a key (split at _, -, . and camelCase) that make it a secret's; a word ending in one counts (PGPASSWORD).
SECRET_STEMS = ("password", "passwd", "secret", "secrets", "token", "tokens", "credential", "credentials", "apikey", "privatekey")
SECRET_PAIRS = {("api", "key"), ("private", "key")}
# A key whose last word says it names where a secret is (a Secret object, a file), not the secret itself; and
# dagster-k8s's name for the Secret that holds the PostgreSQL password.
REFERENCE_WORDS = {"name", "names", "ref", "file", "path"}
KNOWN_REFERENCES = {"postgres_password_secret"}
WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
# A value read at run time: $VAR, ${VAR}, $(command), or a <placeholder>.
FROM_ELSEWHERE = re.compile(r"^[\"']?(\$\{?\w+\}?|\$\(.*\)|<[^>]+>)[\"']?$")
URL_PASSWORD = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:(?P<password>[^@\s/]+)@")
FROM_LITERAL = re.compile(r"--from-literal[= ](?P<key>[^=\s]+)=(?P<value>\S+)")
ASSIGNMENT = re.compile(r"^\s*(?:export\s+|ENV\s+|ARG\s+)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\S+)", re.MULTILINE)
# An INI line (MLflow's basic_auth.ini), on a line of its own or quoted in a shell command: key = value.
INI_ASSIGNMENT = re.compile(r"""(?:^|["'])[ \t]*(?P<key>[A-Za-z_][A-Za-z0-9_.]*)[ \t]+=[ \t]+(?P<value>[^\s"']+)""", re.MULTILINE)


def _is_literal(value: Any) -> bool:
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, str) and value != "" and not FROM_ELSEWHERE.match(value)


def _secret_key(key: Any) -> bool:
    if not isinstance(key, str) or key in KNOWN_REFERENCES:
        return False
    words = [w.lower() for w in WORD.findall(key)]
    if not words or words[-1] in REFERENCE_WORDS:
        return False
    return any(w.endswith(SECRET_STEMS) for w in words) or any(pair in SECRET_PAIRS for pair in zip(words, words[1:]))


def _is_literal_text(value: str) -> bool:
    """In a shell command or a Dockerfile: a value that expands nothing ($VAR, ${VAR}, $(...)) is written out."""
    return _is_literal(value) and "$" not in value


def _walk(node: Any, where: str) -> Iterator[str]:
    if isinstance(node, dict):
        name = node.get("name")
        if _secret_key(name) and _is_literal(node.get("value")):  # an env entry {name: X_PASSWORD, value: ...}
            yield f"{where}: {name} has the literal value {node['value']!r}; use valueFrom.secretKeyRef"
        for key, value in node.items():
            if _secret_key(key) and _is_literal(value):
                yield f"{where}.{key}: literal value; reference a Secret instead"
            yield from _walk(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _walk(item, f"{where}[{i}]")


def _text_findings(text: str, filename: str, assignments: bool) -> Iterator[str]:
    for m in URL_PASSWORD.finditer(text):
        if _is_literal(m["password"]):
            yield f"{filename}: a URL with a literal password: {m.group(0)}"
    for m in FROM_LITERAL.finditer(text):
        if _is_literal_text(m["value"]):
            yield f"{filename}: --from-literal {m['key']} with a literal value; read it from the environment"
    for m in INI_ASSIGNMENT.finditer(text):
        if _secret_key(m["key"]) and _is_literal_text(m["value"]):
            yield f"{filename}: {m['key']} = a literal value"
    if assignments:
        for m in ASSIGNMENT.finditer(text):
            if _secret_key(m["key"]) and _is_literal_text(m["value"]):
                yield f"{filename}: {m['key']} is assigned a literal value"


def secret_literals(text: str, filename: str) -> list[str]:
    """Every secret literal in one file's text: YAML and JSON key by key, and every file line by line (URLs with a
    password, kubectl --from-literal, INI lines such as basic_auth.ini's; in other files, assignments such as ENV or
    export too)."""
    if filename.endswith((".yaml", ".yml")):
        found = [f for i, doc in enumerate(yaml.safe_load_all(text)) for f in _walk(doc, f"{filename}[{i}]")]
    elif filename.endswith(".json"):
        found = list(_walk(json.loads(text), filename))
    else:
        return list(_text_findings(text, filename, assignments=True))
    return found + list(_text_findings(text, filename, assignments=False))
