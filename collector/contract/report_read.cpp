// report.json read back into ReportRead (see report_read.h), and what a stored one lacks.
#include "collector/contract/report_read.h"

#include <algorithm>

#include "collector/contract/report_keys.h"

using nlohmann::json;

namespace vramtrace::collector {

namespace {

const json* at(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}
const json* object_at(const json& j, const char* key) {
  const json* v = at(j, key);
  return v && v->is_object() ? v : nullptr;
}
const json* array_at(const json& j, const char* key) {
  const json* v = at(j, key);
  return v && v->is_array() ? v : nullptr;
}
// A whole number at or above 0, written signed or unsigned (a report built in C++ holds signed
// integers; one parsed from a file, unsigned ones).
std::optional<uint64_t> count_at(const json& j, const char* key) {
  const json* v = at(j, key);
  if (!v || !v->is_number_integer()) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  const int64_t s = v->get<int64_t>();
  return s < 0 ? std::nullopt : std::optional<uint64_t>(static_cast<uint64_t>(s));
}
std::optional<int64_t> int_at(const json& j, const char* key) {
  const json* v = at(j, key);
  return v && v->is_number_integer() ? std::optional<int64_t>(v->get<int64_t>()) : std::nullopt;
}
std::optional<bool> bool_at(const json& j, const char* key) {
  const json* v = at(j, key);
  return v && v->is_boolean() ? std::optional<bool>(v->get<bool>()) : std::nullopt;
}
std::optional<std::string> string_at(const json& j, const char* key) {
  const json* v = at(j, key);
  return v && v->is_string() ? std::optional<std::string>(v->get<std::string>()) : std::nullopt;
}
std::string text_at(const json& j, const char* key) { return string_at(j, key).value_or(""); }

// A peak's groups (by_site named by "site", by_library by "library", by_module by "module"):
// absent when the peak has no such list; an entry without its name is left out.
std::optional<std::vector<PeakGroup>> groups_at(const json* peak, const char* list,
                                                const char* name) {
  const json* groups = peak ? array_at(*peak, list) : nullptr;
  if (!groups) return std::nullopt;
  std::vector<PeakGroup> out;
  for (const auto& g : *groups)
    if (auto n = string_at(g, name))
      out.push_back(
          {*n, count_at(g, field::bytes).value_or(0), count_at(g, field::count).value_or(0)});
  return out;
}

std::optional<PeakTorch> torch_at(const json& device) {
  const json* cat = object_at(device, field::categories);
  const json* at_peak = cat ? object_at(*cat, field::at_peak) : nullptr;
  if (!at_peak) return std::nullopt;
  PeakTorch t;
  if (const json* order = array_at(*cat, field::order))
    for (const auto& k : *order)
      if (k.is_string()) t.order.push_back(k.get<std::string>());
  if (const json* titles = object_at(*cat, field::titles))
    for (const auto& [k, v] : titles->items())
      if (v.is_string()) t.titles[k] = v.get<std::string>();
  for (const auto& [k, v] : at_peak->items())
    if (v.is_number_unsigned()) t.at_peak[k] = v.get<uint64_t>();
  const json* peak = object_at(device, field::peak);
  t.by_module = groups_at(peak, field::by_module, field::module).value_or(t.by_module);
  if (const json* lines = peak ? array_at(*peak, field::by_line) : nullptr)
    for (const auto& l : *lines) {
      PeakLine line;
      line.site = text_at(l, field::site);
      if (line.site.empty()) continue;
      line.bytes = count_at(l, field::bytes).value_or(0);
      line.count = count_at(l, field::count).value_or(0);
      if (const json* cats = object_at(l, field::categories))
        for (const auto& [k, v] : cats->items())
          if (v.is_number_unsigned()) line.categories[k] += v.get<uint64_t>();
      line.module = text_at(l, field::module);
      t.by_line.push_back(std::move(line));
    }
  return t;
}

DeviceEntry device_of(const json& d) {
  DeviceEntry e;
  if (auto i = count_at(d, field::index); i && *i <= UINT32_MAX)
    e.index = static_cast<uint32_t>(*i);
  e.name = string_at(d, field::name);
  const json* peak = object_at(d, field::peak);
  if (peak) e.peak_bytes = count_at(*peak, field::bytes).value_or(0);
  e.by_site = groups_at(peak, field::by_site, field::site);
  e.by_library = groups_at(peak, field::by_library, field::library);
  e.has_categories = object_at(d, field::categories) != nullptr;
  e.torch = torch_at(d);
  return e;
}

ProcessEntry process_of(const json& p) {
  ProcessEntry e;
  if (const json* pid = at(p, field::pid); pid && pid->is_number_unsigned())
    e.pid = pid->get<uint64_t>();
  e.exe = text_at(p, field::exe);
  e.profiled = bool_at(p, field::profiled);
  e.not_profiled_reason = text_at(p, field::not_profiled_reason);
  if (const json* notices = array_at(p, field::notices))
    for (const auto& n : *notices)
      if (n.is_string()) e.notices.push_back(n.get<std::string>());
  if (const json* ranks = object_at(p, field::ranks))
    for (const auto& [k, v] : ranks->items())
      if (v.is_string()) e.ranks[k] = v.get<std::string>();
  if (const json* devices = array_at(p, field::devices))
    for (const auto& d : *devices) e.devices.push_back(device_of(d));
  e.exit_status = int_at(p, field::exit_status);
  e.cut_short = bool_at(p, field::cut_short);
  e.clean_exit = bool_at(p, field::clean_exit);
  return e;
}

OomEntry oom_of(const json& o) {
  OomEntry e;
  e.fatal = bool_at(o, field::fatal).value_or(false);
  e.recovered = bool_at(o, field::recovered).value_or(false);
  e.device = count_at(o, field::device);
  e.requested_bytes = count_at(o, field::requested_bytes);
  e.python_site = text_at(o, field::python_site);
  e.site = text_at(o, field::site);
  e.phase = text_at(o, field::phase);
  e.iteration = int_at(o, field::iteration);
  return e;
}

RunEntry run_of(const json& r) {
  RunEntry e;
  e.exit_code = int_at(r, field::exit_code);
  e.signal = int_at(r, field::signal);
  if (const json* problems = array_at(r, field::problems))
    for (const auto& p : *problems)
      if (p.is_string()) e.problems.push_back(p.get<std::string>());
  e.complete = bool_at(r, field::complete);
  if (const json* cmd = array_at(r, field::command))
    for (const auto& a : *cmd) {
      if (!a.is_string()) {  // not a command line this version wrote: not compared
        e.command.clear();
        break;
      }
      e.command += (e.command.empty() ? "" : " ") + a.get<std::string>();
    }
  return e;
}

}  // namespace

ReportRead::ReportRead(const json& r) : is_object(r.is_object()), document(r) {
  if (const json* devices = array_at(r, field::devices))
    for (const auto& d : *devices) this->devices.push_back(device_of(d));
  if (const json* procs = array_at(r, field::processes))
    for (const auto& p : *procs) processes.push_back(process_of(p));
  if (const json* leaks = array_at(r, field::leaks))
    for (const auto& l : *leaks)
      if (const json* b = at(l, field::bytes); b && b->is_number_unsigned())
        leak_bytes.push_back(b->get<uint64_t>());
  if (const json* ooms = array_at(r, field::oom))
    for (const auto& o : *ooms) oom.push_back(oom_of(o));
  if (const json* growth_list = array_at(r, field::growth))
    for (const auto& g : *growth_list)
      growth.push_back({count_at(g, field::device).value_or(0),
                        count_at(g, field::bytes_per_iteration).value_or(0),
                        text_at(g, field::site)});
  if (const json* w = object_at(r, field::worst_rank); w && at(*w, field::rank))
    worst_rank =
        WorstRank{at(*w, field::rank)->dump(-1, ' ', false, json::error_handler_t::replace),
                  count_at(*w, field::peak_bytes).value_or(0),
                  static_cast<uint32_t>(count_at(*w, field::device).value_or(0))};
  if (const json* run_object = object_at(r, field::run)) run = run_of(*run_object);
}

std::string malformed_report(const json& r) {
  constexpr uint64_t kMaxExact = 1ull << 53;
  auto uint_at = [](const json& j, const char* key, uint64_t max) {
    return j.is_object() && j.contains(key) && j[key].is_number_unsigned() &&
           j[key].get<uint64_t>() <= max;
  };
  // peak.by_site (named by "site") and peak.by_library (by "library"), when there.
  auto groups_ok = [&](const json& peak, const char* list, const char* name) {
    if (!peak.contains(list)) return true;
    if (!peak[list].is_array()) return false;
    for (const auto& s : peak[list])
      if (!s.is_object() || !s.contains(name) || !s[name].is_string() ||
          !uint_at(s, field::bytes, kMaxExact) || !uint_at(s, field::count, kMaxExact))
        return false;
    return true;
  };
  auto device_ok = [&](const json& d) {
    return uint_at(d, field::index, UINT32_MAX) && d.contains(field::peak) &&
           uint_at(d[field::peak], field::bytes, UINT64_MAX) &&
           groups_ok(d[field::peak], field::by_site, field::site);
  };
  // PyTorch's categories at the peak, which the budgets per category are checked against: a
  // figure that is not a whole number of bytes (a string, null, negative, 1e300) is a malformed
  // report, never read as 0 and passed.
  auto categories_ok = [&](const json& d) {
    if (!d.is_object() || !d.contains(field::categories)) return true;
    const json& c = d[field::categories];
    if (!c.is_object()) return false;
    if (!c.contains(field::at_peak)) return true;
    if (!c[field::at_peak].is_object()) return false;
    for (const auto& [k, v] : c[field::at_peak].items())
      if (!v.is_number_unsigned() || v.get<uint64_t>() > kMaxExact) return false;
    return true;
  };
  const char* bad_categories = "categories.at_peak with a figure that is not a size in bytes";
  const char* bad_libraries = "a peak.by_library entry without library, bytes or count";
  for (const char* key : {field::devices, field::processes, field::leaks, field::oom})
    if (!r.contains(key) || !r[key].is_array()) return std::string("no \"") + key + "\" array";
  for (const auto& d : r[field::devices]) {
    if (!device_ok(d) || !d.contains(field::name) || !d[field::name].is_string())
      return "a device without index, name or peak.bytes";
    if (!groups_ok(d[field::peak], field::by_library, field::library)) return bad_libraries;
    if (!categories_ok(d)) return bad_categories;
  }
  for (const auto& p : r[field::processes]) {
    if (!p.is_object() || !p.contains(field::devices) || !p[field::devices].is_array())
      return "a process without devices";
    for (const auto& d : p[field::devices]) {
      if (!device_ok(d) || !d[field::peak].contains(field::by_site))
        return "a process's device without index or peak";
      if (!groups_ok(d[field::peak], field::by_library, field::library)) return bad_libraries;
      if (!categories_ok(d)) return bad_categories;
    }
    // The processes not profiled are told from these.
    if ((p.contains(field::profiled) && !p[field::profiled].is_boolean()) ||
        (p.contains(field::not_profiled_reason) && !p[field::not_profiled_reason].is_string()) ||
        (p.contains(field::notices) &&
         (!p[field::notices].is_array() ||
          !std::all_of(p[field::notices].begin(), p[field::notices].end(),
                       [](const json& n) { return n.is_string(); }))) ||
        (p.contains(field::pid) && !p[field::pid].is_number_unsigned()) ||
        (p.contains(field::exe) && !p[field::exe].is_string()))
      return "a process whose pid, exe, profiled, not_profiled_reason or notices are of the "
             "wrong type";
    if (p.contains(field::ranks)) {
      if (!p[field::ranks].is_object()) return "ranks that are not an object";
      for (const auto& [k, v] : p[field::ranks].items())
        if (!v.is_string()) return "a rank that is not a string";
    }
  }
  for (const auto& l : r[field::leaks])
    if (!uint_at(l, field::bytes, kMaxExact)) return "a leak without bytes";
  // The comparison reads these three when both runs have a worst rank.
  if (r.contains(field::worst_rank)) {
    const json& w = r[field::worst_rank];
    if (!w.is_object() || !w.contains(field::rank) || !uint_at(w, field::peak_bytes, UINT64_MAX) ||
        !uint_at(w, field::device, UINT32_MAX))
      return "a worst_rank without rank, peak_bytes or device";
  }
  return {};
}

}  // namespace vramtrace::collector
