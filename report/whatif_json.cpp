// `vramtrace whatif --json` (see whatif_json.h).
#include "report/whatif_json.h"

#include <algorithm>

namespace vramtrace::report {

using collector::ProcessReplay;
using collector::WhatIfResult;

namespace {

// A step that never finished, completed from the start-up hook's prediction of it.
nlohmann::json completion_json(const collector::Completion& c, uint64_t replayed) {
  return {{"predicted_requests", c.predicted_requests},
          {"predicted_requests_replayed", replayed},
          {"kept_recorded_requests", c.kept_recorded},
          {"modules", c.modules},
          {"batches", c.batches},
          {"recorded_batch", c.recorded_batch},
          {"batch", c.batch},
          {"method", c.method}};
}

nlohmann::json replay_json(const ProcessReplay& x) {
  const WhatIfResult& r = x.r;
  nlohmann::json j;
  j["verdict"] = r.fits() ? "fits" : "oom";
  j["reserved_peak_bytes"] = r.reserved_peak_bytes;
  j["allocated_peak_bytes"] = r.allocated_peak_bytes;
  j["recorded_reserved_peak_bytes"] = r.recorded_reserved_peak_bytes;
  j["recorded_oom"] = r.recorded_oom;
  j["pid"] = x.pid;
  j["device"] = r.device;
  j["torch_version"] = r.torch_version;
  j["rules"] = r.rules;
  j["requests"] = r.requests;
  j["scaled_requests"] = r.scaled_requests;
  j["truncated_at_recorded_oom"] = r.truncated_at_recorded_oom;
  j["window_lost"] = r.window_lost;
  j["trace_sampled"] = r.trace_sampled;
  nlohmann::json s;
  s["alloc_conf"] = r.conf;
  s["recorded_alloc_conf"] = r.recorded_conf;
  s["recorded_alloc_conf_source"] = r.conf_source;
  s["limit_bytes"] = r.limit_bytes == UINT64_MAX ? nlohmann::json() : nlohmann::json(r.limit_bytes);
  s["limit_source"] = r.limit_source;
  s["fraction_limit_bytes"] =
      r.fraction_limit ? nlohmann::json(*r.fraction_limit) : nlohmann::json();
  s["scale_batch"] = r.scale_batch;
  j["settings"] = s;
  if (r.oom) {
    const auto& o = *r.oom;
    nlohmann::json oj;
    oj["requested_bytes"] = o.requested_bytes;
    oj["rounded_bytes"] = o.rounded_bytes;
    oj["time_ns"] = o.time_ns - std::min(o.time_ns, x.origin_ns);
    oj["iteration"] = o.iteration >= 0 ? nlohmann::json(o.iteration) : nlohmann::json();
    oj["module"] = o.module.empty() ? nlohmann::json() : nlohmann::json(o.module);
    oj["phase"] = o.phase.empty() ? nlohmann::json() : nlohmann::json(o.phase);
    oj["stream"] = o.stream;
    oj["request_index"] = o.request_index;
    oj["recorded_request"] = o.recorded_request;
    oj["fragmentation"] = {{"reserved_bytes", o.state.reserved_bytes},
                           {"allocated_bytes", o.state.allocated_bytes},
                           {"cached_free_bytes", o.state.cached_free_bytes},
                           {"largest_free_block_bytes", o.state.largest_free_block},
                           {"free_blocks", o.state.free_blocks},
                           {"segments", o.state.segments},
                           {"outside_pytorch_bytes", o.state.background_bytes}};
    j["oom"] = oj;
  } else {
    j["oom"] = nullptr;
  }
  if (r.completion)
    j["completed_by_prediction"] = completion_json(*r.completion, r.predicted_requests_replayed);
  if (x.max_batch_asked) {
    j["max_batch"] =
        x.max_batch ? nlohmann::json{{"scale", x.max_batch->scale},
                                     {"reserved_peak_bytes", x.max_batch->at.reserved_peak_bytes}}
                    : nlohmann::json();
    if (x.max_batch_size) {
      j["max_batch"]["batch"] = *x.max_batch_size;
      j["max_batch"]["recorded_batch"] = x.max_batch->at.completion->recorded_batch;
    }
  }
  return j;
}

}  // namespace

nlohmann::json whatif_json(const std::vector<ProcessReplay>& replays,
                           const std::vector<std::string>& problems) {
  nlohmann::json j = replay_json(replays[collector::headline_replay(replays)]);
  j["schema"] = "vramtrace.whatif/1";
  j["problems"] = problems;
  j["replays"] = nlohmann::json::array();
  for (const auto& x : replays) j["replays"].push_back(replay_json(x));
  return j;
}

}  // namespace vramtrace::report
