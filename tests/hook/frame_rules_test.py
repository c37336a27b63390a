#!/usr/bin/env python3
"""Whose line a frame is, by the one declared list (python/vramtrace/_hook/_vramtrace_frames.py):
each path of tests/data/frame_rules_cases.txt gets its answer from the hook's rule, the pytest
plugin takes the same files for the program's (it imports the list as the wheel ships it), and
the collector's copy answers the same in tests/unit/stacks_test.cpp.

    tests/hook/frame_rules_test.py"""
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [os.path.join(ROOT, "python", "vramtrace", "_hook"), os.path.join(ROOT, "python")]
import _vramtrace_frames as frames  # noqa: E402  (the hook's copy)
from checks import check, finish  # noqa: E402  (beside this file)
from vramtrace._hook import _vramtrace_frames as plugin_frames  # noqa: E402  (the plugin's import)

cases = []
with open(os.path.join(ROOT, "tests", "data", "frame_rules_cases.txt")) as f:
    for line in f:
        if line.startswith("#") or not line.strip():
            continue
        whose, path = line.rstrip("\n").split("\t", 1)
        cases.append((whose, path))
check("the cases file holds every answer", sorted({w for w, _ in cases}),
      ["framework", "program", "vramtrace"])
for whose, path in cases:
    got = ("program" if frames.is_program_file(path)
           else "framework" if frames.is_framework_file(path) else "vramtrace")
    check("%r is %s's" % (path, whose), got, whose)
    check("%r: vramtrace's own" % path, frames.is_vramtrace_file(path), whose == "vramtrace")
    check("%r: the plugin's import says the same" % path, plugin_frames.is_program_file(path),
          whose == "program")
finish("whose line a frame is")
