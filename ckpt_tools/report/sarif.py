"""SARIF 2.1.0 view: one run, one reportingDescriptor per rule, results located at the shard/index/config file with
tensor names as logical locations."""

from __future__ import annotations

import hashlib

import orjson

from .. import __version__
from ..rules.base import all_rules
from .model import Report

LEVELS = {"error": "error", "warning": "warning", "info": "note"}
INFO_URI = "https://github.com/ckpt-tools/ckpt-tools"


def _rule_descriptor(rule: type) -> dict:
    doc = rule.doc_sections()
    help_text = "\n\n".join(f"{k}: {v}" for k, v in doc.items() if k != "summary" and v)
    return {
        "id": rule.code,
        "name": rule.slug,
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": doc.get("summary") or rule.title},
        "help": {"text": help_text or rule.title, "markdown": _help_markdown(doc)},
        "defaultConfiguration": {"level": LEVELS[rule.severity]},
        "properties": {"slug": rule.slug, "fixable": rule.fixable},
    }


def _help_markdown(doc: dict[str, str]) -> str:
    return "\n\n".join(f"**{k}**\n\n{v}" for k, v in doc.items() if k != "summary" and v)


def render(report: Report, *, color: bool = False) -> str:
    rules = all_rules()
    index = {r.code: i for i, r in enumerate(rules)}
    results = []
    for f in report.sorted_findings():
        locations = [
            {"physicalLocation": {"artifactLocation": {"uri": file, "uriBaseId": "CHECKPOINT"}}} for file in f.files
        ] or [{"physicalLocation": {"artifactLocation": {"uri": ".", "uriBaseId": "CHECKPOINT"}}}]
        if f.tensors:
            locations[0]["logicalLocations"] = [
                {"name": t.rsplit(".", 1)[-1], "fullyQualifiedName": t, "kind": "member"} for t in f.tensors
            ]
        fingerprint = hashlib.sha256(
            "\0".join([f.code, *f.files, *f.tensors[:5], str(f.count)]).encode()
        ).hexdigest()[:32]
        result = {
            "ruleId": f.code,
            "ruleIndex": index.get(f.code, -1),
            "level": LEVELS[f.severity],
            "message": {"text": f.message + (f" Fix: {f.fix}" if f.fix else "")},
            "locations": locations,
            "partialFingerprints": {"ckptFindingHash/v1": fingerprint},
            "properties": {"slug": f.slug, "severity": f.severity, "count": f.count},
        }
        if result["ruleIndex"] < 0:
            del result["ruleIndex"]
        results.append(result)
    sarif = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "ckpt",
                        "version": __version__,
                        "informationUri": INFO_URI,
                        "rules": [_rule_descriptor(r) for r in rules],
                    }
                },
                "originalUriBaseIds": {"CHECKPOINT": {"description": {"text": f"the checkpoint {report.target}"}}},
                "results": results,
                "properties": {"checkpoint": dict(report.checkpoint)},
            }
        ],
    }
    return orjson.dumps(sarif, option=orjson.OPT_INDENT_2).decode() + "\n"
