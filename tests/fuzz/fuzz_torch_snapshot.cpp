// libFuzzer target: a PyTorch memory snapshot (collector/ingest/torch_snapshot.h), the pickle a
// user hands `vramtrace report`: read by the restricted pickle reader (collector/ingest/pickle.h)
// as a run of one process, modelled, and each device replayed by what-if as `vramtrace whatif`
// would. Any crash, hang, sanitizer finding or exception other than TraceError is a bug.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "collector/ingest/torch_snapshot.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "collector/predict/whatif.h"

using namespace vramtrace::collector;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    TorchSnapshot s =
        torch_snapshot_of(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", 7);
    std::vector<std::unique_ptr<TraceReader>> readers;
    readers.push_back(TraceReader::from_bytes(std::move(s.process_trace), "fuzz"));
    // The snapshot's allocator trace as the merge takes it: the model of its process.
    RunFiles files;
    files.traces = std::move(readers);
    files.snapshots.push_back(std::move(s.torch));
    Run run = model_of(std::move(files));
    for (const auto& p : run.processes)
      for (const auto& [device, d] : p.devices) (void)replay_run(p, device, WhatIfSettings{});
  } catch (const TraceError&) {}
  return 0;
}
