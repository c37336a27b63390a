# pytest's view of tests/: the tests here are scripts that ctest runs (tests/CMakeLists.txt), most
# with the build folder as their argument, and fixtures that those scripts run under pytest
# themselves (tests/python/cases/, tests/gpu/): collected by a bare `pytest tests` they would be
# imported, and fail. Only the scripts that need nothing built are collected, one item each,
# run as ctest runs them; the rest run through ctest (tests/README.md).
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
STANDALONE = {os.path.join(HERE, *p.split("/")) for p in (
    "contract/schema_test.py",
    "hook/allocator_state_test.py",
    "hook/categories_test.py",
    "hook/side_channel_test.py",
    "python/size_test.py",
)}


def pytest_ignore_collect(collection_path, config):
    path = str(collection_path)
    if os.path.isdir(path) or os.path.basename(path) == "conftest.py":
        return None
    return path not in STANDALONE


def pytest_pycollect_makemodule(module_path, parent):
    if str(module_path) in STANDALONE:
        return Script.from_parent(parent, path=module_path)
    return None


class Script(pytest.File):
    def collect(self):
        yield ScriptRun.from_parent(self, name="run")


class ScriptRun(pytest.Item):
    """The script run alone, as ctest runs it: it passes when it exits 0."""

    def runtest(self):
        p = subprocess.run([sys.executable, str(self.path)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, cwd=HERE)
        if p.returncode != 0:
            raise ScriptFailed(p.returncode, p.stdout)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ScriptFailed):
            return "exit %d:\n%s" % excinfo.value.args
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, os.path.relpath(str(self.path), HERE)


class ScriptFailed(Exception):
    pass
