// lib/libvramtrace_http.so: cpp-httplib behind cli/http_plugin.h's C interface. It routes
// nothing and decides nothing: every request goes to bin/vramtrace's handler (cli/serve.cpp).
#include "cli/http_plugin.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

struct vt_http_server {
  httplib::Server server;
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
