// The live report's HTTP server (cli/serve.h): the routes, the token and the Host check, what
// is cached; the sockets are lib/libvramtrace_http.so's (cli/http_plugin.h).
#include "cli/serve.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "report/check.h"
#include "report/html_report.h"

namespace fs = std::filesystem;

namespace vramtrace::cli {

using nlohmann::json;

namespace {

// Where the server module is: VRAMTRACE_HTTP_LIB, or next to libvramtrace.so.
std::string find_module() {
  const char* env = getenv("VRAMTRACE_HTTP_LIB");
  if (env && *env) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const std::string dir = ec ? std::string(".") : exe.parent_path().string();
  for (const char* rel : {"/../lib/libvramtrace_http.so", "/../lib/vramtrace/libvramtrace_http.so",
                          "/libvramtrace_http.so"}) {
    fs::path p = fs::path(dir + rel).lexically_normal();
    if (fs::exists(p, ec)) return p.string();
  }
  return {};
}

// 128 bits from /dev/urandom, in hex; "" when it cannot be read.
std::string random_token() {
  unsigned char b[16];
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  size_t got = 0;
  while (got < sizeof b) {
    const ssize_t n = read(fd, b + got, sizeof b - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got != sizeof b) return {};
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : b) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

// Compares in a time that does not depend on where they differ.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct Address {
  std::string host;   // numeric
  std::string given;  // as written (getnameinfo writes "::1:0" as "::0.1.0.0")
  int port = 0;
  bool v6 = false, loopback = false, any = false;
  bool bare_v6 = false;  // several ':' without brackets: an address alone, whatever ends it
};

// SPEC as `--serve=SPEC` takes it; false with the reason in `why`.
bool parse_spec(const std::string& spec, Address* out, std::string* why) {
  std::string host = "127.0.0.1", port = "0";
  if (spec.empty()) {
  } else if (std::all_of(spec.begin(), spec.end(), ::isdigit)) {
    port = spec;
  } else if (spec[0] == '[') {
    const size_t close = spec.find(']');
    if (close == std::string::npos) return *why = "'" + spec + "' has no closing ']'", false;
    host = spec.substr(1, close - 1);
    if (close + 1 < spec.size()) {
      if (spec[close + 1] != ':') return *why = "'" + spec + "': a port comes after ']:'", false;
      port = spec.substr(close + 2);
    }
  } else if (std::count(spec.begin(), spec.end(), ':') == 1) {
    host = spec.substr(0, spec.find(':'));
    port = spec.substr(spec.find(':') + 1);
    if (host.empty()) host = "127.0.0.1";
  } else {
    host = spec;  // an address alone (IPv6 ones have several ':'): any free port
    out->bare_v6 = true;
  }
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit) ||
      std::stoi(port) > 65535)
    return *why = "'" + port + "' is not a port (0 to 65535; 0: any free one)", false;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0 || !res)
    return *why = "cannot find the address '" + host + "': " + gai_strerror(rc), false;
  char numeric[NI_MAXHOST] = {};
  getnameinfo(res->ai_addr, res->ai_addrlen, numeric, sizeof numeric, nullptr, 0, NI_NUMERICHOST);
  out->host = numeric;
  out->given = host;
  out->port = std::stoi(port);
  out->v6 = res->ai_family == AF_INET6;
  if (res->ai_family == AF_INET) {
    const uint32_t a = ntohl(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
    out->loopback = (a >> 24) == 127;
    out->any = a == 0;
  } else if (res->ai_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr;
    out->loopback = IN6_IS_ADDR_LOOPBACK(&a);
    out->any = IN6_IS_ADDR_UNSPECIFIED(&a);
  }
  freeaddrinfo(res);
  return true;
}

// The page's copy of the report may fetch from its own server: the served page only (the file
// report.html keeps `default-src 'none'`), with a mark that tells it to poll.
std::string served_page(const json& report) {
  std::string html = report::to_html(report);
  const std::string csp = "default-src 'none';";
  if (size_t at = html.find(csp); at != std::string::npos)
    html.replace(at, csp.size(), "default-src 'none'; connect-src 'self';");
  const std::string charset = "<meta charset=\"utf-8\">";
  if (size_t at = html.find(charset); at != std::string::npos)
    html.insert(at + charset.size(), "\n<meta name=\"vramtrace-live\" content=\"page.json\">");
  return html;
}

constexpr const char* kHeaders =
    "Cache-Control: no-store\nX-Content-Type-Options: nosniff\nReferrer-Policy: no-referrer\n"
    "X-Frame-Options: DENY\n";

}  // namespace

std::unique_ptr<Server> Server::start(const std::string& spec, LiveReport& live, const char* who) {
  Address addr;
  std::string why;
  if (!parse_spec(spec, &addr, &why)) {
    std::cerr << who << ": --serve: " << report::printable(why) << "\n";
    return nullptr;
  }
  std::unique_ptr<Server> s(new Server(live));
  // Every address, loopback too: any user of a shared machine reaches 127.0.0.1, and the page
  // shows the command line, paths and Python lines.
  s->token_ = random_token();
  if (s->token_.empty()) {
    std::cerr << who << ": --serve: cannot read /dev/urandom for the page's token\n";
    return nullptr;
  }
  const std::string module = find_module();
  s->module_ = module.empty() ? nullptr : dlopen(module.c_str(), RTLD_NOW | RTLD_LOCAL);
  auto start =
      s->module_ ? reinterpret_cast<vt_http_start_fn>(dlsym(s->module_, "vt_http_start")) : nullptr;
  s->stop_ =
      s->module_ ? reinterpret_cast<vt_http_stop_fn>(dlsym(s->module_, "vt_http_stop")) : nullptr;
  if (!start || !s->stop_) {
    const char* err = module.empty() ? nullptr : dlerror();
    std::cerr << who << ": --serve: "
              << (module.empty() ? std::string("libvramtrace_http.so is not next to vramtrace "
                                               "(this build has no HTTP server: it needs "
                                               "libcpp-httplib-dev)")
                                 : "cannot load " + report::printable(module) + ": " +
                                       report::printable(err ? err : "no vt_http_start in it") +
                                       " (it needs cpp-httplib: apt-get install "
                                       "libcpp-httplib0.11)")
              << "\n";
    return nullptr;
  }
  char error[256] = {};
  int port = 0;
  s->server_ = start(VT_HTTP_ABI, addr.host.c_str(), addr.port, s->token_.c_str(),
                     &Server::on_request, s.get(), &port, error, sizeof error);
  if (!s->server_) {
    const std::string where =
        (addr.v6 ? "[" + addr.given + "]" : addr.given) + ":" + std::to_string(addr.port);
    std::cerr << who << ": --serve: cannot listen on " << report::printable(where) << ": "
              << report::printable(error)
              << (addr.port ? " (choose another port, or --serve alone for any free one)" : "")
              << (addr.bare_v6 ? " (an IPv6 address with a port is written [ADDRESS]:PORT, e.g. "
                                 "--serve=[::1]:8080)"
                               : "")
              << "\n";
    return nullptr;
  }
  std::string shown = addr.host;
  if (addr.any) {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) == 0 && *name) shown = name;
  }
  const std::string netloc =
      (addr.v6 && shown == addr.host ? "[" + shown + "]" : shown) + ":" + std::to_string(port);
  s->url_ = "http://" + netloc + "/?token=" + s->token_;
  if (addr.loopback) {
    const std::string p = ":" + std::to_string(port);
    s->hosts_ = {lower(addr.v6 ? "[" + addr.host + "]" + p : addr.host + p), "localhost" + p};
    s->hosts_.push_back(addr.v6 ? "[::1]" + p : "127.0.0.1" + p);
  }
  return s;
}

Server::~Server() {
  if (server_ && stop_) stop_(server_);
  // The module stays loaded: its threads are gone, and unloading buys nothing at exit.
}

void Server::on_request(void* self, const vt_http_request* request, vt_http_reply* reply,
                        vt_http_reply_fn set) {
  static_cast<Server*>(self)->handle(*request, reply, set);
}

std::shared_ptr<const json> Server::current() {
  std::lock_guard<std::mutex> lock(compute_mutex_);
  const auto t = std::chrono::steady_clock::now();
  if (current_ && (finished_ || t - last_made_ < interval_)) return current_;
  current_ = live_.now();
  const auto took = std::chrono::steady_clock::now() - t;
  interval_ = std::max<std::chrono::steady_clock::duration>(std::chrono::seconds(1), 3 * took);
  last_made_ = t;
  return current_;
}

void Server::handle(const vt_http_request& req, vt_http_reply* reply, vt_http_reply_fn set) {
  // The threads that make reports run below the job's and the collector's priority: a page
  // is never worth a slower step.
  thread_local bool lowered = false;
  if (!lowered) {
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
    lowered = true;
  }
  auto text = [&](int status, const std::string& body, const std::string& headers = "") {
    const std::string all = kHeaders + headers;
    set(reply, status, "text/plain; charset=utf-8", body.data(), body.size(), all.c_str());
  };
  // On loopback, the Host check too: a web page reaching it through DNS rebinding names
  // another host.
  if (!hosts_.empty() && std::find(hosts_.begin(), hosts_.end(), lower(req.host)) == hosts_.end())
    return text(403,
                "vramtrace: forbidden: this server answers only requests for its own "
                "address\n");
  if (!same_secret(req.token, token_))
    return text(403, "vramtrace: forbidden: this server answers only its URL, token included\n");
  const std::string method = req.method, path = req.path;
  if (method != "GET" && method != "HEAD")
    return text(405, "vramtrace: read-only: GET and HEAD only\n", "Allow: GET, HEAD\n");
  if (path != "/" && path != "/index.html" && path != "/page.json" && path != "/report.json" &&
      path != "/report.html")
    return text(404,
                "vramtrace: not found: / (the live page), /report.json, /report.html, "
                "/page.json\n");
  std::shared_ptr<const json> j;
  try {
    j = current();
  } catch (const std::exception& e) {
    return text(500,
                std::string("vramtrace: the report of this moment failed: ") + e.what() + "\n");
  }
  const bool final = j->contains("live") && (*j)["live"].value("running", true) == false;
  if (path == "/page.json" && *req.client) {
    std::lock_guard<std::mutex> lock(clients_mutex_);
    if (clients_.size() < 256 || clients_.count(req.client)) {
      Client& c = clients_[req.client];
      c.seen = std::chrono::steady_clock::now();
      c.got_final = c.got_final || final;
    }
  }
  std::lock_guard<std::mutex> lock(render_mutex_);
  if (rendered_.report != j) {
    rendered_ = Rendered{};
    rendered_.report = j;
    rendered_.etag = "\"" + std::to_string(++version_) + "\"";
  }
  Rendered& r = rendered_;
  const std::string headers = std::string(kHeaders) + "ETag: " + r.etag + "\n";
  if (r.etag == req.if_none_match) return set(reply, 304, "text/plain", "", 0, headers.c_str());
  const std::string* body = nullptr;
  const char* type = "application/json";
  if (path == "/report.json") {
    if (!r.has_json)
      r.json = j->dump(2, ' ', false, json::error_handler_t::replace) + "\n", r.has_json = true;
    body = &r.json;
  } else if (path == "/page.json") {
    if (!r.has_page_json)
      r.page_json = report::page_data(*j).dump(-1, ' ', false, json::error_handler_t::replace),
      r.has_page_json = true;
    body = &r.page_json;
  } else if (path == "/report.html") {
    if (!r.has_html) r.html = report::to_html(*j), r.has_html = true;
    body = &r.html;
    type = "text/html; charset=utf-8";
  } else {
    if (!r.has_page) r.page = served_page(*j), r.has_page = true;
    body = &r.page;
    type = "text/html; charset=utf-8";
  }
  set(reply, 200, type, body->data(), body->size(), headers.c_str());
}

void Server::linger(int max_ms, const std::function<bool()>& stop) {
  {
    std::lock_guard<std::mutex> lock(compute_mutex_);
    current_ = live_.now();
    finished_ = true;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(max_ms);
  for (;;) {
    bool waiting = false;
    {
      std::lock_guard<std::mutex> lock(clients_mutex_);
      for (const auto& [id, c] : clients_)
        waiting = waiting || (!c.got_final && start - c.seen < std::chrono::seconds(10));
    }
    if (!waiting || std::chrono::steady_clock::now() >= deadline || (stop && stop())) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace vramtrace::cli
