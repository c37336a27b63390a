// `vramtrace whatif RUN`: replays a recorded run's PyTorch allocator requests through the model
// of PyTorch's caching allocator (collector/predict/whatif.h) under other settings, a limit or a
// batch scale, and says whether it fits, its reserved peak and the first OOM. Reads RUN, writes
// nothing. --json prints one object (report/whatif.schema.json).
#include <CLI/CLI.hpp>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "collector/ingest/run_files.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "collector/predict/whatif.h"
#include "common/bytes_text.h"
#include "report/check.h"
#include "report/json_report.h"
#include "report/whatif_json.h"

namespace vramtrace::cli {
namespace {

using collector::WhatIfResult;

struct WhatIfArgs {
  std::vector<std::string> inputs;
  std::optional<std::string> alloc_conf, limit, scale_batch, fraction;
  bool max_batch = false;
  bool json = false;
  bool allow_damaged = false;
};

// A number as the options take it: the whole text, finite ("", "0.5x", "nan" are not).
std::optional<double> number_of(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (!end || *end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

// What whatif reads must be a run's traces: a report.json, or any file that is not a trace,
// is named for what it is; false (said) when one is there.
bool inputs_are_traces(const std::vector<std::string>& traces) {
  for (const auto& t : traces) {
    const std::filesystem::path p(t);
    if (p.extension() == ".vtrace" || collector::is_side_channel(p) || collector::is_snapshot(t))
      continue;
    std::cerr << "vramtrace whatif: " << report::printable(t)
              << (p.filename() == "report.json" ? " is a report, not a trace"
                                                : " is not a vramtrace trace")
              << ": whatif replays a run's traces (give the run's folder, or its "
                 "vramtrace.PID.vtrace and vramtrace.PID.torch, or a PyTorch memory snapshot)\n";
    return false;
  }
  return true;
}

// The problems of the traces read (as `vramtrace report` lists them in run.problems), each said
// on stderr; and whether a replayed process's PyTorch trace stops before the end the hook
// records (its END line): a replay of what is left would answer for a shorter run.
struct Damage {
  std::vector<std::string> problems;
  std::vector<std::string> cut;  // "pid N: why"
};

Damage damage_of(const collector::Run& run) {
  Damage d;
  d.problems = run.problems;
  for (const auto& p : run.processes) {
    const std::string& why = p.torch_trace_problem;
    // A ring that dropped its earliest entries is read to its end (the replay says what is
    // lost); any other problem stopped the reading before the END line (a bad line before the
    // first request leaves nothing to replay, and is said as what stopped it).
    if (!why.empty() && why.rfind("PyTorch's trace buffer", 0) != 0)
      d.cut.push_back("pid " + std::to_string(p.pid) + "'s PyTorch allocator trace: " + why);
    if (collector::replayable_devices(p).empty()) continue;
    if (!p.problem.empty())
      d.cut.push_back("pid " + std::to_string(p.pid) + "'s trace: " + p.problem);
  }
  for (const auto& problem : d.problems)
    std::cerr << "vramtrace whatif: warning: " << report::printable(problem) << "\n";
  return d;
}

using Replayed = collector::ProcessReplay;

// A replay in words; the lines pass through printable_lines(), as every text output does.
void print_text(const Replayed& x) {
  std::ostringstream out;
  const WhatIfResult& r = x.r;
  out << "pid " << x.pid << ", device " << r.device
      << (x.device_name.empty() ? "" : " (" + report::printable(x.device_name) + ")")
      << ", PyTorch " << (r.torch_version.empty() ? "?" : report::printable(r.torch_version))
      << "\n";
  out << "  settings:  " << (r.conf.empty() ? "PyTorch's defaults" : r.conf) << "   (the run's: "
      << (r.recorded_conf.empty() ? "defaults" : report::printable(r.recorded_conf)) << ", "
      << r.conf_source << ")\n";
  out << "  limit:     "
      << (r.limit_bytes == UINT64_MAX ? std::string("none") : gib_or_mib_text(r.limit_bytes))
      << " (" << r.limit_source << ")";
  if (r.fraction_limit)
    out << "; PyTorch's per-process fraction " << gib_or_mib_text(*r.fraction_limit);
  out << "\n";
  if (r.scale_batch != 1.0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  batch:     x%.4g (%llu requests scaled)\n", r.scale_batch,
                  static_cast<unsigned long long>(r.scaled_requests));
    out << buf;
  }
  out << "  rules:     " << report::printable(r.rules) << "\n";
  out << "  verdict:   " << (r.fits() ? "fits" : "out of memory") << " (" << r.requests
      << " requests replayed)\n";
  out << "  reserved peak: " << gib_or_mib_text(r.reserved_peak_bytes) << " predicted, "
      << gib_or_mib_text(r.recorded_reserved_peak_bytes) << " recorded\n";
  if (r.oom) {
    const auto& o = *r.oom;
    char t[32];
    std::snprintf(t, sizeof t, "%.3f s",
                  static_cast<double>(o.time_ns - std::min(o.time_ns, x.origin_ns)) / 1e9);
    out << "  first OOM: a request of " << gib_or_mib_text(o.requested_bytes) << " at " << t;
    if (o.iteration >= 0) out << ", iteration " << o.iteration;
    if (!o.phase.empty()) out << ", in " << o.phase;
    if (!o.module.empty()) out << ", module " << report::printable(o.module);
    out << (o.recorded_request ? " (the request the run itself failed on)"
                               : " (request #" + std::to_string(o.request_index) + ")")
        << "\n";
    out << "    then: reserved " << gib_or_mib_text(o.state.reserved_bytes) << ", allocated "
        << gib_or_mib_text(o.state.allocated_bytes) << ", cached free "
        << gib_or_mib_text(o.state.cached_free_bytes) << " in " << o.state.free_blocks
        << " blocks (largest " << gib_or_mib_text(o.state.largest_free_block)
        << "), outside PyTorch " << gib_or_mib_text(o.state.background_bytes) << "\n";
  }
  if (const auto& c = r.completion) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "batch %.4g", c->batch);
    out << "  predicted: the run died before its first step ended; the rest of the step is "
           "the start-up hook's prediction ("
        << c->predicted_requests << " requests in " << c->modules.size() << " modules, " << buf
        << ", " << c->method << ")\n";
  }
  if (r.truncated_at_recorded_oom)
    out << "  note: the run died at its own OOM, which the replay served; what it would "
           "have done next was never recorded, so 'fits' holds up to there\n";
  if (r.window_lost)
    out << "  note: PyTorch's trace ring had dropped the run's start: blocks made before "
           "it are replayed as made at its start\n";
  if (r.trace_sampled)
    out << "  note: PyTorch's trace was sampled (on in the first iterations and every "
           "50th): between them blocks are replayed as freed at a gap's start and made at "
           "its end (--torch=full records every block)\n";
  if (x.max_batch_asked) {
    if (x.max_batch) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "  largest batch scale that fits: x%.3f (reserved peak %s)\n",
                    x.max_batch->scale,
                    gib_or_mib_text(x.max_batch->at.reserved_peak_bytes).c_str());
      out << buf;
      if (x.max_batch_size)
        out << "  largest batch that fits: " << *x.max_batch_size
            << " (this one: " << x.max_batch->at.completion->recorded_batch << ")\n";
    } else {
      out << "  largest batch scale that fits: none (even x0.01 runs out)\n";
    }
  }
  std::cout << report::printable_lines(out.str());
}

// The options' values as the replay takes them; false (said) on a bad one.
bool settings_of(const WhatIfArgs& a, collector::WhatIfSettings* settings,
                 std::optional<double>* fraction) {
  if (a.alloc_conf) {
    collector::AllocatorSettings probe;
    std::string error;
    if (!collector::parse_alloc_conf(*a.alloc_conf, &probe, &error)) {
      std::cerr << "vramtrace whatif: " << error << "\n";
      return false;
    }
    settings->alloc_conf = a.alloc_conf;
  }
  if (a.limit) {
    try {
      settings->limit = collector::parse_size(*a.limit);
    } catch (const std::exception& e) {
      std::cerr << "vramtrace whatif: --limit: " << e.what() << "\n";
      return false;
    }
    if (*settings->limit == 0) {
      std::cerr << "vramtrace whatif: --limit: must be more than 0\n";
      return false;
    }
    // "--limit 24" read as 24 bytes is never meant (as check's --max-increase refuses it).
    if (number_of(*a.limit)) {
      std::cerr << "vramtrace whatif: --limit: '" << report::printable(*a.limit)
                << "' has no unit: write " << report::printable(*a.limit) << "GiB, or "
                << report::printable(*a.limit) << "B for bytes\n";
      return false;
    }
  }
  if (a.fraction) {
    *fraction = number_of(*a.fraction);
    if (!*fraction || !(**fraction > 0) || **fraction > 1) {
      std::cerr << "vramtrace whatif: --fraction: a fraction of the device in (0, 1], not '"
                << report::printable(*a.fraction) << "'\n";
      return false;
    }
  }
  if (a.scale_batch) {
    // From 1/100 (where --max-batch stops looking) to a million times the batch.
    const auto scale = number_of(*a.scale_batch);
    if (!scale || !(*scale >= 0.01) || *scale > 1e6) {
      std::cerr << "vramtrace whatif: --scale-batch: a number from 0.01 to 1000000 (0.5, 2), "
                   "not '"
                << report::printable(*a.scale_batch) << "'\n";
      return false;
    }
    settings->scale_batch = *scale;
  }
  return true;
}

// Whether a replay of the traces answers for the run: not when they stop before the end of what
// they recorded, unless the user allowed it (said either way).
bool replayable(const Damage& damage, bool allow_damaged) {
  if (damage.cut.empty()) return true;
  std::string cut;
  for (const auto& c : damage.cut) cut += (cut.empty() ? "" : "; ") + c;
  if (!allow_damaged) {
    std::cerr << "vramtrace whatif: " << report::printable(cut)
              << ": the traces stop before the end of what they recorded, so no verdict (a "
                 "replay of what is left answers for a shorter run); --allow-damaged replays "
                 "it anyway\n";
    return false;
  }
  std::cerr << "vramtrace whatif: --allow-damaged: replaying what is left; the verdict is of "
               "the part the traces kept\n";
  return true;
}

// Every replayable device of every process, replayed under `settings` (and the per-process
// `fraction` of each device's capacity); false, said, when one cannot be. What a replay could
// not take as recorded is said on stderr and added to `problems`.
bool replay_all(const collector::Run& run, const collector::WhatIfSettings& settings,
                std::optional<double> fraction, bool max_batch, std::vector<Replayed>* out,
                std::vector<std::string>* problems) {
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
      if (fraction) {
        const uint64_t total = x.device_total;
        if (!total) {
          std::cerr << "vramtrace whatif: --fraction: the device's capacity was not recorded\n";
          return false;
        }
        here.fraction_limit = static_cast<uint64_t>(*fraction * static_cast<double>(total));
      }
      x.r = collector::replay_run(p, dev, here);
      if (!x.r.ok) {
        std::cerr << "vramtrace whatif: " << report::printable(x.r.error) << "\n";
        return false;
      }
      for (const auto& why : x.r.problems) {
        problems->push_back("pid " + std::to_string(p.pid) + ", device " + std::to_string(dev) +
                            ": " + why);
        std::cerr << "vramtrace whatif: warning: " << report::printable(problems->back()) << "\n";
      }
      if (max_batch) {
        x.max_batch_asked = true;
        x.max_batch = collector::max_batch_scale(p, dev, here);
        // A batch size where the step's batch is known, as the report and the plan say it.
        if (const collector::MaxBatch* mb = x.max_batch ? &*x.max_batch : nullptr;
            mb && mb->at.completion && mb->at.completion->recorded_batch &&
            mb->scale < collector::kMaxBatchScaleTop)
          x.max_batch_size =
              collector::largest_batch_size(p, dev, *mb, mb->at.completion->recorded_batch, here);
      }
      out->push_back(std::move(x));
    }
  }
  return true;
}

int whatif_command(const WhatIfArgs& a) {
  bool ok = true;
  std::vector<std::string> traces = expand_inputs(a.inputs, &ok);
  if (!ok || !inputs_are_traces(traces)) return kExitUsage;
  // Traces of different runs are never replayed as one (as `vramtrace report` refuses them).
  if (const auto runs = runs_of(traces); runs.size() > 1) {
    refuse_runs("vramtrace whatif", runs, "give the traces of one run");
    return kExitUsage;
  }
  collector::WhatIfSettings settings;
  std::optional<double> fraction;
  if (!settings_of(a, &settings, &fraction)) return kExitUsage;
  bool torch = false;
  for (const auto& t : traces)
    torch |= (collector::is_side_channel(t) && t.size() > 6 &&
              t.compare(t.size() - 6, 6, ".torch") == 0) ||
             collector::is_snapshot(t);
  const char* only =
      "vramtrace whatif: what-if models PyTorch's caching allocator only, and these traces hold "
      "no PyTorch allocator trace (vramtrace.PID.torch: give the run's folder, or the .torch "
      "beside its .vtrace; a native CUDA program, JAX, PyTorch with backend:cudaMallocAsync or "
      "a run without the start-up hook has none)\n";
  if (!torch) {
    std::cerr << only;
    return kExitUsage;
  }
  collector::Run run;
  try {
    run = collector::model_of(traces);
  } catch (const collector::TraceError& e) {
    std::cerr << "vramtrace whatif: " << report::printable(e.what()) << "\n";
    return kExitUsage;
  }
  const Damage damage = damage_of(run);
  if (!replayable(damage, a.allow_damaged)) return kExitUsage;
  std::vector<Replayed> out;
  std::vector<std::string> problems = damage.problems;
  if (!replay_all(run, settings, fraction, a.max_batch, &out, &problems)) return kExitUsage;
  if (out.empty()) {
    std::cerr << only;
    return kExitUsage;
  }
  if (a.json) {
    std::cout << report::whatif_json(out, problems).dump(2) << "\n";
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
                "What the process may hold on the device, with its unit (e.g. 24GiB; default: "
                "the device's capacity less the driver's share)");
  w->add_option("--fraction", args->fraction,
                "Replay under torch.cuda.set_per_process_memory_fraction(F) instead of the run's "
                "own fraction (PyTorch's cap on what it reserves)");
  w->add_option("--scale-batch", args->scale_batch,
                "Scale activations, temporaries and inputs by X (the batch size's ratio)");
  w->add_flag("--max-batch", args->max_batch,
              "Find the largest batch scale that fits under the limit (bisection by replay)");
  w->add_flag("--json", args->json, "Print one JSON object (report/whatif.schema.json)");
  w->add_flag("--allow-damaged", args->allow_damaged,
              "Replay traces that end before the end of what they recorded (cut, or with a bad "
              "line) instead of refusing: the verdict is then of the part they kept");
  return {w, [args] { return whatif_command(*args); }, {}};
}

}  // namespace vramtrace::cli
