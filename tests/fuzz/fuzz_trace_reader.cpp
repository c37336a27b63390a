// libFuzzer target: traces as the collector gets them from files or sockets (never trusted).
// The input is one trace, or several concatenated (split where a trace's 8-byte magic starts
// again, at most 8): the processes of one run, so that what needs two processes (ranks sorted,
// the worst rank, devices shared by processes) is reached too. Decodes them
// (TraceReader::from_bytes), rebuilds the model (collector::analyze) and renders it
// (report::to_json, summary_text, to_html). Any crash, hang, sanitizer finding or exception other
// than TraceError (what the reader throws for input that is not a trace) is a bug.
//
// A trace of format version 2 on has each frame's checksum made again before it is read (a
// mutated frame would otherwise fail it, and the fuzzer would never reach the records); the
// unit tests check that a frame whose checksum fails is refused.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "collector/ingest/frames.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "common/format.h"
#include "report/html_report.h"
#include "report/json_report.h"

using namespace vramtrace;

namespace {

// Each whole frame's checksum made right, in a trace whose version has one.
void reseal(std::vector<uint8_t>& t) {
  format::FileHeader fh{};
  if (t.size() < sizeof fh) return;
  std::memcpy(&fh, t.data(), sizeof fh);
  const uint32_t bytes = format::frame_checksum_bytes(fh.version);
  if (!bytes || fh.header_bytes != sizeof fh) return;
  collector::walk_frames(
      t.data(), t.size(), [&t, bytes](const collector::FrameAt& f, const uint8_t*) {
        if (f.header.stored_bytes < bytes) return false;
        const uint32_t n = f.header.stored_bytes - bytes;
        const uint32_t sum = format::frame_checksum(f.header, t.data() + f.payload(), n);
        std::memcpy(t.data() + f.payload() + n, &sum, sizeof sum);
        return true;
      });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kMagicBytes = sizeof format::kMagic;
  std::vector<size_t> starts{0};
  for (size_t at = 1; starts.size() < 8 && at + kMagicBytes <= size; ++at) {
    const uint8_t* p =
        std::search(data + at, data + size, format::kMagic, format::kMagic + kMagicBytes);
    if (p == data + size) break;
    at = static_cast<size_t>(p - data);
    starts.push_back(at);
  }
  starts.push_back(size);
  std::vector<std::unique_ptr<collector::TraceReader>> readers;
  for (size_t i = 0; i + 1 < starts.size(); ++i) {
    try {
      std::vector<uint8_t> trace(data + starts[i], data + starts[i + 1]);
      reseal(trace);
      readers.push_back(collector::TraceReader::from_bytes(std::move(trace), "fuzz"));
    } catch (const collector::TraceError&) {
      if (i == 0) return 0;  // not a trace at all
    }
  }
  collector::Run run = collector::model_of(std::move(readers));
  nlohmann::json j = report::to_json(run);
  std::string text = report::summary_text(j);
  std::string page = report::to_html(j);
  std::string file = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)text;
  (void)page;
  (void)file;
  return 0;
}
