"""The libvramtrace.so of this process, reached through ctypes: only a library that is already
loaded (preloaded by `vramtrace run` or LD_PRELOAD, or injected by the CUDA driver) is used, never
loaded here, because loading it would not make CUDA report to it.
"""
import ctypes
import os
import sys
import time

_lib = None
_path = None
_next_look = 0.0
_warned = False

_SIGNATURES = {
    "vramtrace_v1_step": (None, [ctypes.c_longlong]),
    "vramtrace_v1_range_push": (ctypes.c_int, [ctypes.c_char_p]),
    "vramtrace_v1_range_pop": (ctypes.c_int, []),
    "vramtrace_v1_live_devices": (ctypes.c_int, []),
    "vramtrace_v1_live_figures": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_longlong),
                                                 ctypes.c_int]),
    "vramtrace_v1_live_mark": (ctypes.c_ulonglong, []),
    "vramtrace_v1_live_sites": (ctypes.c_size_t, [ctypes.c_int, ctypes.c_int, ctypes.c_ulonglong,
                                                  ctypes.c_int, ctypes.c_char_p,
                                                  ctypes.c_size_t]),
    "vramtrace_v1_cupti_path": (ctypes.c_char_p, []),
}


def _loaded_path():
    """The path of a libvramtrace*.so mapped into this process, or None."""
    try:
        with open("/proc/self/maps", "rb") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    path = parts[5].strip().decode("utf-8", "surrogateescape")
                    base = os.path.basename(path)
                    if base.startswith("libvramtrace") and base.endswith(".so"):
                        return path
    except OSError:
        pass
    return None


def library():
    """The loaded library with its functions typed, or None. A process where it is not loaded
    yet (the driver loads it at cuInit when only CUDA_INJECTION64_PATH names it) is looked at
    again at most once a second."""
    global _lib, _path, _next_look
    if _lib is not None:
        return _lib
    now = time.monotonic()
    if now < _next_look:
        return None
    _next_look = now + 1.0
    path = _loaded_path()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None
    if not hasattr(lib, "vramtrace_v1_live_figures"):
        return None  # an older library without the live figures
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes
    _lib, _path = lib, path
    return _lib


def library_path():
    library()
    return _path


def warn_once(what):
    """One line on stderr, the first time the API is used without the library."""
    global _warned
    if _warned:
        return
    _warned = True
    sys.stderr.write("vramtrace: %s: libvramtrace.so is not loaded in this process, so this does "
                     "nothing (run the program with `vramtrace run -- ...`)\n" % what)
