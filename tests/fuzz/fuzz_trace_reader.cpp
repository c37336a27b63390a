// libFuzzer target: a trace as the collector gets it from a file or a socket (never trusted).
// Decodes it (TraceReader::from_bytes), rebuilds the model (collector::analyze) and renders it
// (report::to_json, summary_text, to_html). Any crash, hang, sanitizer finding or exception other
// than TraceError (what the reader throws for input that is not a trace) is a bug.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collector/model.h"
#include "collector/trace_reader.h"
#include "report/html_report.h"
#include "report/json_report.h"

using namespace vramtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::unique_ptr<collector::TraceReader>> readers;
  try {
    readers.push_back(
        collector::TraceReader::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz"));
  } catch (const collector::TraceError&) {
    return 0;
  }
  collector::Run run = collector::analyze(std::move(readers));
  nlohmann::json j = report::to_json(run);
  std::string text = report::summary_text(j);
  std::string page = report::to_html(j);
  std::string file = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)text;
  (void)page;
  (void)file;
  return 0;
}
