// A progress bar on stderr while `vramtrace report` and `vramtrace run` read large traces.
//
// Progress is the bytes read of the trace files over their total size. The bar is drawn only
// when stderr is a terminal (CI logs and pipes get nothing at all), at most 10 times a second,
// and the line is cleared when reading is done, so the summary that follows starts clean.
// When: VRAMTRACE_PROGRESS=auto (default: traces of kAutoMinBytes or more), on (any size), off;
// --no-progress is the same as off.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace vramtrace::cli {

class ReadProgress {
 public:
  enum class Mode { Auto, On, Off };
  static constexpr uint64_t kAutoMinBytes = 64ull << 20;

  // VRAMTRACE_PROGRESS, or Off when `disabled` (--no-progress).
  static Mode mode_from_env(bool disabled);

  // Draws nothing unless stderr is a terminal and `mode` asks for a bar of this size.
  ReadProgress(uint64_t total_bytes, Mode mode);
  ~ReadProgress() { finish(); }
  ReadProgress(const ReadProgress&) = delete;
  ReadProgress& operator=(const ReadProgress&) = delete;

  bool shown() const { return shown_; }
  // `bytes` more were read; redraws when the last draw is 100 ms old.
  void add(uint64_t bytes);
  // Draws the final state (100% once every byte was read), then clears the line. Idempotent.
  void finish();

 private:
  void draw();

  bool shown_ = false;
  bool finished_ = false;
  uint64_t total_ = 0;
  uint64_t done_ = 0;
  size_t drawn_ = 0;  // columns of the line drawn last, to clear it
  std::chrono::steady_clock::time_point next_draw_{};
};

}  // namespace vramtrace::cli
