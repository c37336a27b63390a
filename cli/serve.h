// `vramtrace run --serve[=ADDR:PORT]`: while the command runs, an HTTP server on a thread of the
// launcher serves the report of the moment (cli/live_report.h):
//   /             the report page, which polls page.json and renders itself again
//   /page.json    what the page renders (report/html_report.h's page_data of the report)
//   /report.json  the report of this moment, report.json's contract with its "live" object
//   /report.html  the page of this moment, a file to keep (it does not poll)
// Read-only: GET and HEAD only (anything else is 405), nothing it serves changes or starts
// anything. On every address it answers only requests that carry the random token of its URL
// (?token=, 128 bits from /dev/urandom: 403 without it): another user of the machine reaches
// loopback too. On a loopback address (the default, 127.0.0.1 with any free port) also only
// requests for that address (another Host header is a page of another site reaching it through
// DNS rebinding: 403). Idle reads time out, and one client address holds a few connections at
// most (cli/http_plugin.cpp).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/http_plugin.h"
#include "cli/live_report.h"

namespace vramtrace::cli {

class Server {
 public:
  // Parses SPEC ("" : 127.0.0.1:0; PORT; ADDR:PORT; [IPV6]:PORT; ADDR) and listens there. Null,
  // having said why on stderr (prefixed with `who`), when it cannot: a bad address, a port in
  // use, no libvramtrace_http.so.
  static std::unique_ptr<Server> start(const std::string& spec, LiveReport& live, const char* who);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The page's address, with its token.
  const std::string& url() const { return url_; }

  // The run has ended and `live` holds its final report: returns once every page that polled in
  // the last 10 s has fetched it, after `max_ms`, or as soon as `stop()` says so (^C). The
  // server answers until destroyed.
  void linger(int max_ms, const std::function<bool()>& stop);

 private:
  Server(LiveReport& live) : live_(live) {}
  static void on_request(void* self, const vt_http_request* request, vt_http_reply* reply,
                         vt_http_reply_fn set);
  void handle(const vt_http_request& request, vt_http_reply* reply, vt_http_reply_fn set);
  // The report to serve: the last one while it is younger than the time the one before took to
  // make (three times it, at least a second), so that a long job's launcher never spends more
  // than about a third of a core on pages; a new one otherwise.
  std::shared_ptr<const nlohmann::json> current();

  // What is served of one report, each made on first demand.
  struct Rendered {
    std::shared_ptr<const nlohmann::json> report;
    std::string etag;
    std::string page, json, page_json, html;
    bool has_page = false, has_json = false, has_page_json = false, has_html = false;
  };

  LiveReport& live_;
  void* module_ = nullptr;
  vt_http_stop_fn stop_ = nullptr;
  vt_http_server* server_ = nullptr;
  std::string url_, token_;
  std::vector<std::string> hosts_;  // Host headers a loopback server answers

  std::mutex compute_mutex_;  // one report made at a time; the others wait for it
  std::chrono::steady_clock::time_point last_made_{};
  std::chrono::steady_clock::duration interval_ = std::chrono::seconds(1);
  std::shared_ptr<const nlohmann::json> current_;
  bool finished_ = false;

  std::mutex render_mutex_;
  Rendered rendered_;
  uint64_t version_ = 0;

  // Pages that poll, by the id each gives itself: when last seen, whether they got the final
  // report (linger()).
  std::mutex clients_mutex_;
  struct Client {
    std::chrono::steady_clock::time_point seen;
    bool got_final = false;
  };
  std::map<std::string, Client> clients_;
};

}  // namespace vramtrace::cli
