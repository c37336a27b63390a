"""Instructions retired by the calling thread (user space), from the CPU's counters through
perf_event_open: a measure of the work a step does that the machine's drift does not move, where
the (virtual) machine exposes the counters. `python3 bench/instructions.py --probe` says whether
it does."""
import ctypes
import os
import struct
import sys

_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}.get(os.uname().machine)
_ENABLE = 0x2400  # PERF_EVENT_IOC_ENABLE


class Instructions:
    """Counts this thread's user-space instructions; `read()` gives the count so far. Raises
    OSError where the counters cannot be had (no PMU in a virtual machine, perf_event_paranoid)."""

    def __init__(self):
        if _PERF_EVENT_OPEN is None:
            raise OSError("perf_event_open: unknown system call number on this machine")
        libc = ctypes.CDLL(None, use_errno=True)
        # struct perf_event_attr as of PERF_ATTR_SIZE_VER0 (64 bytes): PERF_TYPE_HARDWARE,
        # PERF_COUNT_HW_INSTRUCTIONS; flags: exclude_kernel (bit 5), exclude_hv (bit 6).
        attr = struct.pack("IIQQQQQII", 0, 64, 1, 0, 0, 0, (1 << 5) | (1 << 6), 0, 0)
        buf = ctypes.create_string_buffer(attr + b"\0" * (64 - len(attr)), 64)
        fd = libc.syscall(_PERF_EVENT_OPEN, buf, 0, -1, -1, 0)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, "perf_event_open: " + os.strerror(err))
        self.fd = fd

    def read(self):
        return struct.unpack("Q", os.read(self.fd, 8))[0]


def counter():
    """An Instructions, or None where the counters cannot be had."""
    try:
        return Instructions()
    except OSError:
        return None


if __name__ == "__main__" and "--probe" in sys.argv:
    try:
        c = Instructions()
        a = c.read()
        sum(range(100000))
        print("instructions: counted (%d for a sum of 100,000 numbers)" % (c.read() - a))
    except OSError as e:
        print("instructions: not counted here (%s)" % e)
