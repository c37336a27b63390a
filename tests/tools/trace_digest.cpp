// Prints what the collector makes of traces, in a text that does not depend on how the code
// that decodes them is written: one line per decoded record (its type, time and named fields,
// strings escaped), the reader's verdict, then report.json of the model built from them. Two
// builds that print the same digest for an input decode it the same and report it the same;
// tests/tools/same_records.sh compares two builds this way over the fuzz corpora and e2e traces.
//   vt_trace_digest trace FILE...   a trace, or several concatenated (as the trace_reader fuzz
//                                   target splits them, at each magic, at most 8)
//   vt_trace_digest torch FILE...   a PyTorch allocator trace (torch_trace.cpp's records)
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "collector/ingest/torch_trace.h"
#include "collector/ingest/torch_trace_reader.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "common/format.h"
#include "common/record_text.h"
#include "report/json_report.h"

using namespace vramtrace;
using format::RecordType;

namespace {

std::vector<uint8_t> slurp(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void print_report(collector::Run run) {
  nlohmann::json j = report::to_json(run);
  std::puts(j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void digest_trace(const char* path) {
  std::vector<uint8_t> data = slurp(path);
  constexpr size_t kMagicBytes = sizeof format::kMagic;
  std::vector<size_t> starts{0};
  for (size_t at = 1; starts.size() < 8 && at + kMagicBytes <= data.size(); ++at) {
    auto p =
        std::search(data.begin() + at, data.end(), format::kMagic, format::kMagic + kMagicBytes);
    if (p == data.end()) break;
    at = static_cast<size_t>(p - data.begin());
    starts.push_back(at);
  }
  starts.push_back(data.size());
  std::vector<std::unique_ptr<collector::TraceReader>> readers;
  for (size_t i = 0; i + 1 < starts.size(); ++i) {
    std::vector<uint8_t> part(data.begin() + starts[i], data.begin() + starts[i + 1]);
    std::printf("-- part %zu\n", i);
    try {
      auto r = collector::TraceReader::from_bytes(part, "digest");
      collector::Record e;
      while (r->next(e)) std::puts(format::to_text(e).c_str());
      std::printf("end: frames=%llu partial=%d problem=%s\n",
                  static_cast<unsigned long long>(r->frames()), r->partial(), r->problem().c_str());
      readers.push_back(collector::TraceReader::from_bytes(std::move(part), "digest"));
    } catch (const collector::TraceError& e) {
      std::printf("not a trace: %s\n", e.what());
      if (i == 0) return;
    }
  }
  print_report(collector::model_of(std::move(readers)));
}

void digest_torch(const char* path) {
  try {
    collector::TorchTrace t = collector::read_torch_trace(path);
    std::printf("pid=%llu torch=%s problem=%s\n", static_cast<unsigned long long>(t.pid),
                t.torch_version.c_str(), t.problem.c_str());
    for (const auto& e : t.events)
      std::puts(
          (format::to_text(e.record) +
           (e.record.type == RecordType::UserBlock ? " stream=" + std::to_string(e.stream) : ""))
              .c_str());
  } catch (const collector::TraceError& e) {
    std::printf("not a trace: %s\n", e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s trace|torch FILE...\n", argv[0]);
    return 2;
  }
  const std::string what = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::printf("== %s\n", argv[i]);
    if (what == "torch")
      digest_torch(argv[i]);
    else
      digest_trace(argv[i]);
  }
  return 0;
}
