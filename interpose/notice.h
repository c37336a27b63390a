// One-line notices from the preloaded library to the target's stderr.
//
// The library may say something only when it cannot do its job (no CUPTI, another profiler holds
// it, the output cannot be written); each notice is one line starting with "vramtrace:", written
// with a single write(2) so it never interleaves with the target's own output mid-line.
#pragma once

#include <string.h>
#include <unistd.h>

#include <cstdio>

namespace vramtrace::interpose {

inline void notice(const char* message) {
  char line[512];
  int n = snprintf(line, sizeof line, "vramtrace: %s\n", message);
  if (n > 0) {
    ssize_t ignored =
        write(2, line, static_cast<size_t>(n < (int)sizeof line ? n : (int)sizeof line - 1));
    (void)ignored;
  }
}

inline void notice_errno(const char* message, int err) {
  char line[512];
  snprintf(line, sizeof line, "%s (%s)", message, strerror(err));
  notice(line);
}

}  // namespace vramtrace::interpose
