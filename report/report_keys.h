// report.json's keys and their typed accessors, as report/ names them: the one spelling is
// collector/contract/report_keys.h (the comparison of two runs reads them there too).
#pragma once

#include "collector/analysis/ranks.h"
#include "collector/contract/report_keys.h"

namespace vramtrace::report {

namespace field = collector::field;

// The launcher variables that give a process its rank (processes[].ranks), in the order they
// are looked for: the collector's, which the writer ranks processes by.
using collector::kRankVariables;

using collector::cuda_start_ns;
using collector::device_index;
using collector::device_name;
using collector::final_live_bytes;
using collector::peak_bytes;
using collector::peak_time_ns;
using collector::requested_bytes;
using collector::total_bytes;

}  // namespace vramtrace::report
