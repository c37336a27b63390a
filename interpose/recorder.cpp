// The recorder: one ordered event buffer per traced process, drained by a writer thread.
//
// Why one buffer under a lock and not one per thread: the collector needs the order in which
// allocations and frees took effect to get an exact peak, and the driver already serialises
// allocations per context, so an uncontended lock of a few nanoseconds is the cheaper way to a
// total order than per-thread buffers merged by sequence number afterwards.
// The buffers are mmap'd once (no general heap on the hot path), are never freed (frees from late
// destructors are still recorded), and the writer thread is born with every signal blocked.
// Frames are zstd-compressed by the writer thread when libzstd can be loaded (compress.h), also
// the last one at exit, which is handed to the writer; frames written by any other thread (no
// writer, or after exit) are raw.
#include "interpose/recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "interpose/compress.h"
#include "interpose/notice.h"
#include "interpose/options.h"

namespace vramtrace::interpose {
namespace {

thread_local int t_depth = 0;
thread_local uint32_t t_tid = 0;

enum Phase : int { kOff = 0, kRunning = 1, kFinished = 2, kStopped = 3 };

struct Buffer {
  uint8_t* data = nullptr;
  size_t used = 0;
  uint32_t count = 0;
  uint64_t base_time = 0;
  uint64_t last_time = 0;
};

struct State {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;     // the active buffer
  pthread_mutex_t io_lock = PTHREAD_MUTEX_INITIALIZER;  // the output fd: one frame at a time
  pthread_cond_t wake;
  pthread_cond_t writer_gone;  // the writer wrote the last frame (recorder_finish waits for it)
  Buffer bufs[2];
  int active = 0;
  size_t capacity = 0;
  int fd = -1;
  bool is_socket = false;
  std::atomic<int> phase{kOff};
  bool wake_requested = false;
  bool stop = false;
  bool writer_alive = false;      // the writer thread was started
  bool writer_done = false;       // it wrote the frame recorder_finish handed it, and returned
  bool finish_abandoned = false;  // recorder_finish stopped waiting: the writer writes no more
  FrameCompressor zstd;           // loaded at start; used by the writer thread only
  uint64_t dropped_pending = 0;
  uint64_t dropped_total = 0;
  uint64_t recorded_total = 0;
  uint64_t flush_interval_ns = 100'000'000;
};

// Leaked on purpose: it must outlive every destructor that may still free device memory.
State& state() {
  static State* s = new State();
  return *s;
}

timespec deadline_in(int seconds) {
  timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += seconds;
  return deadline;
}

bool timed_lock(pthread_mutex_t* m, int seconds) {
  timespec deadline = deadline_in(seconds);
  return pthread_mutex_timedlock(m, &deadline) == 0;
}

bool write_all(int fd, bool is_socket, iovec* iov, int iovcnt) {
  while (iovcnt > 0) {
    ssize_t n;
    if (is_socket) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(iovcnt);
      n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    } else {
      n = writev(fd, iov, iovcnt);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    size_t left = static_cast<size_t>(n);
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

// Caller holds io_lock. Writes one frame, compressed when `compress` (the writer thread only)
// and it makes the frame smaller; on failure recording stops, with one notice.
void write_frame(State& s, Buffer& b, bool compress) {
  if (b.used == 0) return;
  format::FrameHeader h{};
  void* payload = b.data;
  size_t stored = b.used;
  h.codec = static_cast<uint8_t>(format::Codec::Raw);
  if (compress) {
    if (size_t z = s.zstd.compress(b.data, b.used)) {
      payload = const_cast<uint8_t*>(s.zstd.output());
      stored = z;
      h.codec = static_cast<uint8_t>(format::Codec::Zstd);
    }
  }
  h.stored_bytes = static_cast<uint32_t>(stored);
  h.raw_bytes = static_cast<uint32_t>(b.used);
  h.record_count = b.count;
  h.base_time_ns = b.base_time;
  iovec iov[2] = {{&h, sizeof h}, {payload, stored}};
  if (!write_all(s.fd, s.is_socket, iov, 2)) {
    int err = errno;
    s.phase.store(kStopped);
    notice_errno("cannot write the trace; recording stopped", err);
  }
  b.used = 0;
  b.count = 0;
}

void* writer_main(void*) {
  ++t_depth;  // our own thread: never traced
  pthread_setname_np(pthread_self(), "vramtrace-write");
  State& s = state();
  s.zstd.prepare(s.capacity);  // the context is allocated here, never in a traced thread
  for (;;) {
    pthread_mutex_lock(&s.lock);
    if (!s.stop && !s.wake_requested) {
      timespec deadline;
      clock_gettime(CLOCK_REALTIME, &deadline);
      uint64_t ns = static_cast<uint64_t>(deadline.tv_nsec) + s.flush_interval_ns;
      deadline.tv_sec += static_cast<time_t>(ns / 1'000'000'000);
      deadline.tv_nsec = static_cast<long>(ns % 1'000'000'000);
      pthread_cond_timedwait(&s.wake, &s.lock, &deadline);
    }
    // At stop, the active buffer is the last frame, written here (compressed) for
    // recorder_finish, unless it gave up waiting and writes what is left itself.
    const bool last = s.stop;
    if (last && s.finish_abandoned) {
      pthread_mutex_unlock(&s.lock);
      return nullptr;
    }
    s.wake_requested = false;
    Buffer* full = nullptr;
    if (s.bufs[s.active].used > 0) {
      full = &s.bufs[s.active];
      s.active ^= 1;
    }
    pthread_mutex_unlock(&s.lock);
    if (full) {
      pthread_mutex_lock(&s.io_lock);
      if (s.phase.load() == kRunning) write_frame(s, *full, true);
      full->used = 0;
      full->count = 0;
      pthread_mutex_unlock(&s.io_lock);
    }
    if (last) {
      pthread_mutex_lock(&s.lock);
      s.writer_done = true;
      pthread_cond_broadcast(&s.writer_gone);
      pthread_mutex_unlock(&s.lock);
      return nullptr;
    }
  }
}

int open_socket(const char* path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof addr.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  strcpy(addr.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// Expands %p in VRAMTRACE_OUTPUT to the pid, so that every process of a tree gets its own file.
void output_path(char* out, size_t n) {
  const char* pattern = getenv("VRAMTRACE_OUTPUT");
  if (!pattern || !*pattern) pattern = "vramtrace.%p.vtrace";
  size_t o = 0;
  for (const char* p = pattern; *p && o + 1 < n; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      o += static_cast<size_t>(snprintf(out + o, n - o, "%d", static_cast<int>(getpid())));
      ++p;
    } else {
      out[o++] = *p;
    }
  }
  out[o < n ? o : n - 1] = '\0';
}

// When recorder_start fails after opening the output: closes it, unmaps the buffers, and removes
// the trace file when this process created it and `created` still names that file, so that no
// empty or header-only trace is left (a directory of traces with one would be refused by
// `vramtrace report DIR`). A file that existed before (or /dev/full) is never removed.
void discard_output(State& s, const char* created) {
  struct stat ours, now;
  if (created && fstat(s.fd, &ours) == 0 && lstat(created, &now) == 0 &&
      ours.st_dev == now.st_dev && ours.st_ino == now.st_ino)
    unlink(created);
  close(s.fd);
  s.fd = -1;
  for (Buffer& b : s.bufs) {
    if (b.data) munmap(b.data, s.capacity);
    b.data = nullptr;
  }
  s.phase.store(kStopped);
}

}  // namespace

ReentryGuard::ReentryGuard() : entered_first(t_depth++ == 0) {}
ReentryGuard::~ReentryGuard() { --t_depth; }

static inline uint64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t now_ns() { return clock_ns(CLOCK_MONOTONIC); }
uint64_t coarse_now_ns() { return clock_ns(CLOCK_MONOTONIC_COARSE); }

uint32_t thread_id() {
  if (t_tid == 0) t_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t_tid;
}

bool recorder_running() {
  int p = state().phase.load(std::memory_order_relaxed);
  return p == kRunning || p == kFinished;
}

bool recorder_start() {
  State& s = state();
  if (s.phase.load() != kOff) return recorder_running();

  const char* sock = getenv("VRAMTRACE_SOCKET");
  char path[4096];
  const char* created = nullptr;  // the trace file this process created, removed on failure
  if (sock && *sock) {
    s.fd = open_socket(sock);
    s.is_socket = true;
    if (s.fd < 0) {
      notice_errno("cannot connect to the vramtrace collector; this process is not profiled", errno);
      s.phase.store(kStopped);
      return false;
    }
  } else {
    output_path(path, sizeof path);
    // O_EXCL first, to know whether the file is ours to remove if what follows fails.
    s.fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (s.fd >= 0)
      created = path;
    else if (errno == EEXIST)
      s.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (s.fd < 0) {
      notice_errno("cannot create the trace file; this process is not profiled", errno);
      s.phase.store(kStopped);
      return false;
    }
  }

  // A buffer is written as one frame, and the reader refuses frames larger than kMaxFrameBytes.
  s.capacity = buffer_bytes(getenv("VRAMTRACE_BUFFER_KB"), format::kMaxFrameBytes);
  s.flush_interval_ns = flush_interval_ns(getenv("VRAMTRACE_FLUSH_MS"));
  for (Buffer& b : s.bufs) {
    void* m = mmap(nullptr, s.capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      notice_errno("cannot map the event buffer; this process is not profiled", errno);
      discard_output(s, created);
      return false;
    }
    b.data = static_cast<uint8_t*>(m);
  }

  format::FileHeader fh{};
  memcpy(fh.magic, format::kMagic, sizeof fh.magic);
  fh.version = format::kFormatVersion;
  fh.header_bytes = sizeof fh;
  iovec iov{&fh, sizeof fh};
  if (!write_all(s.fd, s.is_socket, &iov, 1)) {
    notice_errno("cannot write the trace; this process is not profiled", errno);
    discard_output(s, created);
    return false;
  }

  // After the header (a stream is a trace as soon as it exists), in the thread that runs cuInit
  // (where CUPTI is dlopen'd next), not in the writer: the codec is known before the first frame,
  // and the module map sent next already holds libzstd.
  s.zstd.load(getenv("VRAMTRACE_COMPRESS"), getenv("VRAMTRACE_ZSTD_LIB"));
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_cond_init(&s.wake, &ca);
  pthread_cond_init(&s.writer_gone, &ca);
  s.phase.store(kRunning);

  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t tid;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&tid, &attr, writer_main, nullptr);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  s.writer_alive = rc == 0;
  if (rc != 0) {
    // Without a writer the buffers are flushed at exit (and when full, synchronously).
    notice_errno("cannot start the writer thread; events are written at exit", rc);
    s.phase.store(kFinished);
  }
  return true;
}

RecordSlot::RecordSlot(size_t max_bytes) {
  State& s = state();
  int phase = s.phase.load(std::memory_order_acquire);
  if (phase != kRunning && phase != kFinished) return;
  pthread_mutex_lock(&s.lock);
  locked_ = true;
  Buffer* b = &s.bufs[s.active];
  size_t need = max_bytes + (s.dropped_pending ? 11 : 0);
  if (b->used + need > s.capacity && s.phase.load() == kFinished) {
    // No writer at this point: make room by writing synchronously.
    if (timed_lock(&s.io_lock, 2)) {
      write_frame(s, *b, false);
      pthread_mutex_unlock(&s.io_lock);
    }
  }
  if (b->used + need > s.capacity) {
    ++s.dropped_pending;
    ++s.dropped_total;
    if (!s.wake_requested) {
      s.wake_requested = true;
      pthread_cond_signal(&s.wake);
    }
    return;
  }
  now_ = now_ns();
  if (b->used == 0) b->base_time = b->last_time = now_;
  if (now_ < b->last_time) now_ = b->last_time;
  if (s.dropped_pending) {
    uint8_t* p = b->data + b->used;
    p = format::put_u8(p, static_cast<uint8_t>(format::RecordType::Dropped));
    p = format::put_varint(p, s.dropped_pending);
    b->used = static_cast<size_t>(p - b->data);
    ++b->count;
    s.dropped_pending = 0;
  }
  delta_ = now_ - b->last_time;
  p_ = b->data + b->used;
}

RecordSlot::~RecordSlot() {
  if (!locked_) return;
  State& s = state();
  if (p_ && end_) {
    Buffer& b = s.bufs[s.active];
    b.used = static_cast<size_t>(end_ - b.data);
    b.count += records_;
    if (timed_) b.last_time = now_;
    s.recorded_total += records_;
    if (s.phase.load() == kFinished) {
      if (timed_lock(&s.io_lock, 2)) {
        write_frame(s, b, false);
        pthread_mutex_unlock(&s.io_lock);
      }
    } else if (b.used > s.capacity / 4 && !s.wake_requested) {
      s.wake_requested = true;
      pthread_cond_signal(&s.wake);
    }
  }
  pthread_mutex_unlock(&s.lock);
}

void recorder_finish() {
  State& s = state();
  if (s.phase.load() != kRunning && s.phase.load() != kFinished) return;
  {
    RecordSlot slot(1 + 3 * 10);
    if (slot.ok()) {
      uint8_t* p = slot.begin();
      p = format::put_u8(p, static_cast<uint8_t>(format::RecordType::ProcessExit));
      p = format::put_varint(p, slot.delta_ns());
      p = format::put_varint(p, s.recorded_total + 1);
      p = format::put_varint(p, s.dropped_total);
      slot.commit(p);
    }
  }
  // One deadline for all of it: a writer stuck on a full socket delays exit by 2 s at most.
  timespec deadline = deadline_in(2);
  if (pthread_mutex_timedlock(&s.lock, &deadline) != 0) return;
  s.stop = true;
  pthread_cond_signal(&s.wake);
  if (s.writer_alive && s.phase.load() == kRunning) {
    // The writer compresses and writes the last frame; the exiting thread only waits.
    while (!s.writer_done)
      if (pthread_cond_timedwait(&s.writer_gone, &s.lock, &deadline) == ETIMEDOUT) break;
    if (!s.writer_done) s.finish_abandoned = true;
  }
  // What is left: records made while we waited, or everything when the writer did not answer.
  if (pthread_mutex_timedlock(&s.io_lock, &deadline) == 0) {
    if (s.phase.load() != kStopped) write_frame(s, s.bufs[s.active], false);
    pthread_mutex_unlock(&s.io_lock);
  }
  if (s.phase.load() == kRunning) s.phase.store(kFinished);
  pthread_mutex_unlock(&s.lock);
}

void recorder_abandon_in_child() {
  State& s = state();
  t_tid = 0;
  int p = s.phase.load();
  if (p == kOff) return;  // never started in the parent: the child may start fresh
  s.phase.store(kStopped);
  if (s.fd >= 0) close(s.fd);  // our copy only; the parent's stream is untouched
  s.fd = -1;
}

}  // namespace vramtrace::interpose
