// Rendering the collector's model as report.json (see json_report.h).
#include "report/json_report.h"
#include "collector/diagnosis.h"
#include "collector/leaks.h"
#include "collector/oom_findings.h"
#include "collector/retention.h"
#include "report/report_keys.h"
#include "report/torch_json.h"

#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <tuple>

#include "collector/stacks.h"
#include "common/format.h"

namespace vramtrace::report {

using collector::Allocation;
using collector::ProcessModel;
using collector::Run;
using nlohmann::json;

namespace {

constexpr size_t kTopAllocations = 50;
constexpr size_t kTopKernels = 20;
constexpr size_t kMaxNotProfiledLines = 10;  // of the summary; report.json has them all
constexpr const char* kLaunchesNotRecorded =
    "kernel launches were not recorded (--launches=off, VRAMTRACE_LAUNCHES=off): launch counts, "
    "the kernel at the peak and iterations found by the launch rhythm are unknown";

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

constexpr size_t kTopStacks = 20;

// Where an allocation came from: its stack's site, or the driver entry point that made it when
// the trace has no stack for it (stacks off, or an older trace).
struct Site {
  std::string text;
  std::string library;
  const collector::Attribution* stack = nullptr;
};

Site site_of(const Allocation& a, collector::StackResolver& stacks) {
  Site s;
  if (a.stack || a.py_stack) {
    s.stack = &stacks.attribute(a.stack, a.py_stack);
    s.text = s.stack->site;
    s.library = s.stack->library;
  }
  // A PyTorch block: what the start-up hook's context says it is (a named storage, the module
  // that made it, the user's line that ran the model, backward() or step()), unless its own
  // frames (--torch=stacks) say more. Blocks made outside the phases by no call the hook marks
  // (a factory such as torch.randint with device="cuda") take the line of their own frames,
  // which the hook records between the phases, or else of the driver call that made their
  // segment, when that segment was made for them. In a program that never ran a phase (the
  // allocator used alone), "outside forward, backward and step" says nothing: no context.
  if (a.space == 1)
    if (const auto* tm = stacks.process().torch_memory.get())
      if (const auto* b = tm->block(a.device, a.id, a.time_ns))
        if ((b->label >= 0 || !tm->phases().empty() || b->site) &&
            (s.text.empty() || b->label >= 0 || b->phase == collector::TorchPhase::None)) {
          s.text = tm->describe(*b);
          if (b->phase == collector::TorchPhase::None && !b->site) {
            const collector::Attribution* at =
                s.stack && !s.stack->site_file.empty() ? s.stack : nullptr;
            if (!at)
              if (const Allocation* seg = stacks.segment_made_for(a))
                if (seg->stack || seg->py_stack) at = &stacks.attribute(seg->stack, seg->py_stack);
            if (at && !at->site_file.empty()) {
              s.text += " at " + at->site_file + ":" + std::to_string(at->site_line);
              s.stack = at;
              s.library = at->library;
            }
          }
        }
  if (s.text.empty())
    s.text = a.space == 1 ? "(pool block, no stack; for PyTorch: vramtrace run --torch=stacks)"
                          : format::api_name(a.api);
  return s;
}

json frames_json(const collector::Attribution* a) {
  json out = json::array();
  if (!a) return out;
  for (const auto& f : a->frames) {
    json j = {{"function", f.function}, {"file", f.file}, {"line", f.line}};
    if (f.internal) j["internal"] = true;  // CUDA runtime, driver, CUPTI or vramtrace itself
    if (f.python) {
      j["python"] = true;
    } else {
      j["module"] = f.module;
      j["offset"] = hex(f.offset);
    }
    out.push_back(j);
  }
  return out;
}

json api_table(const std::array<collector::ApiStats, static_cast<size_t>(format::Api::kCount)>& t) {
  json out = json::object();
  for (size_t i = 1; i < t.size(); ++i) {
    const auto& s = t[i];
    if (!s.calls && !s.frees && !s.failed) continue;
    out[format::api_name(static_cast<format::Api>(i))] = {
        {"calls", s.calls}, {"bytes", s.bytes}, {"freed", s.frees}, {"failed", s.failed}};
  }
  return out;
}

json allocation_json(const Allocation& a, const ProcessModel& p, uint64_t origin,
                     collector::StackResolver& stacks) {
  Site site = site_of(a, stacks);
  json j = {{"address", hex(a.id)},
            {"bytes", a.bytes},
            {"api", format::api_name(a.api)},
            {"kind", format::memory_kind_name(format::memory_kind(a.api))},
            {"time_ns", a.time_ns >= origin ? a.time_ns - origin : 0},
            {"thread", a.thread},
            {"site", site.text},
            {"library", site.library},
            {"stack", frames_json(site.stack)}};
  if (a.stream) j["stream"] = hex(a.stream);
  const std::string& k = p.kernel_name(a.last_kernel);
  if (!k.empty()) j["last_kernel"] = demangle(k);
  if (a.phase) j["phase"] = p.kernel_name(a.phase);
  if (a.space == 1) j["kind"] = "pool block";
  return j;
}

json fragmentation_json(const collector::FragmentationState& f, uint64_t origin) {
  return {{"reserved_bytes", f.reserved},
          {"in_use_bytes", f.in_use},
          {"free_bytes", f.free_bytes()},
          {"free_blocks", f.free_blocks},
          {"largest_free_block_bytes", f.largest_free},
          {"external_fragmentation", f.external()},
          {"blocks", f.blocks},
          {"segments", f.segments},
          {"time_ns", f.time_ns >= origin ? f.time_ns - origin : 0}};
}

// A site's growth (collector/leaks.h), its library and stack from one of its allocations.
json growth_json(const collector::SiteGrowth& g, collector::StackResolver& stacks,
                 uint64_t origin) {
  Site site = site_of(g.example, stacks);
  json j = {{"site", g.site},
            {"library", site.library},
            {"bytes", g.bytes},
            {"bytes_per_iteration", g.bytes_per_iteration},
            {"iterations", g.iterations},
            {"first_iteration", g.first_iteration},
            {"last_iteration", g.last_iteration},
            {"since_ns", g.since_ns >= origin ? g.since_ns - origin : 0},
            {"stack", frames_json(site.stack)}};
  if (!g.seen_at.empty()) j["seen_at"] = g.seen_at;
  return j;
}

collector::SiteOf site_text_of(collector::StackResolver& stacks) {
  return [&stacks](const Allocation& a) { return site_of(a, stacks).text; };
}

// The ranked findings of an OOM (collector/oom_findings.h), rendered.
json findings_json(const std::vector<collector::OomFinding>& findings,
                   collector::StackResolver& stacks, uint64_t origin) {
  json out = json::array();
  for (const auto& f : findings) {
    const auto& e = f.evidence;
    json ev = json::object();
    auto put = [&](const char* key, const auto& v) {
      if (v) ev[key] = *v;
    };
    put("requested_bytes", e.requested_bytes);
    put("live_bytes", e.live_bytes);
    put("limit_bytes", e.limit_bytes);
    put("total_bytes", e.total_bytes);
    put("device_free_bytes", e.device_free_bytes);
    put("free_reserved_bytes", e.free_reserved_bytes);
    put("largest_free_block_bytes", e.largest_free_block_bytes);
    put("free_blocks", e.free_blocks);
    put("external_fragmentation", e.external_fragmentation);
    put("held_by_others_bytes", e.held_by_others_bytes);
    put("free_bytes", e.free_bytes);
    put("this_process_bytes", e.this_process_bytes);
    put("bytes_per_iteration", e.bytes_per_iteration);
    put("grown_bytes", e.grown_bytes);
    put("iterations", e.iterations);
    if (e.since_ns) ev["since_ns"] = *e.since_ns >= origin ? *e.since_ns - origin : 0;
    if (f.kind == collector::FindingKind::Growth) {
      json sites = json::array();
      for (const auto& g : e.growth_sites) sites.push_back(growth_json(g, stacks, origin));
      ev["sites"] = sites;
    }
    if (!e.kept_modules.empty()) {
      json mods = json::array();
      for (const auto& [module, bytes] : e.kept_modules)
        mods.push_back({{"module", module}, {"bytes", bytes}});
      ev["modules"] = mods;
    }
    if (f.kind == collector::FindingKind::NearCapacity) {
      json sites = json::array();
      for (const auto& [site, bytes] : e.top_sites)
        sites.push_back({{"site", site}, {"bytes", bytes}});
      ev["top_sites"] = sites;
    }
    out.push_back({{"kind", collector::finding_kind_name(f.kind)},
                   {"score", f.score},
                   {"title", f.title},
                   {"evidence", ev},
                   {"suggestion", f.suggestion},
                   {"rank", f.rank}});
  }
  return out;
}

// Groups allocations by site: bytes, count and the distinct sizes, largest site first, with
// the owning library and the stack of the group's largest allocation.
// `stacks_of(a)`: the stacks of a's process (one process's, or each its own at a device's
// run-wide peak).
template <class StacksOf>
json by_site_of(const std::vector<Allocation>& allocs, StacksOf&& stacks_of) {
  struct Group {
    uint64_t bytes = 0, count = 0, largest = 0;
    std::map<uint64_t, uint64_t> sizes;
    Site site;
  };
  std::map<std::string, Group> groups;
  for (const auto& a : allocs) {
    Site site = site_of(a, stacks_of(a));
    Group& g = groups[site.text];
    g.bytes += a.bytes;
    ++g.count;
    ++g.sizes[a.bytes];
    if (a.bytes > g.largest || g.count == 1) {
      g.largest = a.bytes;
      g.site = site;
    }
  }
  std::vector<std::pair<std::string, Group>> sorted(groups.begin(), groups.end());
  std::sort(sorted.begin(), sorted.end(),
            [](auto& a, auto& b) { return a.second.bytes > b.second.bytes; });
  json out = json::array();
  for (auto& [site, g] : sorted) {
    json sizes = json::array();
    for (auto it = g.sizes.rbegin(); it != g.sizes.rend(); ++it)
      sizes.push_back({{"bytes", it->first}, {"count", it->second}});
    out.push_back({{"site", site},
                   {"bytes", g.bytes},
                   {"count", g.count},
                   {"sizes", sizes},
                   {"library", g.site.library},
                   {"stack", frames_json(g.site.stack)}});
  }
  return out;
}

json by_site(const std::vector<Allocation>& allocs, collector::StackResolver& stacks) {
  return by_site_of(allocs, [&](const Allocation&) -> collector::StackResolver& { return stacks; });
}

// Groups allocations by owning library ("(unknown)" without a stack), largest first.
template <class StacksOf>
json by_library_of(const std::vector<Allocation>& allocs, StacksOf&& stacks_of) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> groups;
  for (const auto& a : allocs) {
    std::string lib = site_of(a, stacks_of(a)).library;
    auto& g = groups[lib.empty() ? "(unknown)" : lib];
    g.first += a.bytes;
    ++g.second;
  }
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> sorted(groups.begin(),
                                                                            groups.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](auto& a, auto& b) { return a.second.first > b.second.first; });
  json out = json::array();
  for (auto& [lib, g] : sorted)
    out.push_back({{"library", lib}, {"bytes", g.first}, {"count", g.second}});
  return out;
}

json by_library(const std::vector<Allocation>& allocs, collector::StackResolver& stacks) {
  return by_library_of(allocs,
                       [&](const Allocation&) -> collector::StackResolver& { return stacks; });
}

// Groups allocations by whole stack (the same site may be reached by several), largest first.
// Allocations recorded without a stack are grouped by api; what falls past the first kTopStacks
// groups is summed into one "(other stacks)" entry, so that the groups add up to the whole.
// With several processes, the same stack of each (workers of one program) is one group.
template <class StacksOf>
json by_stack_of(const std::vector<Allocation>& allocs, StacksOf&& stacks_of) {
  // (process, native leaf, Python leaf, api when without a stack): stack ids are per process.
  using Key = std::tuple<uint32_t, uint32_t, uint32_t, int>;
  std::map<Key, std::pair<uint64_t, uint64_t>> groups;
  std::map<Key, const Allocation*> example;
  bool several = false;
  for (const auto& a : allocs) {
    bool has = a.stack || a.py_stack;
    Key key{a.process, a.stack, a.py_stack, has ? -1 : static_cast<int>(a.api)};
    auto& g = groups[key];
    g.first += a.bytes;
    ++g.second;
    example.try_emplace(key, &a);
    several = several || a.process != allocs.front().process;
  }
  if (several) {
    // Stacks that resolve to the same frames are one group, kept under the first key.
    std::map<std::string, Key> first_of;
    std::map<Key, std::pair<uint64_t, uint64_t>> merged;
    for (auto& [key, totals] : groups) {
      std::string id = "api:" + std::to_string(std::get<3>(key));
      if (std::get<3>(key) < 0) {
        const Allocation& a = *example[key];
        const auto& at = stacks_of(a).attribute(a.stack, a.py_stack);
        id = at.site + "\n" + at.library + "\n" +
             frames_json(&at).dump(-1, ' ', false, json::error_handler_t::replace);
      }
      auto [it, added] = first_of.try_emplace(id, key);
      auto& m = merged[it->second];
      m.first += totals.first;
      m.second += totals.second;
    }
    groups.swap(merged);
  }
  std::vector<std::pair<Key, std::pair<uint64_t, uint64_t>>> sorted(groups.begin(), groups.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](auto& a, auto& b) { return a.second.first > b.second.first; });
  json out = json::array();
  uint64_t rest_bytes = 0, rest_count = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [key, totals] = sorted[i];
    if (i >= kTopStacks) {
      rest_bytes += totals.first;
      rest_count += totals.second;
      continue;
    }
    if (std::get<3>(key) >= 0) {
      out.push_back({{"site", format::api_name(static_cast<format::Api>(std::get<3>(key)))},
                     {"library", ""},
                     {"bytes", totals.first},
                     {"count", totals.second},
                     {"stack", json::array()}});
      continue;
    }
    const Allocation& a = *example[key];
    const auto& at = stacks_of(a).attribute(std::get<1>(key), std::get<2>(key));
    out.push_back({{"site", at.site.empty() ? "(unknown)" : at.site},
                   {"library", at.library},
                   {"bytes", totals.first},
                   {"count", totals.second},
                   {"stack", frames_json(&at)}});
  }
  if (rest_count)
    out.push_back({{"site", "(other stacks)"},
                   {"library", ""},
                   {"bytes", rest_bytes},
                   {"count", rest_count},
                   {"stack", json::array()}});
  return out;
}

json by_stack(const std::vector<Allocation>& allocs, collector::StackResolver& stacks) {
  return by_stack_of(allocs,
                     [&](const Allocation&) -> collector::StackResolver& { return stacks; });
}

json timeline_json(const collector::Timeline& t, uint64_t origin) {
  json points = json::array();
  const auto since = [origin](uint64_t ns) { return ns >= origin ? ns - origin : 0; };
  for (const auto& p : t.points())
    points.push_back({since(p.time_ns), p.max_bytes, p.last_bytes, p.min_bytes, since(p.max_ns),
                      since(p.min_ns)});
  return {{"bucket_ns", t.bucket_ns()},
          {"columns",
           {"time_ns", "max_bytes", "last_bytes", "min_bytes", "max_time_ns", "min_time_ns"}},
          {"points", points}};
}

json pools_json(const collector::DeviceModel& d) {
  json out = json::array();
  for (const auto& [handle, p] : d.pools)
    out.push_back({{"pool", hex(handle)},
                   {"reserved_bytes", p.reserved},
                   {"used_bytes", p.used},
                   {"peak_reserved_bytes", p.peak_reserved}});
  return out;
}

// The rank of a process from its launcher's environment (torchrun, Slurm, Open MPI, PMI).
std::optional<std::string> rank_of(const ProcessModel& p) {
  for (const char* key : kRankVariables)
    for (const auto& [k, v] : p.ranks)
      if (k == key) return v;
  return std::nullopt;
}

json rank_value(const std::string& r) {
  char* end = nullptr;
  long v = std::strtol(r.c_str(), &end, 10);
  if (!r.empty() && end && *end == '\0') return v;
  return r;
}

// One entry per ranked process, in rank order: its peak on each device and the largest.
json ranks_json(const Run& run, uint64_t origin) {
  json out = json::array();
  for (const auto& p : run.processes) {
    auto rank = rank_of(p);
    if (!rank) continue;
    json devices = json::array();
    uint64_t peak = 0;
    uint32_t peak_device = 0;
    for (const auto& [index, d] : p.devices) {
      uint64_t b = d.memory.peak_bytes();
      devices.push_back(
          {{"index", index},
           {"peak_bytes", b},
           {"peak_time_ns", d.memory.peak_time() >= origin ? d.memory.peak_time() - origin : 0}});
      if (b > peak) {
        peak = b;
        peak_device = index;
      }
    }
    json r = {{"rank", rank_value(*rank)},
              {"pid", p.pid},
              {"host", p.host},
              {"peak_bytes", peak},
              {"peak_device", peak_device},
              {"devices", devices},
              {"oom", p.ooms.size()},
              {"clean_exit", p.clean_exit}};
    for (const auto& [k, v] : p.ranks) {
      if (k == "LOCAL_RANK") r["local_rank"] = rank_value(v);
      if (k == "WORLD_SIZE") r["world_size"] = rank_value(v);
    }
    out.push_back(r);
  }
  std::stable_sort(out.begin(), out.end(), [](const json& a, const json& b) {
    if (a["rank"].is_number() && b["rank"].is_number()) return a["rank"] < b["rank"];
    // A rank is the process's environment: any bytes, not always UTF-8 (strict dump throws).
    const auto err = json::error_handler_t::replace;
    return a["rank"].dump(-1, ' ', false, err) < b["rank"].dump(-1, ' ', false, err);
  });
  return out;
}

std::string iso_time_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

std::string demangle(const std::string& name) {
  if (name.rfind("_Z", 0) != 0) return name;
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : name;
  std::free(d);
  return out;
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char buf[16];
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  // A CI runner reads a line whose first characters after blanks are "::" as a workflow
  // command ("::error::", "::add-mask::"), wherever the line is printed from.
  size_t lead = 0;
  while (lead < s.size() && (s[lead] == ' ' || s[lead] == '\t')) ++lead;
  const size_t command_colon = s.compare(lead, 2, "::") == 0 ? lead : std::string_view::npos;
  for (size_t i = 0; i < s.size();) {
    if (i == command_colon) {
      out += "\\x3a";
      ++i;
      continue;
    }
    unsigned char c = u[i];
    if (c < 0x80) {
      if (c == '\n')
        out += "\\n";
      else if (c == '\t')
        out += "\\t";
      else if (c == '\r')
        out += "\\r";
      else if (c < 0x20 || c == 0x7f) {
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length from the lead byte, each continuation byte checked, no
    // overlong form, no surrogate, nothing past U+10FFFF.
    size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    uint32_t cp = n == 4 ? c & 0x07u : n == 3 ? c & 0x0fu : c & 0x1fu;
    bool ok = n && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      if ((u[i + k] & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (u[i + k] & 0x3fu);
    }
    if (ok && ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
               (n == 4 && (cp < 0x10000 || cp > 0x10ffff))))
      ok = false;
    if (!ok) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
      ++i;
      continue;
    }
    // C1 controls (0x9b is a CSI on some terminals), line and paragraph separators, and the
    // bidirectional controls that reorder what is shown.
    if ((cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
        (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e ||
        cp == 0x200f || cp == 0x061c) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else {
      out.append(s.data() + i, n);
    }
    i += n;
  }
  return out;
}

std::string human_bytes(uint64_t bytes) { return collector::human_bytes(bytes); }

json to_json(const Run& run, const RunInfo& info) {
  const uint64_t origin = run.origin_ns;
  json report;
  report["schema"] = kSchema;
  report["tool"] = {{"name", "vramtrace"}, {"version", VRAMTRACE_VERSION}};
  report["generated_at"] = iso_time_now();

  json run_j;
  run_j["stand_in"] = run.stand_in;
  if (run.stand_in)
    run_j["stand_in_note"] =
        "recorded on the CPU stand-in for CUDA (tests/demo), not on a real GPU";
  if (!info.command.empty()) run_j["command"] = info.command;
  if (info.exit_code) run_j["exit_code"] = *info.exit_code;
  if (info.signal) run_j["signal"] = *info.signal;
  bool complete = !info.signal;  // a command killed by a signal did not run to its end
  for (const auto& p : run.processes)
    if (!p.clean_exit || !p.problem.empty()) complete = false;
  run_j["complete"] = complete;
  run_j["problems"] = run.problems;
  // Processes the library gave up on (no CUPTI, CUPTI held by another tool): their device
  // memory is in no record, so the run's peaks are lower bounds (and the CI gate refuses it).
  uint64_t not_profiled = 0;
  for (const auto& p : run.processes) not_profiled += !p.profiled();
  run_j["processes_not_profiled"] = not_profiled;
  uint64_t dropped = 0, events = 0, end = origin;
  for (const auto& p : run.processes) {
    dropped += p.dropped_events;
    events += p.events;
    end = std::max(end, p.end_ns);
  }
  run_j["events"] = events;
  run_j["dropped_events"] = dropped;
  run_j["duration_ns"] = end - origin;
  report["run"] = run_j;

  // Processes first: the run-wide devices refer to them.
  json processes = json::array();
  json ooms = json::array();
  json leaks = json::array();
  json live_at_death = json::array();
  json growth = json::array();
  json retained = json::array();
  std::map<std::pair<std::string, uint32_t>, uint64_t> final_by_device;
  std::map<std::pair<std::string, uint32_t>, json> peak_allocs_by_device;
  std::map<std::pair<std::string, uint32_t>, json> apis_by_device;
  std::map<std::pair<std::string, uint32_t>, json> reserved_by_device;
  std::map<std::pair<std::string, uint32_t>, json> allocator_by_device;
  collector::Symbolizer symbols;
  for (const auto& p : run.processes) {
    collector::StackResolver stacks(p, symbols);
    json pj;
    pj["pid"] = p.pid;
    pj["ppid"] = p.ppid;
    pj["host"] = p.host;
    pj["exe"] = p.exe;
    pj["cmdline"] = p.cmdline;
    json ranks = json::object();
    for (auto& [k, v] : p.ranks) ranks[k] = v;
    pj["ranks"] = ranks;
    pj["trace"] = p.trace_path;
    pj["start_realtime_ns"] = p.start_realtime_ns;
    pj["start_ns"] = p.start_ns >= origin ? p.start_ns - origin : 0;
    pj["end_ns"] = p.end_ns >= origin ? p.end_ns - origin : 0;
    // Still sending when the launcher stopped waiting (it outlived the command): running, not
    // cut short, and what it held then is not a leak.
    const bool still_running = std::find(info.still_running.begin(), info.still_running.end(),
                                         p.trace_path) != info.still_running.end();
    pj["clean_exit"] = p.clean_exit;
    pj["cut_short"] = !p.clean_exit && !still_running;
    if (still_running) pj["still_running"] = true;
    if (!p.problem.empty()) pj["problem"] = p.problem;
    pj["events"] = p.events;
    pj["dropped_events"] = p.dropped_events;
    pj["notices"] = p.notices;
    pj["profiled"] = p.profiled();
    if (!p.profiled()) pj["not_profiled_reason"] = p.not_profiled;
    if (!p.cupti_library.empty()) pj["cupti_library"] = p.cupti_library;
    if (p.exit_status) pj["exit_status"] = *p.exit_status;
    pj["launches"] = {{"recorded", p.launches_recorded}};
    if (!p.launches_recorded) pj["launches"]["note"] = kLaunchesNotRecorded;

    json devices = json::array();
    std::map<uint32_t, std::vector<Allocation>> still_by_device;  // once, not once per device
    for (const auto& [k, a] : p.live) still_by_device[a.device].push_back(a);
    for (const auto& [k, h] : p.vmm_handles) still_by_device[h.alloc.device].push_back(h.alloc);
    for (const auto& [index, d] : p.devices) {
      std::vector<Allocation>& still = still_by_device[index];
      std::sort(still.begin(), still.end(),
                [](const Allocation& a, const Allocation& b) { return a.bytes > b.bytes; });

      json top = json::array();
      for (size_t i = 0; i < d.live_at_peak.size() && i < kTopAllocations; ++i)
        top.push_back(allocation_json(d.live_at_peak[i], p, origin, stacks));

      json kernels = json::array();
      std::vector<std::pair<uint32_t, uint64_t>> ks = d.launches_by_kernel.all();
      std::sort(ks.begin(), ks.end(), [](auto& a, auto& b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
      });
      for (size_t i = 0; i < ks.size() && i < kTopKernels; ++i) {
        const std::string& n = p.kernel_name(ks[i].first);
        kernels.push_back({{"name", ks[i].first == 0 ? "(graph launch)" : demangle(n)},
                           {"mangled", n},
                           {"launches", ks[i].second}});
      }

      json dj = {
          {"index", index},
          {"name", d.name},
          {"uuid", d.uuid},
          {"total_bytes", d.total_bytes},
          {"peak",
           {{"bytes", d.memory.peak_bytes()},
            {"time_ns", d.memory.peak_time() >= origin ? d.memory.peak_time() - origin : 0},
            {"live_allocations", d.live_at_peak.size()},
            {"by_site", by_site(d.live_at_peak, stacks)},
            {"by_library", by_library(d.live_at_peak, stacks)},
            {"by_stack", by_stack(d.live_at_peak, stacks)},
            {"largest", top}}},
          {"reserved",
           {{"peak_bytes", d.footprint_peak},
            {"peak_time_ns", d.footprint_peak_time >= origin ? d.footprint_peak_time - origin : 0},
            {"note",
             "device memory this process held: allocations, plus what stream-ordered "
             "pools reserved beyond their allocations"}}},
          {"pools", pools_json(d)},
          {"final_live_bytes", d.memory.live_bytes()},
          {"final_live_allocations", still.size()},
          {"allocations", d.allocations},
          {"frees", d.frees},
          {"unmatched_frees", d.unmatched_frees},
          {"replaced_without_free", d.replaced_without_free},
          {"apis", api_table(d.apis)},
          {"timeline", timeline_json(d.memory.timeline, origin)},
      };
      if (d.footprint_peak != d.memory.peak_bytes())
        dj["reserved"]["timeline"] = timeline_json(d.footprint_timeline, origin);
      // Launches not recorded (--launches=off) are unknown, not 0: no count, no kernel at the
      // peak.
      if (p.launches_recorded) {
        dj["peak"]["last_kernel"] = demangle(p.kernel_name(d.kernel_at_peak));
        dj["launches"] = {{"recorded", true},
                          {"count", d.launches},
                          {"distinct_kernels", d.launches_by_kernel.distinct()},
                          {"top", kernels},
                          // Cumulative launch count per bucket: the page draws launches per
                          // bucket from it.
                          {"timeline", timeline_json(d.launch_timeline, origin)}};
      } else {
        dj["launches"] = {{"recorded", false}};
      }
      add_torch_device(dj, p, d, stacks, origin);
      devices.push_back(dj);
      auto key = std::make_pair(p.host, index);
      final_by_device[key] += d.memory.live_bytes();
      peak_allocs_by_device[key] = dj["peak"];
      apis_by_device[key] = dj["apis"];
      reserved_by_device[key] = dj["reserved"];

      // Leak suspects (or what was live when it died), what allocators cached, the model's
      // own state: collector/leaks.h.
      const bool died = collector::process_died(p);
      collector::StillLive left = collector::still_live(p, index, still, died);
      const uint64_t retained_segments = left.retained_segment_bytes;
      for (auto& [id, pool] : p.user_pools) {
        if (pool.device != index) continue;
        auto st = pool.view.state();
        if (st.free_bytes())
          retained.push_back({{"pid", p.pid},
                              {"device", index},
                              {"pool", pool.name},
                              {"retained_bytes", st.free_bytes()},
                              {"reserved_bytes", st.reserved},
                              {"in_use_bytes", st.in_use},
                              {"blocks_in_use", st.blocks},
                              {"note",
                               "reserved by the allocator and free at exit: cached, not "
                               "leaked (its blocks still in use are in leaks)"}});
      }
      if (left.model_state_bytes)
        devices.back()["model_state_at_exit_bytes"] = left.model_state_bytes;
      if (left.cuda_graph_bytes)
        devices.back()["cuda_graph_blocks_at_exit_bytes"] = left.cuda_graph_bytes;
      // What the forwards keep across iterations is the diagnosis' cause, not a leak.
      std::vector<Allocation> kept_blocks;
      std::optional<collector::KeptAcrossIterations> kept;
      if (p.torch_memory && !died && !still_running) {
        kept = collector::kept_across_iterations(*p.torch_memory, index, UINT64_MAX - 1);
        if (kept) kept_blocks = collector::take_kept(*p.torch_memory, *kept, index, left.suspects);
      }
      if (!still_running) {
        for (json& g : by_site(left.suspects, stacks)) {
          g["device"] = index;
          g["pid"] = p.pid;
          (died ? live_at_death : leaks).push_back(g);
        }
        for (json& g : by_site(kept_blocks, stacks)) {
          g["device"] = index;
          g["pid"] = p.pid;
          g["kept"] = collector::kept_kind_name(kept->kind);
          leaks.push_back(g);
        }
      }
      for (const auto& g : collector::device_growth(p, d, left.suspects, site_text_of(stacks))) {
        json j = growth_json(g, stacks, origin);
        j["device"] = index;
        j["pid"] = p.pid;
        growth.push_back(j);
      }
      if (d.has_allocator_view) {
        json av = {{"now", fragmentation_json(d.frag, origin)},
                   {"most_free", fragmentation_json(d.frag_most_free, origin)},
                   {"peak_in_use_bytes", d.allocator_peak_in_use},
                   {"peak_in_use_time_ns",
                    d.allocator_peak_time >= origin ? d.allocator_peak_time - origin : 0},
                   {"free_timeline", timeline_json(d.frag_free_timeline, origin)},
                   {"largest_free_timeline", timeline_json(d.frag_largest_timeline, origin)}};
        if (d.frag_at_peak) av["at_peak"] = fragmentation_json(*d.frag_at_peak, origin);
        json pools = json::array();
        for (auto& [id, pool] : p.user_pools)
          if (pool.device == index)
            pools.push_back({{"name", pool.name},
                             {"peak_reserved_bytes", pool.peak_reserved},
                             {"peak_in_use_bytes", pool.peak_in_use},
                             {"ooms", pool.ooms},
                             {"final", fragmentation_json(pool.view.state(), origin)}});
        av["pools"] = pools;
        devices.back()["allocator"] = av;
        allocator_by_device[key] = av;
        if (retained_segments) devices.back()["retained_segment_bytes"] = retained_segments;
      }
      if (!d.phase_at_peak.empty()) {
        std::string path;
        for (uint32_t n : d.phase_at_peak) path += (path.empty() ? "" : " > ") + p.kernel_name(n);
        devices.back()["peak"]["phase"] = path;
        peak_allocs_by_device[key]["phase"] = path;
      }
    }
    pj["devices"] = devices;

    json host = {{"peak_bytes", p.pinned_host.peak_bytes()},
                 {"final_live_bytes", p.pinned_host.live_bytes()},
                 {"apis", api_table(p.host_apis)}};
    pj["pinned_host"] = host;

    json failures = json::array();
    for (auto& [result, count] : p.failures_by_result)
      failures.push_back({{"error", result}, {"count", count}});
    pj["failed_allocations"] = failures;

    // Iterations and NVTX phases.
    std::string source = p.iteration_source;
    if (source == "kernel")
      source = "kernel " + demangle(p.kernel_name(p.iteration_kernel)) +
               (p.iteration_period == 1
                    ? std::string(" (every launch)")
                    : " (every " + std::to_string(p.iteration_period) + " launches)");
    json iter = {{"count", p.iterations.size()}, {"source", source}};
    if (!p.iterations.empty())
      iter["first_ns"] = p.iterations.front() >= origin ? p.iterations.front() - origin : 0;
    pj["iterations"] = iter;
    if (p.phases_total) {
      json phases = json::array();
      for (auto& [name, st] : p.range_stats)
        phases.push_back(
            {{"name", p.kernel_name(name)}, {"count", st.count}, {"total_ns", st.total_ns}});
      std::stable_sort(phases.begin(), phases.end(), [](const json& a, const json& b) {
        return a["total_ns"].get<uint64_t>() > b["total_ns"].get<uint64_t>();
      });
      json ranges = json::array();
      for (size_t i = 0; i < p.phases.size() && i < 2000; ++i) {
        const auto& ph = p.phases[i];
        ranges.push_back({{"name", p.kernel_name(ph.name)},
                          {"thread", ph.thread},
                          {"depth", ph.depth},
                          {"start_ns", ph.start_ns >= origin ? ph.start_ns - origin : 0},
                          {"end_ns", ph.end_ns >= origin ? ph.end_ns - origin : 0}});
      }
      pj["phases"] = {{"by_name", phases}, {"ranges", ranges}, {"total", p.phases_total}};
    }
    if (p.torch_trace) {
      pj["torch_allocator_trace"] = {{"merged", true}};
      if (!p.torch_trace_problem.empty())
        pj["torch_allocator_trace"]["problem"] = p.torch_trace_problem;
    }

    json pooms = json::array();
    for (const auto& o : p.ooms) {
      std::vector<Allocation> live = o.live;
      json largest = json::array();
      for (size_t i = 0; i < live.size() && i < 10; ++i)
        largest.push_back(allocation_json(live[i], p, origin, stacks));
      Allocation request;
      request.api = o.api;
      request.stack = o.stack;
      request.py_stack = o.py_stack;
      Site request_site = site_of(request, stacks);
      json oj = {{"device", o.device},
                 {"pid", o.pid},
                 {"requested_bytes", o.requested_bytes},
                 {"time_ns", o.time_ns >= origin ? o.time_ns - origin : 0},
                 {"api", format::api_name(o.api)},
                 {"error", "CUDA_ERROR_OUT_OF_MEMORY"},
                 {"thread", o.thread},
                 {"live_bytes", o.live_bytes},
                 {"site", request_site.text},
                 {"library", request_site.library},
                 {"stack", frames_json(request_site.stack)},
                 {"live_by_site", by_site(live, stacks)},
                 {"live_by_library", by_library(live, stacks)},
                 {"largest_live", largest}};
      if (o.live.empty() && o.live_bytes) oj["live_set_omitted"] = true;  // after 64 OOMs
      if (o.free_bytes) oj["free_bytes"] = *o.free_bytes;
      if (o.total_bytes) oj["total_bytes"] = *o.total_bytes;
      // What the device had in use that this process did not hold: other processes, other
      // contexts, the driver itself.
      const std::optional<uint64_t> others = collector::held_by_others(o);
      if (others) oj["held_by_others_bytes"] = *others;
      if (!o.last_kernel.empty()) oj["last_kernel"] = demangle(o.last_kernel);
      bool torch_pool = false;
      if (o.allocator) {
        oj["allocator"] = {{"pool", o.pool}, {"requested_bytes", o.allocator_request}};
        if (o.api == format::Api::Unknown) oj["api"] = "pool " + o.pool;
        for (auto& [id, pool] : p.user_pools)
          if (pool.name == o.pool && pool.torch) torch_pool = true;
      }
      if (o.fragmentation) oj["fragmentation"] = fragmentation_json(*o.fragmentation, origin);
      oj["driver_attempts"] = o.driver_attempts;
      if (o.recovered) oj["recovered"] = true;
      collector::OomFindingInput fin;
      fin.oom = &o;
      fin.held_by_others = others;
      fin.growth = collector::growth_by_site(o.survivors, p, o.time_ns, site_text_of(stacks));
      fin.torch_pool = torch_pool;
      if (p.torch_memory)
        fin.kept = collector::kept_across_iterations(*p.torch_memory, o.device, o.time_ns);
      if (!fin.growth.empty()) {
        json growth_then = json::array();
        for (const auto& g : fin.growth) growth_then.push_back(growth_json(g, stacks, origin));
        oj["growth"] = growth_then;
      }
      add_torch_oom(oj, p, o, stacks);
      // Headroom against the effective limit (PyTorch's per-process fraction, what other
      // processes left): the device's free memory beyond it was never this process's.
      auto lim = collector::oom_limit(o, p);
      if (lim.kind != "device") {
        oj["limit"] = {{"bytes", lim.bytes}, {"kind", lim.kind}, {"title", lim.title}};
        fin.limit = lim;
      }
      for (const json& s : oj["live_by_site"])
        fin.live_by_site.emplace_back(s["site"].get<std::string>(), s["bytes"].get<uint64_t>());
      oj["findings"] = findings_json(collector::oom_findings(fin), stacks, origin);
      pooms.push_back(oj);
      ooms.push_back(oj);
    }
    pj["oom"] = pooms;
    processes.push_back(pj);
  }

  json devices = json::array();
  std::map<uint32_t, std::unique_ptr<collector::StackResolver>> device_stacks;  // by process
  for (const auto& d : run.devices) {
    auto key = std::make_pair(d.host, d.index);
    json by_pid = json::array();
    for (auto& [pid, bytes] : d.peak_by_pid)
      if (bytes) by_pid.push_back({{"pid", pid}, {"bytes", bytes}});
    json dj = {{"index", d.index},
               {"host", d.host},
               {"name", d.name},
               {"uuid", d.uuid},
               {"total_bytes", d.total_bytes},
               {"peak",
                {{"bytes", d.peak_bytes},
                 {"time_ns", d.peak_time_ns >= origin ? d.peak_time_ns - origin : 0},
                 {"by_process", by_pid}}},
               {"final_live_bytes", final_by_device[key]},
               {"timeline", timeline_json(d.timeline, origin)}};
    if (d.total_bytes)
      dj["peak"]["fraction_of_capacity"] =
          static_cast<double>(d.peak_bytes) / static_cast<double>(d.total_bytes);
    // Several processes: what each of them held at the device's peak, together, each
    // allocation resolved with its own process's stacks.
    if (d.peak_by_pid.size() > 1) {
      auto stacks_of = [&](const Allocation& a) -> collector::StackResolver& {
        auto& r = device_stacks[a.process];
        if (!r) r = std::make_unique<collector::StackResolver>(run.processes[a.process], symbols);
        return *r;
      };
      json top = json::array();
      for (size_t i = 0; i < d.live_at_peak.size() && i < kTopAllocations; ++i) {
        const Allocation& a = d.live_at_peak[i];
        json aj = allocation_json(a, run.processes[a.process], origin, stacks_of(a));
        aj["pid"] = run.processes[a.process].pid;
        top.push_back(aj);
      }
      std::map<uint64_t, uint64_t> count_by_pid;
      for (const Allocation& a : d.live_at_peak) ++count_by_pid[run.processes[a.process].pid];
      for (json& bp : dj["peak"]["by_process"])
        bp["count"] = count_by_pid[bp["pid"].get<uint64_t>()];
      dj["peak"]["live_allocations"] = d.live_at_peak.size();
      dj["peak"]["by_site"] = by_site_of(d.live_at_peak, stacks_of);
      dj["peak"]["by_library"] = by_library_of(d.live_at_peak, stacks_of);
      dj["peak"]["by_stack"] = by_stack_of(d.live_at_peak, stacks_of);
      dj["peak"]["largest"] = top;
    }
    // With one process the process's view of the peak is the device's: show it here too.
    if (d.peak_by_pid.size() <= 1 && peak_allocs_by_device.count(key)) {
      const json& pp = peak_allocs_by_device[key];
      dj["peak"]["live_allocations"] = pp["live_allocations"];
      dj["peak"]["by_site"] = pp["by_site"];
      dj["peak"]["by_library"] = pp["by_library"];
      dj["peak"]["by_stack"] = pp["by_stack"];
      dj["peak"]["largest"] = pp["largest"];
      if (pp.contains("last_kernel")) dj["peak"]["last_kernel"] = pp["last_kernel"];
      dj["apis"] = apis_by_device[key];
      dj["reserved"] = reserved_by_device[key];
      if (allocator_by_device.count(key)) dj["allocator"] = allocator_by_device[key];
      if (pp.contains("phase")) dj["peak"]["phase"] = pp["phase"];
    }
    devices.push_back(dj);
  }
  report["devices"] = devices;
  report["processes"] = processes;
  json ranks = ranks_json(run, origin);
  if (!ranks.empty()) {
    report["ranks"] = ranks;
    const json* worst = &ranks[0];
    uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
    for (const auto& r : ranks) {
      uint64_t b = r["peak_bytes"].get<uint64_t>();
      if (b > (*worst)["peak_bytes"].get<uint64_t>()) worst = &r;
      lo = std::min(lo, b);
      hi = std::max(hi, b);
      sum += b;
    }
    double mean = static_cast<double>(sum) / static_cast<double>(ranks.size());
    report["worst_rank"] = {{"rank", (*worst)["rank"]},
                            {"pid", (*worst)["pid"]},
                            {"host", (*worst)["host"]},
                            {"device", (*worst)["peak_device"]},
                            {"peak_bytes", (*worst)["peak_bytes"]}};
    report["rank_imbalance"] = {{"min_peak_bytes", lo},
                                {"max_peak_bytes", hi},
                                {"mean_peak_bytes", mean},
                                {"spread_bytes", hi - lo},
                                {"max_over_mean", mean > 0 ? static_cast<double>(hi) / mean : 0.0}};
  }
  report["oom"] = ooms;
  std::stable_sort(leaks.begin(), leaks.end(), [](const json& a, const json& b) {
    return a["bytes"].get<uint64_t>() > b["bytes"].get<uint64_t>();
  });
  report["leaks"] = leaks;
  std::stable_sort(live_at_death.begin(), live_at_death.end(), [](const json& a, const json& b) {
    return a["bytes"].get<uint64_t>() > b["bytes"].get<uint64_t>();
  });
  report["live_at_death"] = live_at_death;
  report["growth"] = growth;
  report["retained"] = retained;
  lift_single_process(report);
  report["diagnosis"] = diagnosis_json(report, run, symbols);
  return report;
}

std::string summary_text(const json& r) {
  std::string out;
  char line[512];
  if (r[field::run].value(field::stand_in, false))
    out += "vramtrace: NOTE: recorded on the CPU stand-in for CUDA, not on a real GPU\n";
  // First: what is not in the report qualifies every figure after it.
  size_t not_profiled = 0;
  for (const auto& p : r[field::processes]) {
    if (p.value(field::profiled, true)) continue;
    if (++not_profiled > kMaxNotProfiledLines) continue;
    std::string exe = p[field::exe].get<std::string>();
    exe = exe.substr(exe.find_last_of('/') + 1);
    out += "vramtrace: NOT PROFILED: pid " + std::to_string(p[field::pid].get<uint64_t>()) +
           (exe.empty() ? "" : " (" + printable(exe) + ")") + ": " +
           printable(p[field::not_profiled_reason].get<std::string>()) + "\n";
  }
  if (not_profiled > kMaxNotProfiledLines)
    out += "vramtrace: NOT PROFILED: " + std::to_string(not_profiled - kMaxNotProfiledLines) +
           " more process(es) (processes[].not_profiled_reason in report.json)\n";
  if (not_profiled)
    out += "vramtrace: WARNING: " + std::to_string(not_profiled) + " of " +
           std::to_string(r[field::processes].size()) +
           " process(es) not profiled: the device memory they used is unknown and not in this "
           "report\n";
  else if (r[field::devices].empty())
    out += "vramtrace: no CUDA device memory was used\n";
  // Launches off: say so once, naming the processes when only some of them were.
  std::vector<std::string> no_launches;
  for (const auto& p : r[field::processes])
    if (p.contains(field::launches) && p[field::launches].is_object() &&
        p[field::launches].value(field::recorded, true) == false && p.contains(field::pid))
      no_launches.push_back(p[field::pid].dump());
  if (!no_launches.empty()) {
    std::string who;
    if (no_launches.size() < r[field::processes].size()) {
      who = " in pid";
      for (size_t i = 0; i < no_launches.size() && i < kMaxNotProfiledLines; ++i)
        who += (i ? ", " : " ") + no_launches[i];
      if (no_launches.size() > kMaxNotProfiledLines) who += " and others";
    }
    out += "vramtrace: NOTE: kernel launches not recorded" + who +
           " (--launches=off): no launch counts, no kernel at the peak, no iterations from the "
           "launch rhythm\n";
  }
  for (const auto& d : r[field::devices]) {
    uint64_t peak = peak_bytes(d);
    uint64_t total = total_bytes(d);
    double at_s = static_cast<double>(peak_time_ns(d)) / 1e9;
    std::snprintf(line, sizeof line, "vramtrace: device %u (%s): peak %s", device_index(d),
                  printable(device_name(d)).substr(0, 300).c_str(), human_bytes(peak).c_str());
    out += line;
    // Against the effective limit when the run had a tighter one than the card.
    const json* lim = nullptr;
    if (r.contains(field::diagnosis) && r[field::diagnosis].contains(field::limit) &&
        r[field::diagnosis][field::device] == d[field::index] &&
        r[field::diagnosis][field::limit][field::kind] != "device")
      lim = &r[field::diagnosis][field::limit];
    if (lim) {
      const uint64_t lb = (*lim)[field::bytes].get<uint64_t>();
      std::snprintf(line, sizeof line, " of its %s limit (%.1f%%; %s)", human_bytes(lb).c_str(),
                    lb ? 100.0 * static_cast<double>(peak) / static_cast<double>(lb) : 0.0,
                    (*lim)[field::title].get<std::string>().c_str());
      out += line;
    } else if (total) {
      std::snprintf(line, sizeof line, " of %s (%.1f%%)", human_bytes(total).c_str(),
                    100.0 * static_cast<double>(peak) / static_cast<double>(total));
      out += line;
    }
    bool died_here = false;  // a process on this device died holding memory
    if (r.contains(field::live_at_death))
      for (const auto& l : r[field::live_at_death])
        died_here = died_here || l[field::device] == d[field::index];
    std::snprintf(line, sizeof line, " at %.3f s; %s still live at the end%s\n", at_s,
                  human_bytes(final_live_bytes(d)).c_str(),
                  died_here ? " (the program died holding it)" : "");
    out += line;
    if (d.contains(field::categories)) {
      // What the memory was at the peak, largest first.
      std::vector<std::pair<uint64_t, std::string>> cats;
      for (auto& [k, v] : d[field::categories][field::at_peak].items())
        if (v.get<uint64_t>())
          cats.push_back({v.get<uint64_t>(), d[field::categories][field::titles].value(k, k)});
      std::sort(cats.rbegin(), cats.rend());
      std::string text = "vramtrace:   at the peak:";
      for (size_t i = 0; i < cats.size() && i < 5; ++i)
        text += (i ? ", " : " ") + cats[i].second + " " + human_bytes(cats[i].first);
      out += text + "\n";
    }
  }
  // With a fatal OOM known, the failures the job survived are counted on one line and the
  // fatal one gets the diagnosis: where, why, and what to do.
  bool any_fatal = false;
  uint64_t survived = 0;
  for (const auto& o : r[field::oom]) any_fatal = any_fatal || o.value(field::fatal, false);
  for (const auto& o : r[field::oom]) {
    if (any_fatal && !o.value(field::fatal, false)) {
      ++survived;
      continue;
    }
    std::snprintf(line, sizeof line,
                  "vramtrace: OUT OF MEMORY on device %u: %s requested with %s live (pid %llu)\n",
                  o[field::device].get<unsigned>(), human_bytes(requested_bytes(o)).c_str(),
                  human_bytes(o[field::live_bytes].get<uint64_t>()).c_str(),
                  static_cast<unsigned long long>(o[field::pid].get<uint64_t>()));
    if (o.value(field::recovered, false)) {
      std::snprintf(line, sizeof line,
                    "vramtrace: device %u: a %s request failed and was retried after the "
                    "allocator freed its cache (not an OOM of the program)\n",
                    o[field::device].get<unsigned>(), human_bytes(requested_bytes(o)).c_str());
      out += line;
      continue;
    }
    out += line;
    if (o.contains(field::phase)) {
      std::string where = "vramtrace:   when: " + o[field::phase].get<std::string>();
      if (o.contains(field::module)) where += " of " + o[field::module].get<std::string>();
      if (o.contains(field::iteration) && o[field::iteration].get<int64_t>() >= 0)
        where += ", iteration " + std::to_string(o[field::iteration].get<int64_t>());
      if (o.contains(field::python_site))
        where += ", at " + o[field::python_site].get<std::string>();
      out += where + "\n";
    }
    if (o.contains(field::findings) && !o[field::findings].empty())
      out += "vramtrace:   likely cause: " +
             printable(o[field::findings][0][field::title].get<std::string>()) + "\n";
  }
  if (survived) {
    std::snprintf(line, sizeof line,
                  "vramtrace: %llu other allocation failure(s) were survived (a library's "
                  "workspace attempt that fell back, a caught error): see report.json oom[]\n",
                  static_cast<unsigned long long>(survived));
    out += line;
  }
  if (r.contains(field::diagnosis)) {
    const json& dg = r[field::diagnosis];
    // A job that did not die but keeps memory across iterations: the cause, before the remedies.
    if (dg.value(field::verdict, "") != "oom" && dg.contains(field::cause))
      out +=
          "vramtrace:   growing: " + printable(dg[field::cause][field::title].get<std::string>()) +
          "\n";
    size_t n = 0;
    for (const auto& m : dg.value(field::remedies, json::array())) {
      if (n++ == 3) break;
      std::string peak;
      if (m.contains(field::predicted_peak_high_bytes))
        peak = ", peak between " + human_bytes(m[field::predicted_peak_bytes].get<uint64_t>()) +
               " and " + human_bytes(m[field::predicted_peak_high_bytes].get<uint64_t>());
      else if (m.contains(field::predicted_peak_bytes))
        peak =
            std::string(m.value(field::predicted_peak_is_lower_bound, false)   ? ", peak at least "
                        : m.value(field::predicted_peak_is_upper_bound, false) ? ", peak at most "
                                                                               : ", peak about ") +
            human_bytes(m[field::predicted_peak_bytes].get<uint64_t>());
      if (m.value(field::leaves_growth, false)) peak += "; the growth goes on";
      if (m.contains(field::replayed)) {
        // What the allocator's model said when it replayed the run's requests with the remedy.
        const json& w = m[field::replayed];
        if (w.value(field::verdict, "") == "fits")
          peak += "; replayed: fits, PyTorch reserving " +
                  human_bytes(w.value(field::reserved_peak_bytes, uint64_t{0})) +
                  (w.value("up_to_recorded_oom", false) ? " (as far as the run got)" : "");
        else if (w.contains(field::oom))
          peak += "; replayed: runs out at a " +
                  human_bytes(w[field::oom].value(field::requested_bytes, uint64_t{0})) +
                  " request" +
                  (w[field::oom].value(field::module, std::string()).empty()
                       ? std::string()
                       : " in " + printable(w[field::oom][field::module].get<std::string>()));
      }
      out += "vramtrace:   remedy: " + printable(m[field::title].get<std::string>()) + ": saves " +
             human_bytes(m[field::saves_bytes].get<uint64_t>()) + peak + " (" +
             printable(m[field::how].get<std::string>()) + ")\n";
    }
  }
  if (r.contains(field::worst_rank)) {
    const json& w = r[field::worst_rank];
    std::snprintf(line, sizeof line,
                  "vramtrace: %zu ranks; worst rank %s: peak %s on device %u; max/mean %.2f\n",
                  r[field::ranks].size(),
                  printable(w[field::rank].dump(-1, ' ', false, json::error_handler_t::replace))
                      .substr(0, 100)
                      .c_str(),
                  human_bytes(w[field::peak_bytes].get<uint64_t>()).c_str(),
                  w[field::device].get<unsigned>(),
                  r[field::rank_imbalance][field::max_over_mean].get<double>());
    out += line;
  }
  uint64_t leak_bytes = 0, leak_count = 0, kept_bytes = 0, kept_count = 0;
  for (const auto& l : r[field::leaks]) {
    if (l.contains("kept")) {
      kept_bytes += l[field::bytes].get<uint64_t>();
      kept_count += l[field::count].get<uint64_t>();
      continue;
    }
    leak_bytes += l[field::bytes].get<uint64_t>();
    leak_count += l[field::count].get<uint64_t>();
  }
  uint64_t dead_bytes = 0;
  if (r.contains(field::live_at_death))
    for (const auto& l : r[field::live_at_death]) dead_bytes += l[field::bytes].get<uint64_t>();
  if (dead_bytes)
    out += "vramtrace: " + human_bytes(dead_bytes) +
           " was live when the process died (not counted as leaks)\n";
  if (leak_count) {
    std::snprintf(line, sizeof line,
                  "vramtrace: %llu allocation(s), %s, still live at exit (leak suspects)\n",
                  static_cast<unsigned long long>(leak_count), human_bytes(leak_bytes).c_str());
    out += line;
  }
  if (kept_count) {
    std::snprintf(line, sizeof line,
                  "vramtrace: %llu block(s), %s, still live at exit were kept across iterations "
                  "by the forwards (the cause above), not leaked\n",
                  static_cast<unsigned long long>(kept_count), human_bytes(kept_bytes).c_str());
    out += line;
  }
  if (r.contains(field::growth)) {
    // The five fastest sites, then the total of the rest (a graph kept alive grows at every
    // module of the model: dozens of sites).
    size_t n = 0;
    uint64_t rest = 0, rest_sites = 0;
    for (const auto& g : r[field::growth]) {
      if (n++ >= 5) {
        rest += g[field::bytes_per_iteration].get<uint64_t>();
        ++rest_sites;
        continue;
      }
      std::snprintf(line, sizeof line,
                    "vramtrace: grows by %s per iteration over %lld iterations: %s\n",
                    human_bytes(g[field::bytes_per_iteration].get<uint64_t>()).c_str(),
                    static_cast<long long>(g[field::iterations].get<int64_t>()),
                    printable(g[field::site].get<std::string>()).substr(0, 300).c_str());
      out += line;
    }
    if (rest_sites) {
      std::snprintf(line, sizeof line,
                    "vramtrace: ... and %s per iteration more at %llu other sites (report.json "
                    "growth[])\n",
                    human_bytes(rest).c_str(), static_cast<unsigned long long>(rest_sites));
      out += line;
    }
  }
  for (const auto& p : r[field::processes])
    if (p.value(field::still_running, false) && p.contains(field::pid))
      out += "vramtrace: NOTE: pid " + p[field::pid].dump() +
             " was still running when the report was written: what it held then is not counted "
             "as leaked\n";
  if (r[field::run][field::dropped_events].get<uint64_t>()) {
    std::snprintf(
        line, sizeof line, "vramtrace: WARNING: %llu events were dropped (buffer full)\n",
        static_cast<unsigned long long>(r[field::run][field::dropped_events].get<uint64_t>()));
    out += line;
  }
  for (const auto& p : r[field::run][field::problems])
    out += "vramtrace: WARNING: " + printable(p.get<std::string>()) + "\n";
  return out;
}

json sites_json(const std::vector<Allocation>& allocs, collector::StackResolver& stacks) {
  return by_site(allocs, stacks);
}

json libraries_json(const std::vector<Allocation>& allocs, collector::StackResolver& stacks) {
  return by_library(allocs, stacks);
}

}  // namespace vramtrace::report
