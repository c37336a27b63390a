// Test shim for tests/reliability/options_test.py: preloaded with libvramtrace.so, it makes the
// library's start-up fail after the trace file is created, the way a machine short of memory or
// disk does: with VT_FAIL_MMAP_BYTES=N, every anonymous mmap of exactly N bytes after the first
// VT_FAIL_MMAP_AFTER (default 0) fails with ENOMEM; with VT_FAIL_WRITEV=1, every writev fails
// with ENOSPC. The target's own calls go through too, but chatty makes neither. Everything else
// is the real call.
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include <atomic>

namespace {
std::atomic<long> g_mapped{0};

long env_long(const char* name) {
  const char* v = getenv(name);
  return v && *v ? strtol(v, nullptr, 10) : 0;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) void* mmap(void* addr, size_t len, int prot,
                                                             int flags, int fd, off_t off) {
  using Fn = void* (*)(void*, size_t, int, int, int, off_t);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "mmap"));
  long fail = env_long("VT_FAIL_MMAP_BYTES");
  if (fail > 0 && len == static_cast<size_t>(fail) && (flags & MAP_ANONYMOUS) &&
      g_mapped.fetch_add(1) >= env_long("VT_FAIL_MMAP_AFTER")) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  return real(addr, len, prot, flags, fd, off);
}

extern "C" __attribute__((visibility("default"))) ssize_t writev(int fd, const iovec* iov,
                                                                 int iovcnt) {
  using Fn = ssize_t (*)(int, const iovec*, int);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "writev"));
  if (env_long("VT_FAIL_WRITEV") == 1) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, iov, iovcnt);
}
