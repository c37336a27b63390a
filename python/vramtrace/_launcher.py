"""The `vramtrace` command of the Python package (and `python -m vramtrace`): runs the native
vramtrace installed beside this file (vramtrace/_bin/, with libvramtrace.so next to it), after
pointing VRAMTRACE_CUPTI at the CUPTI of NVIDIA's pip wheels (the ones PyTorch depends on) when
the machine has no CUDA Toolkit to take it from.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
EXE = os.path.join(_HERE, "_bin", "vramtrace")
LIB = os.path.join(_HERE, "_bin", "libvramtrace.so")

# Where libvramtrace.so looks on its own (interpose/cupti_hooks.cpp), besides the loader's path.
_TOOLKIT_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/extras/CUPTI/lib64",
                 "/usr/local/cuda/targets/x86_64-linux/lib")
_WHEEL_DIRS = (("nvidia", "cu13", "lib"), ("nvidia", "cuda_cupti", "lib"))
CUPTI = "libcupti.so.13"


def toolkit_cupti(env):
    """The CUDA Toolkit's CUPTI that the library would find itself in environment `env`, or
    None."""
    dirs = list(_TOOLKIT_DIRS)
    if env.get("CUDA_HOME"):
        dirs.append(os.path.join(env["CUDA_HOME"], "lib64"))
    dirs += [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    for d in dirs:
        p = os.path.join(d, CUPTI)
        if os.path.isfile(p):
            return p
    return None


def wheel_cupti(paths=None):
    """The CUPTI of an nvidia-* pip wheel on this Python's path (nvidia/cu13/lib for CUDA 13's
    wheels, nvidia/cuda_cupti/lib for the older layout), or None."""
    for entry in paths if paths is not None else sys.path:
        for parts in _WHEEL_DIRS:
            p = os.path.join(entry or ".", *parts, CUPTI)
            if os.path.isfile(p):
                return os.path.abspath(p)
    return None


def environment(env):
    """`env` with VRAMTRACE_CUPTI set to a pip wheel's CUPTI when neither the user nor a CUDA
    Toolkit provides one."""
    env = dict(env)
    if not env.get("VRAMTRACE_CUPTI") and not toolkit_cupti(env):
        found = wheel_cupti()
        if found:
            env["VRAMTRACE_CUPTI"] = found
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
