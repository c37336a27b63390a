// The model of a run made of trace streams held in memory (one per process), for unit tests.
#pragma once

#include <memory>
#include <vector>

#include "collector/model/model.h"

namespace vt_test {

inline vramtrace::collector::Run run_of(std::vector<std::vector<uint8_t>> streams) {
  std::vector<std::unique_ptr<vramtrace::collector::TraceReader>> readers;
  for (auto& s : streams)
    readers.push_back(vramtrace::collector::TraceReader::from_bytes(std::move(s)));
  return vramtrace::collector::model_of(std::move(readers));
}

}  // namespace vt_test
