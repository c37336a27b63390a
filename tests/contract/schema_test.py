#!/usr/bin/env python3
"""The report contract's own test: report/report.schema.json is a valid JSON Schema (draft
2020-12) of the version report/json_report.h writes, and it declares every key the writer
(report/json_report.cpp, report/torch_json.cpp), the summary (report/summary.cpp) and the reader
layer (collector/contract/report_keys.h) name. (What the HTML page reads is checked where it runs:
tests/contract/page_keys.mjs.)

The keys are found in the sources as written: `{"key", ...}`, `["key"]`, `value("key"`,
`contains("key"`, and report_keys.h's `Key name = "key"`. A key that fails here was written or
read without being declared: add it to the schema (with its type), or, for a string that is
not a report key, to WRITER_NOT_KEYS with the reason.

    tests/contract/schema_test.py
"""
import json
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# String literals in the writer's brace lists that are values, not keys.
WRITER_NOT_KEYS = {
    "B": "human_bytes()'s unit names",
}
# report/json_report.cpp writes the "live" object of a report of a moment (--serve, snapshots),
# cli/live_report.cpp its last one.
CPP_SOURCES = ["report/json_report.cpp", "report/torch_json.cpp", "report/summary.cpp",
               "collector/contract/report_keys.h", "cli/live_report.cpp"]


def schema_keys(node, out):
    """Every property name the schema declares, at any depth."""
    if isinstance(node, dict):
        out.update(node.get("properties", {}))
        for v in node.values():
            schema_keys(v, out)
    elif isinstance(node, list):
        for v in node:
            schema_keys(v, out)
    return out


def strip_comments(src):
    return re.sub(r"//[^\n]*", "", src)


def cpp_keys(src):
    src = strip_comments(src)
    found = set(re.findall(r'\{\s*"([A-Za-z_]\w*)"\s*,', src))
    found |= set(re.findall(r'\[\s*"([A-Za-z_]\w*)"\s*\]', src))
    found |= set(re.findall(r'(?:value|contains)\(\s*"([A-Za-z_]\w*)"', src))
    found |= set(re.findall(r'Key\s+\w+\s*=\s*"([A-Za-z_]\w*)"', src))  # report_keys.h
    return found


def main():
    failures = []
    with open(os.path.join(ROOT, "report", "report.schema.json")) as f:
        schema = json.load(f)
    try:
        import jsonschema
        jsonschema.Draft202012Validator.check_schema(schema)
    except ImportError:
        failures.append("the jsonschema module is missing (apt-get install python3-jsonschema)")
    except jsonschema.exceptions.SchemaError as e:
        failures.append(f"report.schema.json is not a valid draft 2020-12 schema: {e.message}")

    with open(os.path.join(ROOT, "report", "json_report.h")) as f:
        version = re.search(r'kSchema\s*=\s*"([^"]+)"', f.read()).group(1)
    declared = schema["properties"]["schema"].get("const")
    if declared != version:
        failures.append(f"the schema declares version {declared!r}, json_report.h writes "
                        f"{version!r}")

    keys = schema_keys(schema, set())
    for rel in CPP_SOURCES:
        path = os.path.join(ROOT, rel)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            missing = sorted(cpp_keys(f.read()) - keys - set(WRITER_NOT_KEYS))
        for k in missing:
            failures.append(f"{rel} names the key {k!r}, which report.schema.json does not declare")

    for line in failures:
        print("FAIL:", line)
    print(f"{len(keys)} keys declared; {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
