// The interface between bin/vramtrace and lib/libvramtrace_http.so, the HTTP server of
// `vramtrace run --serve` (cli/http_plugin.cpp, built on cpp-httplib).
//
// Debian's cpp-httplib is a shared library built with OpenSSL, zlib and brotli; bin/vramtrace
// carries what it needs (static libstdc++, static elfutils) to run on hosts without them. So
// the server is a module of its own, loaded with dlopen only when --serve is given, and the two
// speak C: plain strings one way, a status and a body the other, never a C++ object. A host
// without the module or its libraries runs everything else as before, and `--serve` says why it
// cannot serve.
#pragma once

#include <stddef.h>

extern "C" {

// Bumped whenever anything below changes.
#define VT_HTTP_ABI 2

// One request, as the plugin read it. Every string is set ("" when absent) and lives for the
// handler's call only.
struct vt_http_request {
  const char* method;         // GET, HEAD, POST, ...
  const char* path;           // without the query
  const char* host;           // the Host header
  const char* if_none_match;  // the If-None-Match header
  const char* token;          // the query's "token" parameter
  const char* client;         // the query's "client" parameter (a page that polls)
};

struct vt_http_reply;
// Sets the reply (copied before it returns). `headers`: extra "Name: value\n" lines.
typedef void (*vt_http_reply_fn)(struct vt_http_reply* reply, int status, const char* content_type,
                                 const char* body, size_t body_len, const char* headers);
// Called on one of the server's threads for every request, whatever its method and path.
typedef void (*vt_http_handler_fn)(void* context, const struct vt_http_request* request,
                                   struct vt_http_reply* reply, vt_http_reply_fn set_reply);

struct vt_http_server;
// Listens on host:port (a numeric address; port 0: any free one) and serves every request
// with `handler` on a thread of its own until vt_http_stop. `token` is the secret the handler
// asks for: the server only schedules by it (a connection whose first request carries it is
// served by threads that no other connection can take), the handler still decides. Returns
// null, with the reason in `error`, when it cannot listen; `*bound_port` is the port it listens
// on.
typedef struct vt_http_server* (*vt_http_start_fn)(int abi, const char* host, int port,
                                                   const char* token, vt_http_handler_fn handler,
                                                   void* context, int* bound_port, char* error,
                                                   size_t error_len);
// Stops listening, waits for the requests being served, frees the server.
typedef void (*vt_http_stop_fn)(struct vt_http_server* server);

}  // extern "C"
