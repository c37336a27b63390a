// libFuzzer target: what the collector reads back from a dead process (collector/
// shared_recovery.h). The input is the stream the collector received, then, from the first
// "VTSHBUF1" on, the shared region as the process left it (common/shared_buffers.h); no region
// when there is none. The stream is fed to StreamPosition in pieces of 1 to 64 bytes (the
// input's last byte says which: how reads split a stream must not matter), the region is
// recovered into the trace, and the trace that results is read, analyzed and rendered as a
// report. Any crash, hang, sanitizer finding or exception other than TraceError is a bug.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collector/ingest/shared_recovery.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "report/json_report.h"

using namespace vramtrace;

namespace {

struct Files {
  std::string out, shared;
  Files() {
    out = make("/tmp/vt-fuzz-recovery-out-XXXXXX");
    shared = make("/tmp/vt-fuzz-recovery-shm-XXXXXX");
  }
  ~Files() {
    unlink(out.c_str());
    unlink(shared.c_str());
  }
  static std::string make(const char* templ) {
    std::string t = templ;
    int fd = mkstemp(t.data());  // 0600
    if (fd < 0) abort();
    close(fd);
    return t;
  }
};

Files& files() {
  static Files f;
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Files& f = files();
  const uint8_t* magic = reinterpret_cast<const uint8_t*>(format::kSharedMagic);
  const uint8_t* region = std::search(data, data + size, magic, magic + 8);
  const size_t stream_bytes = static_cast<size_t>(region - data);
  const size_t piece = size ? 1 + data[size - 1] % 64 : 1;

  int out = open(f.out.c_str(), O_RDWR | O_TRUNC | O_CLOEXEC);
  int shared = open(f.shared.c_str(), O_RDWR | O_TRUNC | O_CLOEXEC);
  if (out < 0 || shared < 0) abort();
  collector::StreamPosition pos;
  if (!collector::write_all_fd(out, data, stream_bytes)) abort();
  for (size_t at = 0; at < stream_bytes; at += piece)
    pos.feed(data + at, std::min(piece, stream_bytes - at));
  if (region != data + size) {
    if (!collector::write_all_fd(shared, region, static_cast<size_t>(data + size - region)))
      abort();
    collector::recover_unsent(shared, out, pos);
  }
  close(out);
  close(shared);
  try {
    std::vector<std::unique_ptr<collector::TraceReader>> readers;
    readers.push_back(std::make_unique<collector::TraceReader>(f.out));
    collector::Run run = collector::model_of(std::move(readers));
    nlohmann::json j = report::to_json(run);
    std::string text = report::summary_text(j);
    (void)text;
  } catch (const collector::TraceError&) {}
  return 0;
}
