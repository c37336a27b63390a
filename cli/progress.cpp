// The progress bar of reading traces (see progress.h).
#include "cli/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/env_names.h"

namespace vramtrace::cli {

namespace {

constexpr auto kRedrawEvery = std::chrono::milliseconds(100);

void write_stderr(const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(2, s.data() + off, s.size() - off);
    if (n <= 0) return;  // a terminal that went away: the bar is not worth an error
    off += static_cast<size_t>(n);
  }
}

size_t terminal_columns() {
  winsize ws{};
  if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
  return 80;
}

}  // namespace

ReadProgress::Mode ReadProgress::mode_from_env(bool disabled) {
  if (disabled) return Mode::Off;
  const char* v = std::getenv(env::kProgress);
  if (!v || !*v || std::strcmp(v, "auto") == 0) return Mode::Auto;
  if (std::strcmp(v, "on") == 0 || std::strcmp(v, "1") == 0) return Mode::On;
  return Mode::Off;  // off, 0, or anything else: never a surprise bar
}

ReadProgress::ReadProgress(uint64_t total_bytes, Mode mode) : total_(total_bytes) {
  shown_ = mode != Mode::Off && total_bytes > 0 && isatty(2) == 1 &&
           (mode == Mode::On || total_bytes >= kAutoMinBytes);
  if (shown_) {
    draw();
    next_draw_ = std::chrono::steady_clock::now() + kRedrawEvery;
  }
}

void ReadProgress::add(uint64_t bytes) {
  done_ += bytes;
  if (!shown_ || finished_) return;
  auto now = std::chrono::steady_clock::now();
  if (now < next_draw_) return;
  draw();
  next_draw_ = now + kRedrawEvery;
}

void ReadProgress::finish() {
  if (!shown_ || finished_) return;
  finished_ = true;
  draw();
  write_stderr("\r" + std::string(drawn_, ' ') + "\r");
}

void ReadProgress::draw() {
  const uint64_t done = done_ < total_ ? done_ : total_;
  const int pct = static_cast<int>(done * 100 / total_);
  auto tail_of = [this](int percent, uint64_t bytes) {
    char t[64];
    std::snprintf(t, sizeof t, " %3d%%  %.1f/%.1f MiB", percent, bytes / 1048576.0,
                  total_ / 1048576.0);
    return std::string(t);
  };
  const std::string tail = tail_of(pct, done);
  const size_t widest = tail_of(100, total_).size();  // the bar keeps its width as bytes grow
  const std::string head = "vramtrace: reading traces ";
  const size_t cols = terminal_columns() - 1;  // never the last column: no line wrap
  std::string line = head;
  size_t room = cols > head.size() + widest + 2 ? cols - head.size() - widest - 2 : 0;
  if (room > 40) room = 40;
  if (room >= 5) {
    const size_t full = static_cast<size_t>(room * done / total_);
    line += "[" + std::string(full, '#') + std::string(room - full, '.') + "]";
  }
  line += tail;
  if (line.size() > cols) line.resize(cols);
  std::string out = "\r" + line;
  if (line.size() < drawn_) out += std::string(drawn_ - line.size(), ' ');
  drawn_ = line.size() > drawn_ ? line.size() : drawn_;
  write_stderr(out);
}

}  // namespace vramtrace::cli
