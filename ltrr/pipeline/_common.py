"""Helpers shared by the pipeline's modules."""

from __future__ import annotations

import hashlib
import json

__all__ = ["input_fingerprint"]


def input_fingerprint(obj) -> str:
    """The 16-hex-digit fingerprint of a stage's inputs (JSON, keys sorted) in its stage record."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]
