// lib/libvramtrace_http.so: cpp-httplib behind cli/http_plugin.h's C interface. It routes
// nothing and decides nothing: every request goes to bin/vramtrace's handler (cli/serve.cpp).
#include "cli/http_plugin.h"

#include <httplib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

// Any local user reaches the page's address (127.0.0.1 is everyone's), so a connection earns a
// thread only by what it sends. A connection first waits, holding no thread, until its first
// request's head has come whole: within kHeadDeadline of being accepted (a deadline on the
// whole head, not on each read, which a client sending a byte at a time would renew forever),
// or it is closed. Then one whose request carries the token is served by kOwnerThreads that no
// other connection can take; any other by kGuestThreads of its own (its answer is a 403 or a
// 404), with at most kGuestQueue more waiting for them (more are closed at once). At most
// kMaxPending connections wait for their head; a new one past that closes the one that has
// waited longest, which is the nearest to its deadline (the owner's page sends its request at
// once, so only a connection that has sent nothing useful is closed).
constexpr size_t kOwnerThreads = 8;
constexpr size_t kGuestThreads = 2;
constexpr size_t kGuestQueue = 32;
constexpr size_t kMaxPending = 256;
constexpr auto kHeadDeadline = std::chrono::seconds(2);
constexpr size_t kHeadMax = 8192;  // a head longer than this is not the page's: closed
// Reads of a request once served (its body, the next request on a kept-alive connection).
constexpr time_t kReadTimeoutS = 2;

using Clock = std::chrono::steady_clock;

// Compares in a time that does not depend on where they differ.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Where a request's head ends (the blank line after its headers), npos while it has not.
size_t head_end(std::string_view head) {
  const size_t crlf = head.find("\r\n\r\n");
  const size_t lf = head.find("\n\n");
  return std::min(crlf, lf);
}

// Whether the request line of `head` carries token=TOKEN, its first "token" parameter (as the
// handler reads it, cli/serve.cpp).
bool shows_token(std::string_view head, const std::string& token) {
  if (token.empty()) return false;
  const std::string_view line = head.substr(0, head.find('\n'));
  const size_t from = line.find(' ');
  if (from == std::string_view::npos) return false;
  std::string_view target = line.substr(from + 1);
  target = target.substr(0, target.find(' '));
  target = target.substr(0, target.find('#'));
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return false;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    if (param.substr(0, 6) == "token=") return same_secret(param.substr(6), token);
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return false;
}

}  // namespace

// cpp-httplib's own Server::process_and_close_socket (it serves one connection, then closes it).
// The library keeps the function private, so it is called by its symbol in libcpp-httplib.so,
// the library this module is linked with (Itanium ABI: `this` is the first argument).
extern "C" bool vt_httplib_serve_connection(httplib::Server* server, int sock) __asm__(
    "_ZN7httplib6Server24process_and_close_socketEi");

namespace {

// cpp-httplib's accept loop hands each connection to its task queue, whose task calls
// process_and_close_socket: this server's queue runs that task at once on the accept thread,
// and the override below hands the connection to the gate (its own thread), which passes it on
// to one of the two pools once its head has come.
class GatedServer : public httplib::Server {
 public:
  explicit GatedServer(std::string token) : token_(std::move(token)) {}
  ~GatedServer() override { stop_gate(); }

  bool start_gate() {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_ < 0 || wake_ < 0) return false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_;
    if (epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev) != 0) return false;
    owner_pool_ = std::make_unique<httplib::ThreadPool>(kOwnerThreads);
    guest_pool_ = std::make_unique<httplib::ThreadPool>(kGuestThreads);
    gate_ = std::thread([this] { gate_loop(); });
    return true;
  }

  // Once the accept loop has ended (or it never ran): the connections waiting for their head
  // are closed, those handed on are served to their end (cpp-httplib ends a kept-alive one once
  // the server is stopped).
  void stop_gate() {
    if (gate_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
      }
      wake();
      gate_.join();
    }
    if (owner_pool_) owner_pool_->shutdown(), owner_pool_.reset();
    if (guest_pool_) guest_pool_->shutdown(), guest_pool_.reset();
    for (int* fd : {&epoll_, &wake_})
      if (*fd >= 0) close(*fd), *fd = -1;
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!stopping_ && gate_.joinable()) {
        arrived_.push_back(sock);
        sock = -1;
      }
    }
    if (sock >= 0) {
      close(sock);
      return false;
    }
    wake();
    return true;
  }

  void wake() {
    const uint64_t one = 1;
    ssize_t ignored = write(wake_, &one, sizeof one);
    (void)ignored;
  }

  void serve(int sock, bool owner) {
    if (owner) {
      owner_pool_->enqueue([this, sock] { vt_httplib_serve_connection(this, sock); });
      return;
    }
    if (guests_.fetch_add(1) >= kGuestThreads + kGuestQueue) {
      guests_.fetch_sub(1);
      close(sock);
      return;
    }
    guest_pool_->enqueue([this, sock] {
      vt_httplib_serve_connection(this, sock);
      guests_.fetch_sub(1);
    });
  }

  void gate_loop() {
    std::unordered_map<int, Clock::time_point> waiting;  // by socket: when it was accepted
    std::vector<char> head(kHeadMax);
    auto forget = [&](int sock) {
      epoll_ctl(epoll_, EPOLL_CTL_DEL, sock, nullptr);
      waiting.erase(sock);
    };
    // What the connection has sent so far, left in the socket for cpp-httplib to read.
    auto look = [&](int sock) {
      const ssize_t n = recv(sock, head.data(), head.size(), MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      const std::string_view got(head.data(), n > 0 ? static_cast<size_t>(n) : 0);
      const bool whole = head_end(got) != std::string_view::npos;
      if (n > 0 && !whole && got.size() < head.size()) return;  // more to come
      forget(sock);
      if (whole)
        serve(sock, shows_token(got, token_));
      else
        close(sock);  // closed by its client, failed, or a head too long
    };
    for (;;) {
      const auto now = Clock::now();
      int wait_ms = -1;
      for (auto it = waiting.begin(); it != waiting.end();) {
        if (now - it->second >= kHeadDeadline) {
          epoll_ctl(epoll_, EPOLL_CTL_DEL, it->first, nullptr);
          close(it->first);
          it = waiting.erase(it);
          continue;
        }
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(it->second + kHeadDeadline - now)
                .count() +
            1;
        wait_ms = wait_ms < 0 ? static_cast<int>(left) : std::min(wait_ms, static_cast<int>(left));
        ++it;
      }
      epoll_event events[64];
      const int n = epoll_wait(epoll_, events, 64, wait_ms);
      if (n < 0 && errno != EINTR) return;
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd != wake_) {
          if (waiting.count(fd)) look(fd);
          continue;
        }
        uint64_t count = 0;
        ssize_t ignored = read(wake_, &count, sizeof count);
        (void)ignored;
        std::vector<int> arrived;
        bool stopping = false;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          arrived.swap(arrived_);
          stopping = stopping_;
        }
        if (stopping) {
          for (int sock : arrived) close(sock);
          for (const auto& [sock, since] : waiting) close(sock);
          return;
        }
        for (int sock : arrived) {
          if (waiting.size() >= kMaxPending) {
            const auto oldest =
                std::min_element(waiting.begin(), waiting.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
            const int gone = oldest->first;
            forget(gone);
            close(gone);
          }
          // Edge-triggered: each arrival of bytes is an event, though the bytes before it are
          // still unread (they stay for cpp-httplib).
          epoll_event ev{};
          ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
          ev.data.fd = sock;
          if (epoll_ctl(epoll_, EPOLL_CTL_ADD, sock, &ev) != 0) {
            close(sock);
            continue;
          }
          waiting[sock] = Clock::now();
          look(sock);
        }
      }
    }
  }

  const std::string token_;
  int epoll_ = -1, wake_ = -1;
  std::mutex mutex_;
  std::vector<int> arrived_;  // accepted, not yet seen by the gate
  bool stopping_ = false;
  std::thread gate_;
  std::unique_ptr<httplib::ThreadPool> owner_pool_, guest_pool_;
  std::atomic<size_t> guests_{0};  // guest connections being served or waiting for a thread
};

// Runs the accept loop's task (process_and_close_socket) at once; ends the gate and its pools
// when the accept loop ends.
class Admission : public httplib::TaskQueue {
 public:
  explicit Admission(GatedServer& server) : server_(server) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override { server_.stop_gate(); }

 private:
  GatedServer& server_;
};

}  // namespace

struct vt_http_server {
  explicit vt_http_server(const char* token) : server(token ? token : "") {}
  GatedServer server;
  std::thread thread;
  int listener = -1;  // the listening socket, as cpp-httplib made it
};

namespace {

void set_reply(vt_http_reply* reply, int status, const char* content_type, const char* body,
               size_t body_len, const char* headers) {
  auto* res = reinterpret_cast<httplib::Response*>(reply);
  res->status = status;
  for (const char* p = headers ? headers : ""; *p;) {
    const char* end = std::strchr(p, '\n');
    if (!end) end = p + std::strlen(p);
    const std::string line(p, end);
    const size_t colon = line.find(':');
    const size_t value = line.find_first_not_of(' ', colon + 1);
    if (colon != std::string::npos && value != std::string::npos)
      res->set_header(line.substr(0, colon), line.substr(value));
    p = *end ? end + 1 : end;
  }
  res->set_content(body ? body : "", body_len, content_type ? content_type : "text/plain");
}

void say(char* error, size_t len, const std::string& what) {
  if (error && len) std::snprintf(error, len, "%s", what.c_str());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) vt_http_server* vt_http_start(
    int abi, const char* host, int port, const char* token, vt_http_handler_fn handler,
    void* context, int* bound_port, char* error, size_t error_len) {
  if (abi != VT_HTTP_ABI) {
    say(error, error_len, "libvramtrace_http.so is of another version of vramtrace");
    return nullptr;
  }
  auto* s = new vt_http_server(token);
  // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT on some versions, with which a
  // second server would share a port in use instead of being refused).
  s->server.set_socket_options([s](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    s->listener = sock;
  });
  // A page asks every 2 s: a connection kept open longer only delays the end (stop() waits
  // for a connection idle in keep-alive up to this long).
  s->server.set_keep_alive_timeout(1);
  s->server.set_read_timeout(kReadTimeoutS, 0);
  s->server.set_write_timeout(5, 0);
  s->server.new_task_queue = [s] { return new Admission(s->server); };
  s->server.set_pre_routing_handler(
      [handler, context](const httplib::Request& req, httplib::Response& res) {
        const std::string host = req.get_header_value("Host");
        const std::string inm = req.get_header_value("If-None-Match");
        const std::string token = req.get_param_value("token");
        const std::string client = req.get_param_value("client");
        vt_http_request r{req.method.c_str(), req.path.c_str(), host.c_str(),
                          inm.c_str(),        token.c_str(),    client.c_str()};
        handler(context, &r, reinterpret_cast<vt_http_reply*>(&res), &set_reply);
        return httplib::Server::HandlerResponse::Handled;
      });
  errno = 0;
  int bound = port;
  bool ok = false;
  if (port == 0) {
    bound = s->server.bind_to_any_port(host);
    ok = bound > 0;
  } else {
    ok = s->server.bind_to_port(host, port);
  }
  if (!ok) {
    const int err = errno;
    say(error, error_len, err ? std::strerror(err) : "cannot listen there");
    delete s;
    return nullptr;
  }
  // cpp-httplib listens with a backlog of 5: connections made while many others come (slow
  // clients that connect again when closed) would wait for the kernel's retries.
  if (s->listener >= 0) listen(s->listener, SOMAXCONN);
  if (!s->server.start_gate()) {
    say(error, error_len,
        std::string("cannot start the server's threads: ") + std::strerror(errno));
    delete s;
    return nullptr;
  }
  *bound_port = bound;
  s->thread = std::thread([s] { s->server.listen_after_bind(); });
  // stop() stops only a server that is running: vt_http_stop right after this must not find it
  // still starting.
  for (int ms = 0; ms < 1000 && !s->server.is_running(); ++ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return s;
}

extern "C" __attribute__((visibility("default"))) void vt_http_stop(vt_http_server* s) {
  if (!s) return;
  s->server.stop();
  if (s->thread.joinable()) s->thread.join();
  delete s;
}
