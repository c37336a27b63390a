// `vramtrace whatif RUN`: replays a recorded run's PyTorch allocator requests through the model
// of PyTorch's caching allocator (collector/whatif.h) under other settings, a limit or a batch
// scale, and says whether it fits, its reserved peak and the first OOM. Reads RUN, writes
// nothing. --json prints one object (report/whatif.schema.json).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "collector/model.h"
#include "collector/trace_reader.h"
#include "collector/whatif.h"
#include "report/check.h"
#include "report/json_report.h"

namespace vramtrace::cli {
namespace {

using collector::WhatIfResult;

struct WhatIfArgs {
  std::vector<std::string> inputs;
  std::optional<std::string> alloc_conf, limit;
  std::optional<double> scale_batch, fraction;
  bool max_batch = false;
  bool json = false;
};

std::string size_text(uint64_t b) {
  char buf[64];
  const double v = static_cast<double>(b);
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", v / 1073741824.0);
  else
    std::snprintf(buf, sizeof buf, "%.2f MiB", v / 1048576.0);
  return buf;
}

struct Replayed {
  uint64_t pid = 0;
  std::string device_name;
  uint64_t device_total = 0;
  WhatIfResult r;
  std::optional<collector::MaxBatch> max_batch;
  bool max_batch_asked = false;
  uint64_t origin_ns = 0;
};

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

nlohmann::json json_of(const Replayed& x) {
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
  if (x.max_batch_asked)
    j["max_batch"] =
        x.max_batch ? nlohmann::json{{"scale", x.max_batch->scale},
                                     {"reserved_peak_bytes", x.max_batch->at.reserved_peak_bytes}}
                    : nlohmann::json();
  return j;
}

void print_text(const Replayed& x) {
  const WhatIfResult& r = x.r;
  std::cout << "pid " << x.pid << ", device " << r.device
            << (x.device_name.empty() ? "" : " (" + report::printable(x.device_name) + ")")
            << ", PyTorch " << (r.torch_version.empty() ? "?" : report::printable(r.torch_version))
            << "\n";
  std::cout << "  settings:  " << (r.conf.empty() ? "PyTorch's defaults" : r.conf)
            << "   (the run's: "
            << (r.recorded_conf.empty() ? "defaults" : report::printable(r.recorded_conf)) << ", "
            << r.conf_source << ")\n";
  std::cout << "  limit:     "
            << (r.limit_bytes == UINT64_MAX ? std::string("none") : size_text(r.limit_bytes))
            << " (" << r.limit_source << ")";
  if (r.fraction_limit)
    std::cout << "; PyTorch's per-process fraction " << size_text(*r.fraction_limit);
  std::cout << "\n";
  if (r.scale_batch != 1.0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  batch:     x%.4g (%llu requests scaled)\n", r.scale_batch,
                  static_cast<unsigned long long>(r.scaled_requests));
    std::cout << buf;
  }
  std::cout << "  rules:     " << report::printable(r.rules) << "\n";
  std::cout << "  verdict:   " << (r.fits() ? "fits" : "out of memory") << " (" << r.requests
            << " requests replayed)\n";
  std::cout << "  reserved peak: " << size_text(r.reserved_peak_bytes) << " predicted, "
            << size_text(r.recorded_reserved_peak_bytes) << " recorded\n";
  if (r.oom) {
    const auto& o = *r.oom;
    char t[32];
    std::snprintf(t, sizeof t, "%.3f s",
                  static_cast<double>(o.time_ns - std::min(o.time_ns, x.origin_ns)) / 1e9);
    std::cout << "  first OOM: a request of " << size_text(o.requested_bytes) << " at " << t;
    if (o.iteration >= 0) std::cout << ", iteration " << o.iteration;
    if (!o.phase.empty()) std::cout << ", in " << o.phase;
    if (!o.module.empty()) std::cout << ", module " << report::printable(o.module);
    std::cout << (o.recorded_request ? " (the request the run itself failed on)"
                                     : " (request #" + std::to_string(o.request_index) + ")")
              << "\n";
    std::cout << "    then: reserved " << size_text(o.state.reserved_bytes) << ", allocated "
              << size_text(o.state.allocated_bytes) << ", cached free "
              << size_text(o.state.cached_free_bytes) << " in " << o.state.free_blocks
              << " blocks (largest " << size_text(o.state.largest_free_block)
              << "), outside PyTorch " << size_text(o.state.background_bytes) << "\n";
  }
  if (const auto& c = r.completion) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "batch %.4g", c->batch);
    std::cout << "  predicted: the run died before its first step ended; the rest of the step is "
                 "the start-up hook's prediction ("
              << c->predicted_requests << " requests in " << c->modules.size() << " modules, "
              << buf << ", " << c->method << ")\n";
  }
  if (r.truncated_at_recorded_oom)
    std::cout << "  note: the run died at its own OOM, which the replay served; what it would "
                 "have done next was never recorded, so 'fits' holds up to there\n";
  if (r.window_lost)
    std::cout << "  note: PyTorch's trace ring had dropped the run's start: blocks made before "
                 "it are replayed as made at its start\n";
  if (x.max_batch_asked) {
    if (x.max_batch) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "  largest batch scale that fits: x%.3f (reserved peak %s)\n",
                    x.max_batch->scale, size_text(x.max_batch->at.reserved_peak_bytes).c_str());
      std::cout << buf;
    } else {
      std::cout << "  largest batch scale that fits: none (even x0.01 runs out)\n";
    }
  }
}

int whatif_command(const WhatIfArgs& a) {
  bool ok = true;
  std::vector<std::string> traces = expand_inputs(a.inputs, &ok);
  if (!ok) return kExitUsage;
  collector::WhatIfSettings settings;
  if (a.alloc_conf) {
    collector::AllocatorSettings probe;
    std::string error;
    if (!collector::parse_alloc_conf(*a.alloc_conf, &probe, &error)) {
      std::cerr << "vramtrace whatif: " << error << "\n";
      return kExitUsage;
    }
    settings.alloc_conf = a.alloc_conf;
  }
  if (a.limit) {
    try {
      settings.limit = report::parse_size(*a.limit);
    } catch (const std::exception& e) {
      std::cerr << "vramtrace whatif: --limit: " << e.what() << "\n";
      return kExitUsage;
    }
    if (*settings.limit == 0) {
      std::cerr << "vramtrace whatif: --limit: must be more than 0\n";
      return kExitUsage;
    }
  }
  if (a.fraction) {
    if (!(*a.fraction > 0) || *a.fraction > 1) {
      std::cerr << "vramtrace whatif: --fraction: a fraction of the device in (0, 1], not "
                << *a.fraction << "\n";
      return kExitUsage;
    }
  }
  if (a.scale_batch) {
    if (!(*a.scale_batch > 0) || !std::isfinite(*a.scale_batch) || *a.scale_batch > 1e6) {
      std::cerr << "vramtrace whatif: --scale-batch: a positive number (0.5, 2), not "
                << *a.scale_batch << "\n";
      return kExitUsage;
    }
    settings.scale_batch = *a.scale_batch;
  }
  bool torch = false;
  for (const auto& t : traces)
    torch |= is_torch_trace(t) && t.size() > 6 && t.compare(t.size() - 6, 6, ".torch") == 0;
  const char* only =
      "vramtrace whatif: what-if models PyTorch's caching allocator only, and this run has no "
      "PyTorch allocator trace (a native CUDA program, JAX, PyTorch with "
      "backend:cudaMallocAsync, or a run without the start-up hook)\n";
  if (!torch) {
    std::cerr << only;
    return kExitUsage;
  }
  collector::Run run;
  try {
    run = collector::analyze(traces);
  } catch (const collector::TraceError& e) {
    std::cerr << "vramtrace whatif: " << e.what() << "\n";
    return kExitUsage;
  }
  std::vector<Replayed> out;
  for (const auto& p : run.processes) {
    for (uint32_t dev : collector::replayable_devices(p)) {
      Replayed x;
      x.pid = p.pid;
      x.origin_ns = run.origin_ns;
      if (auto d = p.devices.find(dev); d != p.devices.end()) {
        x.device_name = d->second.name;
        x.device_total = d->second.total_bytes;
      }
      collector::WhatIfSettings here = settings;
      if (a.fraction) {
        const uint64_t total = x.device_total;
        if (!total) {
          std::cerr << "vramtrace whatif: --fraction: the device's capacity was not recorded\n";
          return kExitUsage;
        }
        here.fraction_limit = static_cast<uint64_t>(*a.fraction * static_cast<double>(total));
      }
      x.r = collector::replay_run(p, dev, here);
      if (!x.r.ok) {
        std::cerr << "vramtrace whatif: " << report::printable(x.r.error) << "\n";
        return kExitUsage;
      }
      if (a.max_batch) {
        x.max_batch_asked = true;
        x.max_batch = collector::max_batch_scale(p, dev, here);
      }
      out.push_back(std::move(x));
    }
  }
  if (out.empty()) {
    std::cerr << only;
    return kExitUsage;
  }
  if (a.json) {
    // The headline is the first replay that ran out, else the one with the largest peak.
    size_t head = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out[i].r.fits()) {
        head = i;
        break;
      }
      if (out[i].r.reserved_peak_bytes > out[head].r.reserved_peak_bytes) head = i;
    }
    nlohmann::json j = json_of(out[head]);
    j["schema"] = "vramtrace.whatif/1";
    j["replays"] = nlohmann::json::array();
    for (const auto& x : out) j["replays"].push_back(json_of(x));
    std::cout << j.dump(2) << "\n";
  } else {
    for (const auto& x : out) print_text(x);
  }
  return 0;
}

}  // namespace

Command add_whatif_command(CLI::App& app) {
  auto args = std::make_shared<WhatIfArgs>();
  auto* w = app.add_subcommand(
      "whatif",
      "Replay a run's PyTorch allocator requests under other allocator settings, a limit or a "
      "batch scale: would it fit?");
  w->add_option("run", args->inputs, "The run's folder, or its traces (.vtrace and .torch)")
      ->required();
  w->add_option("--alloc-conf", args->alloc_conf,
                "PYTORCH_CUDA_ALLOC_CONF to replay under, over the run's own "
                "(e.g. expandable_segments:True,max_split_size_mb:128)");
  w->add_option("--limit", args->limit,
                "What the process may hold on the device (e.g. 24GiB; default: the device's "
                "capacity less the driver's share)");
  w->add_option("--fraction", args->fraction,
                "Replay under torch.cuda.set_per_process_memory_fraction(F) instead of the run's "
                "own fraction (PyTorch's cap on what it reserves)");
  w->add_option("--scale-batch", args->scale_batch,
                "Scale activations, temporaries and inputs by X (the batch size's ratio)");
  w->add_flag("--max-batch", args->max_batch,
              "Find the largest batch scale that fits under the limit (bisection by replay)");
  w->add_flag("--json", args->json, "Print one JSON object (report/whatif.schema.json)");
  return {w, [args] { return whatif_command(*args); }, {}};
}

}  // namespace vramtrace::cli
