#!/usr/bin/env python3
"""Validates report.json files against their contract, report/report.schema.json (and the output
of `vramtrace whatif --json` against report/whatif.schema.json) (JSON Schema
draft 2020-12, checked with the jsonschema package: Debian's python3-jsonschema).

    tests/contract/validate_report.py REPORT.json...

Prints each violation (where in the report, what is wrong) and exits 1 if there is one, 2 when
a file cannot be read or jsonschema is missing; 0 when every report conforms.
"""
import json
import os
import sys

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "report",
                      "report.schema.json")
WHATIF_SCHEMA = os.path.join(os.path.dirname(SCHEMA), "whatif.schema.json")


def main(paths):
    try:
        import jsonschema
    except ImportError:
        print("validate_report: the jsonschema module is missing (apt-get install "
              "python3-jsonschema; scripts/setup.sh installs it)", file=sys.stderr)
        return 2
    validators = {}

    def validator_of(doc):
        # `vramtrace whatif --json` has its own contract beside the report's.
        name = WHATIF_SCHEMA if isinstance(doc, dict) and doc.get("schema") == "vramtrace.whatif/1" \
            else SCHEMA
        if name not in validators:
            with open(name) as f:
                validators[name] = jsonschema.Draft202012Validator(json.load(f))
        return validators[name]
    bad = 0
    for path in paths:
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{path}: cannot be read: {e}", file=sys.stderr)
            return 2
        errors = sorted(validator_of(report).iter_errors(report), key=lambda e: list(e.absolute_path))
        for e in errors[:20]:
            print(f"{path}: {e.json_path}: {e.message[:300]}")
        if len(errors) > 20:
            print(f"{path}: ... and {len(errors) - 20} more")
        bad += bool(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
