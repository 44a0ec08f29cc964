"""JSON Schema (Draft 2020-12) of ``profile.json``, version 1 (a Python dict: no package data)."""

from __future__ import annotations

_NUM = {"type": ["number", "null"]}
_BYTES = {
    "type": "object",
    "required": ["read", "write", "total"],
    "properties": {"read": _NUM, "write": _NUM, "total": _NUM},
}
_KERNEL = {
    "type": "object",
    "required": ["id", "name", "metrics", "metric_names", "stalls"],
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "metrics": {
            "type": "object",
            "required": ["dram_bytes_read", "dram_bytes_write", "registers_per_thread"],
            "additionalProperties": _NUM,
        },
        "metric_names": {"type": "object", "additionalProperties": {"type": "string"}},
        "stalls": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["reason", "ratio", "share_pct"],
                "properties": {"reason": {"type": "string"}, "ratio": _NUM, "share_pct": _NUM},
            },
        },
    },
}
_TARGET = {
    "type": "object",
    "required": [
        "name",
        "op",
        "family",
        "kernel_family",
        "dtype",
        "shape",
        "model_bytes",
        "status",
        "error",
        "kernels",
        "measured_bytes",
        "gap_pct",
        "flag",
    ],  # fmt: skip
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "status": {"enum": ["ok", "not built", "no kernels"]},
        "error": {"type": ["string", "null"]},
        "model_bytes": _BYTES,
        "measured_bytes": {"oneOf": [_BYTES, {"type": "null"}]},
        "gap_pct": {"oneOf": [_BYTES, {"type": "null"}]},
        "kernels": {"type": "array", "items": _KERNEL},
        "flag": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["over_threshold", "threshold_pct", "reasons", "note"],
                    "properties": {
                        "over_threshold": {"type": "boolean"},
                        "threshold_pct": {"type": "number"},
                        "reasons": {"type": "array", "items": {"type": "string"}},
                        "note": {"type": ["string", "null"]},
                    },
                },
            ]
        },
    },
}
PROFILE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://warpgauge.example/schemas/1/profile.json",
    "title": "warpgauge profile: Nsight Compute metrics per kernel and the byte-model check",
    "type": "object",
    "required": [
        "schema_version",
        "kind",
        "profile_id",
        "created_at",
        "ncu",
        "policy",
        "gap_threshold_pct",
        "targets",
    ],  # fmt: skip
    "properties": {
        "schema_version": {"const": 1},
        "kind": {"const": "profile"},
        "profile_id": {"type": "string", "pattern": "^[A-Za-z0-9._-]+$"},
        "created_at": {"type": "string"},
        "ncu": {
            "type": "object",
            "required": ["path", "version", "sections", "metrics_requested", "fields_missing"],
        },
        "policy": {
            "type": "object",
            "required": ["replay_mode", "cache_control", "clock_control"],
            "properties": {
                "replay_mode": {"const": "kernel"},
                "cache_control": {"const": "all"},
                "clock_control": {"const": "none"},
            },
        },
        "gap_threshold_pct": {"type": "number", "exclusiveMinimum": 0},
        "targets": {"type": "array", "items": _TARGET},
    },
}
