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

#include "collector/model.h"
#include "collector/torch_trace.h"
#include "collector/trace_reader.h"
#include "common/format.h"
#include "report/json_report.h"

using namespace vramtrace;
using format::RecordType;

namespace {

std::string esc(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  return out + "\"";
}

std::string line_of(const collector::Event& e) {
  std::string out;
  auto f = [&](const char* name, uint64_t v) { out += std::string(" ") + name + "=" + std::to_string(v); };
  auto s = [&](const char* name, const std::string& v) { out += std::string(" ") + name + "=" + esc(v); };
  auto api = [&] { f("api", static_cast<uint64_t>(e.api)); };
  switch (e.type) {
    case RecordType::Process: out = "Process"; f("pid", e.a); f("ppid", e.b); f("realtime_ns", e.c); f("start_ns", e.time_ns); s("host", e.text); s("exe", e.text2); s("cmdline", e.text3); s("rank_env", e.text4); break;
    case RecordType::ContextCreate: out = "ContextCreate"; f("context", e.address); f("device", e.device); f("total_bytes", e.bytes); s("name", e.text); s("uuid", e.text2); break;
    case RecordType::ContextDestroy: out = "ContextDestroy"; f("context", e.address); break;
    case RecordType::Alloc: out = "Alloc"; api(); f("device", e.device); f("address", e.address); f("bytes", e.bytes); f("stream", e.stream); f("thread", e.thread); break;
    case RecordType::Free: out = "Free"; api(); f("device", e.device); f("address", e.address); f("stream", e.stream); f("thread", e.thread); break;
    case RecordType::AllocFailed: out = "AllocFailed"; api(); f("device", e.device); f("bytes", e.bytes); f("result", e.a); f("thread", e.thread); break;
    case RecordType::Launch: out = "Launch"; api(); f("device", e.device); f("stream", e.stream); f("name_id", static_cast<uint32_t>(e.a)); break;
    case RecordType::String: out = "String"; f("id", static_cast<uint32_t>(e.a)); s("text", e.text); break;
    case RecordType::VmmCreate: out = "VmmCreate"; f("device", e.device); f("handle", e.address); f("bytes", e.bytes); break;
    case RecordType::VmmRelease: out = "VmmRelease"; f("handle", e.address); break;
    case RecordType::VmmMap: out = "VmmMap"; f("address", e.address); f("bytes", e.bytes); f("offset", e.a); f("handle", e.b); break;
    case RecordType::VmmUnmap: out = "VmmUnmap"; f("address", e.address); f("bytes", e.bytes); break;
    case RecordType::Dropped: out = "Dropped"; f("count", e.a); break;
    case RecordType::ProcessExit: out = "ProcessExit"; f("recorded", e.a); f("dropped", e.b); break;
    case RecordType::Notice: out = "Notice"; s("text", e.text); break;
    case RecordType::MemInfo: out = "MemInfo"; f("device", e.device); f("free_bytes", e.a); f("total_bytes", e.b); break;
    case RecordType::PoolUsage: out = "PoolUsage"; f("device", e.device); f("pool", e.address); f("reserved", e.a); f("used", e.b); f("reserved_high", e.c); break;
    case RecordType::StackNode: out = "StackNode"; f("id", static_cast<uint32_t>(e.a)); f("parent", static_cast<uint32_t>(e.b)); f("ip", e.address); break;
    case RecordType::PyStackNode: out = "PyStackNode"; f("id", static_cast<uint32_t>(e.a)); f("parent", static_cast<uint32_t>(e.b)); f("code", static_cast<uint32_t>(e.c)); f("line", static_cast<uint32_t>(e.bytes)); break;
    case RecordType::PyCode: out = "PyCode"; f("id", static_cast<uint32_t>(e.a)); s("file", e.text); s("function", e.text2); break;
    case RecordType::AllocStack: out = "AllocStack"; f("native_leaf", static_cast<uint32_t>(e.a)); f("py_leaf", static_cast<uint32_t>(e.b)); break;
    case RecordType::Module: out = "Module"; f("generation", e.a); f("load_bias", e.address); f("start", e.b); f("end", e.c); s("path", e.text); s("build_id", e.text2); break;
    case RecordType::RangePush: out = "RangePush"; f("thread", e.thread); f("name_id", static_cast<uint32_t>(e.a)); break;
    case RecordType::RangePop: out = "RangePop"; f("thread", e.thread); break;
    case RecordType::UserPool: out = "UserPool"; f("pool", e.a); f("device", e.device); f("name_id", static_cast<uint32_t>(e.b)); break;
    case RecordType::UserSegment: out = "UserSegment"; f("pool", e.a); f("address", e.address); f("bytes", e.bytes); f("op", e.b); break;
    case RecordType::UserBlock: out = "UserBlock"; f("pool", e.a); f("address", e.address); f("bytes", e.bytes); f("thread", e.thread); break;
    case RecordType::UserOom: out = "UserOom"; f("pool", e.a); f("bytes", e.bytes); f("thread", e.thread); f("free_plus_one", e.b); break;
    case RecordType::Step: out = "Step"; f("step", e.a); break;
    case RecordType::Settings: out = "Settings"; f("launches", e.a); f("fields", e.b); break;
    default: out = "type " + std::to_string(static_cast<int>(e.type)); break;
  }
  return out.insert(out.find(' ') == std::string::npos ? out.size() : out.find(' '),
                    " t=" + std::to_string(e.time_ns));
}

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
    auto p = std::search(data.begin() + at, data.end(), format::kMagic, format::kMagic + kMagicBytes);
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
      collector::Event e;
      while (r->next(e)) std::puts(line_of(e).c_str());
      std::printf("end: frames=%llu partial=%d problem=%s\n",
                  static_cast<unsigned long long>(r->frames()), r->partial(), r->problem().c_str());
      readers.push_back(collector::TraceReader::from_bytes(std::move(part), "digest"));
    } catch (const collector::TraceError& e) {
      std::printf("not a trace: %s\n", e.what());
      if (i == 0) return;
    }
  }
  print_report(collector::analyze(std::move(readers)));
}

void digest_torch(const char* path) {
  try {
    collector::TorchTrace t = collector::read_torch_trace(path);
    std::printf("pid=%llu torch=%s problem=%s\n", static_cast<unsigned long long>(t.pid),
                t.torch_version.c_str(), t.problem.c_str());
    for (const auto& e : t.events)
      std::puts((line_of(e) + (e.type == RecordType::UserBlock ? " stream=" + std::to_string(e.stream) : "")).c_str());
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
