// `vramtrace whatif --json`: the replays of a run (collector/predict/whatif.h) as one object,
// the headline replay's figures at its top and every replay under "replays"; its contract is
// report/whatif.schema.json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collector/predict/whatif.h"

namespace vramtrace::report {

// `replays` is not empty; `problems`: those of the traces read (run.problems).
nlohmann::json whatif_json(const std::vector<collector::ProcessReplay>& replays,
                           const std::vector<std::string>& problems);

}  // namespace vramtrace::report
