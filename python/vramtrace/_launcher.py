"""The `vramtrace` command of the Python package (and `python -m vramtrace`): runs the native
vramtrace installed beside this file (vramtrace/_bin/, with libvramtrace.so next to it), after
naming this Python's folders in VRAMTRACE_SITE_PACKAGES, where libvramtrace.so looks last for the
CUPTI of NVIDIA's pip wheels (the ones PyTorch depends on) on a machine with no CUDA Toolkit to
take it from. Where CUPTI is looked for, and in which order, is the library's alone
(interpose/cupti_hooks.cpp).
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
EXE = os.path.join(_HERE, "_bin", "vramtrace")
LIB = os.path.join(_HERE, "_bin", "libvramtrace.so")


def environment(env, paths=None):
    """`env` with VRAMTRACE_SITE_PACKAGES naming the folders of this Python's path (`paths`,
    default sys.path) that exist, unless the user set it."""
    env = dict(env)
    if "VRAMTRACE_SITE_PACKAGES" not in env:
        folders = []
        for entry in paths if paths is not None else sys.path:
            folder = os.path.abspath(entry or ".")
            if os.path.isdir(folder) and ":" not in folder and folder not in folders:
                folders.append(folder)
        env["VRAMTRACE_SITE_PACKAGES"] = ":".join(folders)
    return env


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if not os.access(EXE, os.X_OK):
        sys.stderr.write("vramtrace: the native command is missing from %s\n" % EXE)
        return 2
    env = environment(os.environ)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(EXE, [EXE] + args, env)
