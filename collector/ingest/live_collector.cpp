// The collector's socket server (see live_collector.h).
#include "collector/ingest/live_collector.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>

#include "collector/ingest/shared_recovery.h"

namespace vramtrace::collector {

namespace {

long long now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

std::runtime_error sys_error(const std::string& what) {
  return std::runtime_error(what + ": " + std::strerror(errno));
}

struct Connection {
  int fd = -1;
  int out = -1;
  int shared = -1;  // the process's shared event buffers (common/shared_buffers.h), or -1
  StreamPosition pos;
  std::string path;  // its trace file
};

// Appends bytes received from the stream to its trace and follows its frames; a failed write
// (disk full) leaves the position broken, so that nothing is recovered or cut after it.
void store(Connection& c, const char* data, size_t n) {
  if (write_all_fd(c.out, data, n))
    c.pos.feed(reinterpret_cast<const uint8_t*>(data), n);
  else
    c.pos.broken = true;
}

void close_connection(Connection& c) {
  if (c.shared >= 0) recover_unsent(c.shared, c.out, c.pos);
  close(c.fd);
  close(c.out);
  if (c.shared >= 0) close(c.shared);
}

// Reads what a still-connected process has sent so far (the bytes queued in the socket when
// called, never waiting for more) and leaves its trace file at the end of its last whole frame.
void drain_sent(Connection& c, std::vector<char>& buf) {
  int queued = 0;
  if (ioctl(c.fd, FIONREAD, &queued) != 0) queued = 0;
  for (size_t left = static_cast<size_t>(std::max(queued, 0)); left > 0 && !c.pos.broken;) {
    ssize_t got = recv(c.fd, buf.data(), std::min(left, buf.size()), MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    store(c, buf.data(), static_cast<size_t>(got));
    left -= static_cast<size_t>(got);
  }
  if (!c.pos.broken && c.pos.header_done && c.pos.written > c.pos.boundary) {
    if (ftruncate(c.out, static_cast<off_t>(c.pos.boundary)) == 0) c.pos.written = c.pos.boundary;
  }
}

// Creates the trace file of a new stream from `pid` (the `serial`-th connection when the peer's
// pid is unknown) in `out_dir`; its descriptor, or -1. A second stream from one pid (a process
// that exec'd another CUDA program, a pid used again) gets a file of its own: the first stream's
// trace is never overwritten.
int create_trace_file(const std::string& out_dir, int pid, int serial, std::string* path) {
  const std::string base = out_dir + "/vramtrace." + std::to_string(pid ? pid : 1000000 + serial);
  *path = base + ".vtrace";
  int out = open(path->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  for (int k = 2; out < 0 && errno == EEXIST && k < 10000; ++k) {
    *path = base + "-" + std::to_string(k) + ".vtrace";
    out = open(path->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  }
  return out;
}

// Receives what a stream sent into `buf`: recvmsg's result. The stream's first message brings
// the process's shared buffers (SCM_RIGHTS), kept in `c.shared`.
ssize_t receive(Connection& c, std::vector<char>& buf) {
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t got = recvmsg(c.fd, &msg, MSG_CMSG_CLOEXEC);
  if (got < 0) return got;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < n; ++k) {
      int passed;
      std::memcpy(&passed, CMSG_DATA(cm) + k * sizeof(int), sizeof passed);
      if (c.shared < 0 && c.pos.written == 0)
        c.shared = passed;
      else
        close(passed);  // one region per stream, sent with its first bytes
    }
  }
  return got;
}

}  // namespace

LiveCollector::LiveCollector(std::string out_dir) : out_dir_(std::move(out_dir)) {
  const char* tmp = getenv("TMPDIR");
  std::string base = (tmp && *tmp && std::strlen(tmp) < 60) ? tmp : "/tmp";
  std::string templ = base + "/vramtrace-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw sys_error("cannot create a private directory in " + base);
  socket_dir_ = buf.data();  // mkdtemp makes it 0700
  socket_path_ = socket_dir_ + "/collector.sock";

  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw sys_error("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path_.c_str(), sizeof addr.sun_path - 1);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw sys_error("cannot bind " + socket_path_);
  chmod(socket_path_.c_str(), 0600);
  if (listen(listen_fd_, 128) != 0) throw sys_error("listen");
  if (pipe2(wake_pipe_, O_CLOEXEC) != 0) throw sys_error("pipe");
  thread_ = std::thread([this] { serve(); });
}

LiveCollector::~LiveCollector() {
  if (thread_.joinable()) finish(0);
  if (listen_fd_ >= 0) close(listen_fd_);
  for (int fd : wake_pipe_)
    if (fd >= 0) close(fd);
  unlink(socket_path_.c_str());
  rmdir(socket_dir_.c_str());
}

void LiveCollector::serve() {
  std::map<int, Connection> conns;
  std::vector<char> buf(1 << 20);
  for (;;) {
    if (finishing_.load() && (conns.empty() || now_ms() >= deadline_ms_.load())) {
      // A process that connected and exited just before the command ended may still wait in
      // the listen backlog, its stream in the socket buffer: accept it before stopping.
      pollfd pending{listen_fd_, POLLIN, 0};
      if (now_ms() >= deadline_ms_.load() || poll(&pending, 1, 0) <= 0 ||
          !(pending.revents & POLLIN))
        break;
    }
    std::vector<pollfd> fds;
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    for (auto& [fd, c] : conns) fds.push_back({fd, POLLIN, 0});
    int timeout = finishing_.load() ? 50 : 500;
    int n = poll(fds.data(), fds.size(), timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents & POLLIN) {
      char drain[64];
      ssize_t ignored = read(wake_pipe_[0], drain, sizeof drain);
      (void)ignored;
    }
    if (fds[0].revents & POLLIN) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        ucred cred{};
        socklen_t len = sizeof cred;
        int pid = 0;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) pid = cred.pid;
        std::string path;
        const int out = create_trace_file(out_dir_, pid, connections_.fetch_add(1), &path);
        if (out < 0) {
          close(fd);
        } else {
          Connection& c = conns[fd];
          c.fd = fd;
          c.out = out;
          c.path = path;
          files_.push_back(path);
          {
            std::lock_guard<std::mutex> lock(open_mutex_);
            open_paths_.insert(path);
          }
          open_.fetch_add(1);
        }
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Connection& c = conns[fds[i].fd];
      const ssize_t got = receive(c, buf);
      if (got > 0) {
        store(c, buf.data(), static_cast<size_t>(got));  // broken: still drained, never blocks
        continue;
      }
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      close_connection(c);
      {
        std::lock_guard<std::mutex> lock(open_mutex_);
        open_paths_.erase(c.path);
      }
      conns.erase(fds[i].fd);
      open_.fetch_sub(1);
    }
  }
  for (auto& [fd, c] : conns) {
    // Still connected when the launcher stops waiting: the process lives on, and its shared
    // buffers are not read (it may be writing them). What it sent is kept: the bytes already in
    // the socket, up to the last whole frame (the report of a process still running is a
    // snapshot, and a frame cut off there would read as a damaged trace).
    drain_sent(c, buf);
    still_open_.push_back(c.path);
    close(c.fd);
    close(c.out);
    if (c.shared >= 0) close(c.shared);
  }
}

std::vector<std::string> LiveCollector::open_traces() const {
  std::lock_guard<std::mutex> lock(open_mutex_);
  return {open_paths_.begin(), open_paths_.end()};
}

std::vector<std::string> LiveCollector::finish(int grace_ms) {
  deadline_ms_.store(now_ms() + grace_ms);
  finishing_.store(true);
  if (wake_pipe_[1] >= 0) {
    ssize_t ignored = write(wake_pipe_[1], "x", 1);
    (void)ignored;
  }
  if (thread_.joinable()) thread_.join();
  // A process killed between connecting and sending its stream header left an empty file: it is
  // no trace (`vramtrace report DIR` would refuse it) and held no event.
  std::vector<std::string> traces;
  for (const auto& path : files_) {
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && st.st_size == 0)
      unlink(path.c_str());
    else
      traces.push_back(path);
  }
  files_ = traces;
  return files_;
}

}  // namespace vramtrace::collector
