"""Whose line a Python frame is, declared once: the files that are never a program's own line
(PyTorch, installed packages, the test runner, the interpreter's frozen modules) and vramtrace's
own. The start-up hook and the pytest plugin read this list; the build makes the collector's copy
of it from this file (collector/analysis/frame_rules.cmake), so that the line the hook takes for
the program's is the program's in the report too. One entry a line, as
("kind", "text"): "part", a path holding the text; "start", a path starting with it; "name", a
file so named; "prefix", a file whose name starts with it."""
import os

FRAMEWORK_FILES = (
    ("part", "/torch/"),
    ("part", "/site-packages/"),
    ("part", "/dist-packages/"),
    ("part", "/_pytest/"),
    ("part", "/pluggy/"),
    ("start", "<frozen"),
)

# vramtrace's start-up hook (the launcher writes it as sitecustomize.py, its parts beside it):
# its wrappers run inside the program's calls; never the program's line, nor a framework's.
VRAMTRACE_FILES = (
    ("name", "sitecustomize.py"),
    ("prefix", "_vramtrace_"),
)


def _matches(entries, path):
    name = os.path.basename(path)
    for kind, text in entries:
        if ((kind == "part" and text in path) or (kind == "start" and path.startswith(text))
                or (kind == "name" and name == text)
                or (kind == "prefix" and name.startswith(text) and name.endswith(".py"))):
            return True
    return False


def is_framework_file(path):
    """A framework's file (or no file at all): never the program's line."""
    return not path or _matches(FRAMEWORK_FILES, path)


def is_vramtrace_file(path):
    """A file of vramtrace's start-up hook."""
    return bool(path) and _matches(VRAMTRACE_FILES, path)


def is_program_file(path):
    """The program's own code: neither a framework's file nor vramtrace's."""
    return not is_framework_file(path) and not is_vramtrace_file(path)
