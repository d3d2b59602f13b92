"""A job's config hash: what it measures, the key its runs are found and its rounds left under."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Left out of the hash: where results go, how a sweep treats finished work, what is watched beside the measurement
# (so a run keeps the hash it had before `monitor` existed). Every other key is in, cache folders too (a cold job's
# folder decides what a warm one finds).
_UNHASHED_TOP = ("tracking", "resume", "monitor")
# keys added after runs were stored, with the value those runs measured with: hashed only when set otherwise, so a
# stored run keeps its hash (a sweep's resume and the history find it)
_ADDED_KEYS = {("measure", "flush_cache"): False}
# keys removed from the config (benchmarks' knobs or constants now), with the value every run that did not set them
# measured with: hashed as that value, so such a run keeps its hash
REMOVED_KEYS = {
    ("measure", "worker_start"): "auto",
    ("measure", "keep_freed_memory"): True,
    ("measure", "layouts"): None,
    ("schedule", "skip_first"): 0,
}
# backend=neuron's removed keys, added to a Neuron job's backend group
_REMOVED_NEURON_KEYS = {"explorer_view_timeout_s": 300, "neff_cache_dir": None}


def config_hash(resolved: dict[str, Any]) -> str:
    """A short hash of what a job measures: its resolved config without where results go."""
    identity = {k: v for k, v in resolved.items() if k not in _UNHASHED_TOP}
    for (group, key), stored in _ADDED_KEYS.items():
        if isinstance(identity.get(group), dict) and identity[group].get(key, stored) == stored:
            identity[group] = {k: v for k, v in identity[group].items() if k != key}
    for (group, key), measured in REMOVED_KEYS.items():
        if isinstance(identity.get(group), dict):
            identity[group] = {**identity[group], key: measured}
    if isinstance(backend := identity.get("backend"), dict) and backend.get("name") == "neuron":
        identity["backend"] = {**backend, **_REMOVED_NEURON_KEYS}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
