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
//
// Nothing lost at death. Under the launcher the two buffers live in a memfd that the collector
// also holds (common/shared_buffers.h): what was recorded but not yet sent is read by the
// collector after the process is gone, whatever killed it; each record costs one more store, no
// system call. Without it (file mode, or no memfd), a failed allocation is written out at once,
// and a fatal signal left at its default (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP,
// SIGSYS, SIGPIPE) or with a handler of the program installed before CUDA started first writes
// what is buffered, then gets its previous disposition back and is delivered as before. What
// cannot be caught (SIGKILL, _exit, a handler the program installs later) loses at most the
// events of the last flush period.
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
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "common/shared_buffers.h"
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
  // The region shared with the collector (launcher mode), or null.
  format::SharedControl* ctl = nullptr;
  void* shared_base = nullptr;
  size_t shared_bytes = 0;
  uint64_t frames_sent = 0;  // complete frames written (under io_lock): the next frame's number
  uint64_t epoch = 0;        // under lock
};

// Leaked on purpose: it must outlive every destructor that may still free device memory.
State& state() {
  static State* s = new State();
  return *s;
}

// A store the collector may read after the process died at any instruction: release order, so
// that the bytes of a record are in memory before the count that covers them.
inline void shared_store(uint64_t* field, uint64_t v) {
  __atomic_store_n(field, v, __ATOMIC_RELEASE);
}

inline void publish_used(State& s, int i) {
  if (s.ctl)
    shared_store(&s.ctl->buffers[i].used_count,
                 format::pack_used_count(s.bufs[i].used, s.bufs[i].count));
}

// Empties a buffer that was written (or dropped); one that stays the buffer being filled starts
// a new epoch, since what it holds next comes after everything written so far.
void reset_buffer(State& s, Buffer& b, bool still_active) {
  b.used = 0;
  b.count = 0;
  if (!s.ctl) return;
  const int i = static_cast<int>(&b - s.bufs);
  publish_used(s, i);
  if (still_active) shared_store(&s.ctl->buffers[i].epoch, ++s.epoch);
  shared_store(&s.ctl->buffers[i].sending, 0);
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

// `pass_fd` (>= 0, sockets only) goes with the first bytes sent, as SCM_RIGHTS.
bool write_all(int fd, bool is_socket, iovec* iov, int iovcnt, int pass_fd = -1) {
  while (iovcnt > 0) {
    ssize_t n;
    if (is_socket) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(iovcnt);
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
      if (pass_fd >= 0) {
        memset(control, 0, sizeof control);
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
      }
      n = sendmsg(fd, &msg, MSG_NOSIGNAL);
      if (n >= 0) pass_fd = -1;
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
// and it makes the frame smaller; on failure recording stops, with one notice. `still_active`:
// the buffer stays the one being filled (the caller holds lock too).
void write_frame(State& s, Buffer& b, bool compress, bool still_active) {
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
  h.raw_bytes = static_cast<uint32_t>(b.used);
  h.record_count = b.count;
  h.base_time_ns = b.base_time;
  uint32_t sum = format::seal_frame(h, payload, stored);  // the frame's checksum, written last
  iovec iov[3] = {{&h, sizeof h}, {payload, stored}, {&sum, sizeof sum}};
  if (s.ctl) shared_store(&s.ctl->buffers[&b - s.bufs].sending, 1 + s.frames_sent);
  if (!write_all(s.fd, s.is_socket, iov, 3)) {
    int err = errno;
    s.phase.store(kStopped);
    notice_errno("cannot write the trace; recording stopped", err);
  } else {
    ++s.frames_sent;
  }
  reset_buffer(s, b, still_active);
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
      s.active ^= 1;  // the other one was emptied when it was written
      if (s.ctl) shared_store(&s.ctl->buffers[s.active].epoch, ++s.epoch);
    }
    pthread_mutex_unlock(&s.lock);
    if (full) {
      pthread_mutex_lock(&s.io_lock);
      // Unless a synchronous flush (a failed allocation, a fatal signal) wrote it meanwhile.
      if (s.phase.load() == kRunning) write_frame(s, *full, true, false);
      if (full->used) reset_buffer(s, *full, false);
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
void output_path(const char* pattern, char* out, size_t n) {
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

// A new file beside PATH, the trace file another process (or run) already holds: NAME.<pid>.vtrace
// for NAME.vtrace (NAME.<pid> for a name without that suffix), then NAME.<pid>-2.vtrace and on
// while those exist. Rewrites PATH to the name taken and says so; -1 when none could be created.
int open_beside(char* path, size_t n) {
  char asked[4096];
  snprintf(asked, sizeof asked, "%s", path);
  const size_t len = strlen(asked);
  const char* suffix = ".vtrace";
  const size_t slen = strlen(suffix);
  const bool has_suffix = len > slen && strcmp(asked + len - slen, suffix) == 0;
  const int stem = static_cast<int>(has_suffix ? len - slen : len);
  for (int k = 1; k <= 100; ++k) {
    char tag[32];
    if (k == 1)
      snprintf(tag, sizeof tag, ".%d", static_cast<int>(getpid()));
    else
      snprintf(tag, sizeof tag, ".%d-%d", static_cast<int>(getpid()), k);
    int w = snprintf(path, n, "%.*s%s%s", stem, asked, tag, has_suffix ? suffix : "");
    if (w < 0 || static_cast<size_t>(w) >= n) break;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      char why[512];
      snprintf(why, sizeof why, "%.200s exists; this process's trace is %.200s", asked, path);
      notice(why);
      return fd;
    }
    if (errno != EEXIST) return -1;
  }
  errno = EEXIST;
  return -1;
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
    if (b.data && !s.shared_base) munmap(b.data, s.capacity);
    b.data = nullptr;
  }
  if (s.shared_base) munmap(s.shared_base, s.shared_bytes);
  s.shared_base = nullptr;
  s.ctl = nullptr;
  s.phase.store(kStopped);
}

// The buffers in a memfd for the collector (see common/shared_buffers.h); returns the memfd, or
// -1 when there is none (the buffers are then private). Through syscall(): memfd_create needs
// glibc 2.27 as a function, and the library runs on older ones.
int map_shared_buffers(State& s) {
#ifdef SYS_memfd_create
  int mfd = static_cast<int>(syscall(SYS_memfd_create, "vramtrace-events", 1u /* MFD_CLOEXEC */));
  if (mfd < 0) return -1;
  const size_t bytes = format::kSharedDataOffset + 2 * s.capacity;
  void* m = MAP_FAILED;
  if (ftruncate(mfd, static_cast<off_t>(bytes)) == 0)
    m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  if (m == MAP_FAILED) {
    close(mfd);
    return -1;
  }
  // A forked child neither records nor may scribble on its parent's buffers.
  madvise(m, bytes, MADV_DONTFORK);
  s.shared_base = m;
  s.shared_bytes = bytes;
  s.ctl = static_cast<format::SharedControl*>(m);
  memcpy(s.ctl->magic, format::kSharedMagic, sizeof s.ctl->magic);
  s.ctl->version = format::kSharedVersion;
  s.ctl->buffer_count = 2;
  s.ctl->capacity = s.capacity;
  for (int i = 0; i < 2; ++i)
    s.bufs[i].data = static_cast<uint8_t*>(m) + format::kSharedDataOffset + i * s.capacity;
  s.ctl->buffers[s.active].epoch = ++s.epoch;
  return mfd;
#else
  (void)s;
  return -1;
#endif
}

// Writes both buffers, the older first, raw, in the calling thread. Caller holds lock and
// io_lock. The other buffer holds events only when the writer took it and has not written it
// yet: it finds it empty afterwards.
void flush_both(State& s) {
  write_frame(s, s.bufs[s.active ^ 1], false, false);
  write_frame(s, s.bufs[s.active], false, true);
}

// ---- the crash path (no shared buffers) ------------------------------------------------------

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS,  SIGFPE, SIGILL,
                                 SIGABRT, SIGTRAP, SIGSYS, SIGPIPE};
struct sigaction g_previous[NSIG];

// In a signal handler: only trylock, and a bounded wait for a writer in the middle of a frame.
void crash_flush() {
  State& s = state();
  int phase = s.phase.load();
  if ((phase != kRunning && phase != kFinished) || s.ctl) return;
  if (pthread_mutex_trylock(&s.lock) != 0) return;  // this thread died inside the recorder
  for (int i = 0; i < 200; ++i) {                   // 200 ms at most
    if (pthread_mutex_trylock(&s.io_lock) == 0) {
      if (s.phase.load() != kStopped) flush_both(s);
      pthread_mutex_unlock(&s.io_lock);
      break;
    }
    timespec ms{0, 1'000'000};
    nanosleep(&ms, nullptr);
  }
  pthread_mutex_unlock(&s.lock);
}

void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  int saved = errno;
  crash_flush();
  // From now on the signal is the program's again, as if vramtrace had never been there.
  sigaction(sig, &g_previous[sig], nullptr);
  const struct sigaction& prev = g_previous[sig];
  errno = saved;
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // Default action: a fault (SIGSEGV at an address) happens again when we return; a signal sent
  // by kill, raise or abort (si_code <= 0), or SIGPIPE, is sent again and delivered on return.
  if (info == nullptr || info->si_code <= 0 || sig == SIGPIPE) raise(sig);
}

// For each fatal signal at its default action or with a handler of the program: ours first. An
// ignored one stays ignored.
void install_crash_handlers() {
  for (int sig : kFatalSignals) {
    struct sigaction cur {};
    if (sigaction(sig, nullptr, &cur) != 0) continue;
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) continue;
    // The program's own handler keeps its mask and flags (restarted system calls, its
    // alternate stack) while ours runs first.
    const bool program_handler =
        (cur.sa_flags & SA_SIGINFO) ? cur.sa_sigaction != nullptr : cur.sa_handler != SIG_DFL;
    struct sigaction ours {};
    ours.sa_sigaction = on_fatal_signal;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK |
                    (program_handler ? cur.sa_flags & (SA_RESTART | SA_NODEFER) : SA_RESTART);
    ours.sa_mask = cur.sa_mask;
    if (!program_handler) sigemptyset(&ours.sa_mask);
    g_previous[sig] = cur;
    sigaction(sig, &ours, nullptr);
  }
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

namespace {

// Opens where the trace goes: the collector's socket (options.socket), or the trace file, in
// `path` (of `path_size` bytes). False, said and the recorder stopped, when it cannot; `created`:
// the trace file this process created, removed if what follows fails.
bool open_output(State& s, const Options& options, char* path, size_t path_size,
                 const char** created) {
  const char* sock = options.socket;
  if (sock && *sock) {
    s.fd = open_socket(sock);
    s.is_socket = true;
    if (s.fd < 0) {
      notice_errno("cannot connect to the vramtrace collector; this process is not profiled",
                   errno);
      s.phase.store(kStopped);
      return false;
    }
  } else {
    output_path(options.output, path, path_size);
    // O_EXCL first, to know whether the file is ours to remove if what follows fails.
    s.fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (s.fd >= 0) {
      *created = path;
    } else if (errno == EEXIST) {
      struct stat st;
      if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        // A trace that is already there (another process of the tree given the same name, a
        // name without %p, an earlier run's) is kept: this process writes its own beside it.
        s.fd = open_beside(path, path_size);
        if (s.fd >= 0) *created = path;
      } else {  // a device or a FIFO (/dev/null, a pipe to a reader); a symlink is refused
        s.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
      }
    }
    if (s.fd < 0) {
      notice_errno("cannot create the trace file; this process is not profiled", errno);
      s.phase.store(kStopped);
      return false;
    }
  }
  return true;
}

// Writes the file header, on a socket with the shared buffers' descriptor (`shared_fd`, -1:
// none) when it is accepted. Whether it was written (errno says why not).
bool send_header(State& s, int shared_fd) {
  format::FileHeader fh{};
  memcpy(fh.magic, format::kMagic, sizeof fh.magic);
  fh.version = format::kFormatVersion;
  fh.header_bytes = sizeof fh;
  iovec iov{&fh, sizeof fh};
  // The collector gets the shared buffers with the stream's first bytes; it keeps its own copy
  // of the descriptor, ours is not needed once the region is mapped.
  bool header_sent = write_all(s.fd, s.is_socket, &iov, 1, shared_fd);
  if (!header_sent && shared_fd >= 0) {
    // Descriptors refused on this socket (a security module, say): the stream without them, the
    // buffers then unread by the collector.
    s.ctl = nullptr;
    iov = {&fh, sizeof fh};
    header_sent = write_all(s.fd, s.is_socket, &iov, 1);
  }
  return header_sent;
}

}  // namespace

bool recorder_start(const Options& options) {
  State& s = state();
  if (s.phase.load() != kOff) return recorder_running();

  char path[4096];
  const char* created = nullptr;  // the trace file this process created, removed on failure
  if (!open_output(s, options, path, sizeof path, &created)) return false;

  // A buffer is written as one frame, and the reader refuses frames larger than kMaxFrameBytes.
  s.capacity = options.buffer_bytes;
  s.flush_interval_ns = options.flush_interval_ns;
  const int shared_fd = s.is_socket ? map_shared_buffers(s) : -1;
  for (Buffer& b : s.bufs) {
    if (b.data) continue;  // in the shared region
    void* m = mmap(nullptr, s.capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      notice_errno("cannot map the event buffer; this process is not profiled", errno);
      discard_output(s, created);
      return false;
    }
    b.data = static_cast<uint8_t*>(m);
  }

  const bool header_sent = send_header(s, shared_fd);
  const int header_errno = errno;
  if (shared_fd >= 0) close(shared_fd);
  if (!header_sent) {
    notice_errno("cannot write the trace; this process is not profiled", header_errno);
    discard_output(s, created);
    return false;
  }

  // After the header (a stream is a trace as soon as it exists), in the thread that runs cuInit
  // (where CUPTI is dlopen'd next), not in the writer: the codec is known before the first frame,
  // and the module map sent next already holds libzstd.
  s.zstd.load(options.compress, options.zstd_lib);
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
  if (!s.ctl) install_crash_handlers();
  return true;
}

void recorder_flush_failure() {
  State& s = state();
  if (s.phase.load() != kRunning) return;  // otherwise every record is written at once
  pthread_mutex_lock(&s.lock);
  if (s.ctl) {
    // The collector reads the shared buffers after any death: only hurry the writer.
    if (!s.wake_requested) {
      s.wake_requested = true;
      pthread_cond_signal(&s.wake);
    }
  } else if (timed_lock(&s.io_lock, 2)) {
    if (s.phase.load() == kRunning) flush_both(s);
    pthread_mutex_unlock(&s.io_lock);
  }
  pthread_mutex_unlock(&s.lock);
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
      write_frame(s, *b, false, true);
      pthread_mutex_unlock(&s.io_lock);
    }
  }
  if (b->used + need > s.capacity) {
    ++s.dropped_pending;
    ++s.dropped_total;
    if (s.ctl) shared_store(&s.ctl->dropped_pending, s.dropped_pending);
    if (!s.wake_requested) {
      s.wake_requested = true;
      pthread_cond_signal(&s.wake);
    }
    return;
  }
  now_ = now_ns();
  if (b->used == 0) {
    b->base_time = b->last_time = now_;
    if (s.ctl) shared_store(&s.ctl->buffers[s.active].base_time_ns, now_);
  }
  if (now_ < b->last_time) now_ = b->last_time;
  if (s.dropped_pending) {
    uint8_t* p = b->data + b->used;
    p = format::put(p, format::rec::Dropped{s.dropped_pending});
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
    if (s.ctl) {
      publish_used(s, s.active);
      // A Dropped record this slot wrote is now in the buffer: the count is no longer pending.
      if (s.ctl->dropped_pending != s.dropped_pending)
        shared_store(&s.ctl->dropped_pending, s.dropped_pending);
    }
    if (timed_) b.last_time = now_;
    s.recorded_total += records_;
    if (s.phase.load() == kFinished) {
      if (timed_lock(&s.io_lock, 2)) {
        write_frame(s, b, false, true);
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
    RecordSlot slot(format::max_fixed_bytes<format::rec::ProcessExit>());
    if (slot.ok())
      slot.commit(format::put(slot.begin(),
                              format::rec::ProcessExit{s.recorded_total + 1, s.dropped_total},
                              slot.delta_ns()));
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
    if (s.phase.load() != kStopped) flush_both(s);
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
  // The shared buffers were not inherited (MADV_DONTFORK).
  s.ctl = nullptr;
  for (Buffer& b : s.bufs)
    if (s.shared_base) b.data = nullptr;
  s.shared_base = nullptr;
}

}  // namespace vramtrace::interpose
