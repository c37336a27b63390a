// libFuzzer target: the start-up hook's PyTorch/JAX file (collector/ingest/torch_trace.h), which
// the traced program writes and the collector reads. The input is written to a file, read, and what
// it says is classified (collector/model/torch_memory.h) and queried as report.json would: live
// blocks, categories over time, the effective limit and the remedies. Any crash, hang,
// sanitizer finding or exception other than TraceError is a bug.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "collector/analysis/diagnosis.h"
#include "collector/ingest/torch_trace.h"
#include "collector/ingest/torch_trace_reader.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/allocation.h"
#include "collector/model/torch_memory.h"

using namespace vramtrace::collector;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char path[] = "/tmp/vt-fuzz-torch-XXXXXX";
  int fd = mkstemp(path);  // 0600
  if (fd < 0) return 0;
  size_t off = 0;
  while (off < size) {
    ssize_t n = write(fd, data + off, size - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  close(fd);
  try {
    TorchTrace t = read_torch_trace(path);
    std::vector<uint32_t> devices;
    for (const auto& b : t.context.blocks) devices.push_back(b.device);
    for (const auto& [d, x] : t.context.xla) devices.push_back(d);
    TorchMemory tm(std::move(t.context));
    std::vector<uint64_t> times = {0, 1000, UINT64_MAX / 2, UINT64_MAX - 1};
    for (size_t i = 0; i < devices.size() && i < 4; ++i) {
      const uint32_t d = devices[i];
      (void)tm.series(d, times);
      for (uint64_t at : times) {
        for (size_t b : tm.live_at(d, at)) (void)tm.describe(tm.info()[b]);
        (void)categorize(tm, d, at, at, {}, nullptr);
      }
      (void)effective_limit(80ull << 30, &tm, d, 1ull << 31);
    }
    for (const auto& ph : tm.phases()) (void)tm.site_text(ph.site);
    RemedyInput in;
    in.total = 1;
    in.limit = 1;
    (void)pytorch_remedies(in);
  } catch (const TraceError&) {}
  unlink(path);
  return 0;
}
