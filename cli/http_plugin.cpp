// lib/libvramtrace_http.so: cpp-httplib behind cli/http_plugin.h's C interface. It routes
// nothing and decides nothing: every request goes to bin/vramtrace's handler (cli/serve.cpp).
#include "cli/http_plugin.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace {

// The threads that serve connections, and how many of them one client address may hold: a
// client that opens idle connections (half-open, or sending a byte at a time) can take at most
// kPerClient of the kThreads; more from it are closed at once. Idle reads time out after
// kReadTimeoutS (a page asks every 2 s and sends its request at once).
constexpr size_t kThreads = 16;
constexpr int kPerClient = 6;
constexpr time_t kReadTimeoutS = 2;

std::string peer_of(int sock) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return {};
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof text);
  else if (addr.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof text);
  return text;
}

}  // namespace

// cpp-httplib's own Server::process_and_close_socket (it serves one connection, then closes it).
// The override below counts connections by client before handing them on; the library keeps
// the function private, so it is called by its symbol in libcpp-httplib.so, the library this
// module is linked with (Itanium ABI: `this` is the first argument).
extern "C" bool vt_httplib_serve_connection(httplib::Server* server, int sock) __asm__(
    "_ZN7httplib6Server24process_and_close_socketEi");

namespace {

class CappedServer : public httplib::Server {
 private:
  bool process_and_close_socket(socket_t sock) override {
    const std::string peer = peer_of(sock);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (open_[peer] >= kPerClient) {
        shutdown(sock, SHUT_RDWR);
        close(sock);
        return false;
      }
      ++open_[peer];
    }
    const bool ok = vt_httplib_serve_connection(this, sock);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--open_[peer] == 0) open_.erase(peer);
    return ok;
  }

  std::mutex mutex_;
  std::map<std::string, int> open_;  // connections being served, by client address
};

}  // namespace

struct vt_http_server {
  CappedServer server;
  std::thread thread;
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
    int abi, const char* host, int port, vt_http_handler_fn handler, void* context, int* bound_port,
    char* error, size_t error_len) {
  if (abi != VT_HTTP_ABI) {
    say(error, error_len, "libvramtrace_http.so is of another version of vramtrace");
    return nullptr;
  }
  auto* s = new vt_http_server;
  // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT on some versions, with which a
  // second server would share a port in use instead of being refused).
  s->server.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // A page asks every 2 s: a connection kept open longer only delays the end (stop() waits
  // for a connection idle in keep-alive up to this long).
  s->server.set_keep_alive_timeout(1);
  s->server.set_read_timeout(kReadTimeoutS, 0);
  s->server.set_write_timeout(5, 0);
  s->server.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
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
  *bound_port = bound;
  s->thread = std::thread([s] { s->server.listen_after_bind(); });
  return s;
}

extern "C" __attribute__((visibility("default"))) void vt_http_stop(vt_http_server* s) {
  if (!s) return;
  s->server.stop();
  if (s->thread.joinable()) s->thread.join();
  delete s;
}
