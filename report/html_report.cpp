// Rendering report.html from the JSON report (see html_report.h). The page's views are built by
// report/web/report.js in the browser from the embedded JSON; the <noscript> summary (what
// happened, the peak, the OOMs) is written here, so the page says the essentials without
// JavaScript too.
#include "report/html_report.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "report/html_assets.h"
#include "report/json_report.h"
#include "report/report_keys.h"

namespace vramtrace::report {

using nlohmann::json;

std::string json_for_script(const json& report) {
  std::string raw = report.dump(-1, ' ', true, json::error_handler_t::replace);
  std::string out;
  out.reserve(raw.size() + raw.size() / 16);
  for (char c : raw) {
    switch (c) {
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default: out += c;
    }
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// The most entries of each list the page keeps, by the list's key; the rest is summed into
// "<key>_rest". Tables show 25 rows and more on demand: 500 is more than anyone pages through,
// and keeps the page of a run with tens of thousands of sites a few megabytes.
size_t page_limit(const std::string& key) {
  static const std::unordered_map<std::string, size_t> limits = {
      {"by_site", 500},  {"live_by_site", 500}, {"by_library", 500},   {"live_by_library", 500},
      {"by_stack", 500}, {"by_module", 500},    {"leaks", 500},        {"live_at_death", 500},
      {"growth", 500},   {"largest", 100},      {"largest_live", 100}, {"by_line", 500}};
  auto it = limits.find(key);
  return it == limits.end() ? 0 : it->second;
}

// A non-negative integer of an entry (0 when missing or of another type).
uint64_t uint_in(const json& e, const char* key) {
  if (!e.is_object() || !e.contains(key)) return 0;
  const json& v = e[key];
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return 0;
}
uint64_t bytes_in(const json& e) { return uint_in(e, "bytes"); }

// Keeps the `limit` entries with the most bytes, in their order, and returns what the others
// held: {entries, bytes, count}, so the page's sums still add up.
json keep_largest(json& list, size_t limit) {
  std::vector<uint64_t> sizes;
  for (const auto& e : list) sizes.push_back(bytes_in(e));
  std::vector<uint64_t> sorted = sizes;
  std::nth_element(sorted.begin(), sorted.begin() + (limit - 1), sorted.end(), std::greater<>());
  const uint64_t cut = sorted[limit - 1];
  // Entries above the cut are kept, then entries at the cut in their order until `limit`.
  size_t above = 0;
  for (uint64_t b : sizes) above += b > cut;
  size_t at_cut = limit - above;
  json kept = json::array();
  uint64_t rest_bytes = 0, rest_count = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (sizes[i] > cut || (sizes[i] == cut && at_cut > 0)) {
      if (sizes[i] == cut) --at_cut;
      kept.push_back(std::move(list[i]));
      continue;
    }
    rest_bytes += sizes[i];
    rest_count += uint_in(list[i], "count");
  }
  const size_t dropped = list.size() - kept.size();
  list = std::move(kept);
  return {{"entries", dropped}, {"bytes", rest_bytes}, {"count", rest_count}};
}

// Phases past this many are thinned for the chart's bands (a few thousand are more than its
// pixels); those around the peak and each OOM are always kept.
constexpr size_t kPagePhases = 3000;

void thin_phases(json& phases, const std::vector<uint64_t>& moments) {
  if (!phases.is_array() || phases.size() <= kPagePhases) return;
  const size_t every = (phases.size() + kPagePhases - 1) / kPagePhases;
  json kept = json::array();
  for (size_t i = 0; i < phases.size(); ++i) {
    const json& p = phases[i];
    bool at_moment = false;
    if (p.is_object() && p.contains("start_ns") && p.contains("end_ns"))
      for (uint64_t t : moments)
        at_moment = at_moment || (uint_in(p, "start_ns") <= t && t <= uint_in(p, "end_ns"));
    if (at_moment || i % every == 0) kept.push_back(p);
  }
  phases = std::move(kept);
}

// Frames repeat across every list's stacks (the same deep Python stack under thousands of
// blocks): each distinct frame is written once in "frames" and stacks hold indexes into it.
struct Frames {
  json table = json::array();
  std::unordered_map<std::string, size_t> index;
  void intern(json& stack) {
    for (json& f : stack) {
      if (!f.is_object()) continue;
      std::string key = f.dump(-1, ' ', false, json::error_handler_t::replace);
      auto [it, fresh] = index.emplace(std::move(key), table.size());
      if (fresh) table.push_back(std::move(f));
      f = it->second;
    }
  }
};

void bound(json& node, Frames& frames, const std::vector<uint64_t>& moments) {
  if (node.is_array()) {
    for (json& e : node) bound(e, frames, moments);
    return;
  }
  if (!node.is_object()) return;
  std::vector<std::pair<std::string, json>> rests;
  for (auto& [key, value] : node.items()) {
    if (key == "stack" && value.is_array()) {
      frames.intern(value);
      continue;
    }
    if (key == "phases") thin_phases(value, moments);
    const size_t limit = page_limit(key);
    if (limit && value.is_array() && value.size() > limit)
      rests.emplace_back(key + "_rest", keep_largest(value, limit));
    bound(value, frames, moments);
  }
  for (auto& [key, rest] : rests) node[key] = std::move(rest);
}

// At most `limit` points of a series (`points`: rows by time), the first and the last kept
// and every k-th between: the allocator's free memory over time is drawn as a small line.
void thin_points(json& series, size_t limit) {
  if (!series.is_object() || !series.contains("points") || !series["points"].is_array()) return;
  json& pts = series["points"];
  if (pts.size() <= limit || limit < 2) return;
  const size_t step = (pts.size() + limit - 2) / (limit - 1);
  json kept = json::array();
  for (size_t i = 0; i < pts.size(); i += step) kept.push_back(std::move(pts[i]));
  if ((pts.size() - 1) % step != 0) kept.push_back(std::move(pts[pts.size() - 1]));
  pts = std::move(kept);
}

// Series the page does not draw: a process's copy of its device's categories and phases (the
// device's entry has them), the device's copy of the allocator's free-memory series (the
// process's, drawn, thinned to 400 points), the launch and reservation series.
void drop_undrawn(json& r) {
  if (!r.is_object() || !r.contains("processes") || !r["processes"].is_array()) return;
  for (json& p : r["processes"]) {
    if (!p.is_object() || !p.contains("devices") || !p["devices"].is_array()) continue;
    for (json& pd : p["devices"]) {
      if (!pd.is_object()) continue;
      pd.erase("categories");
      pd.erase("phases");
      for (const char* k : {"launches", "reserved"})
        if (pd.contains(k) && pd[k].is_object()) pd[k].erase("timeline");
      if (pd.contains("allocator") && pd["allocator"].is_object())
        for (const char* k : {"free_timeline", "largest_free_timeline"})
          if (pd["allocator"].contains(k)) thin_points(pd["allocator"][k], 400);
    }
  }
  if (r.contains("devices") && r["devices"].is_array())
    for (json& d : r["devices"])
      if (d.is_object() && d.contains("allocator") && d["allocator"].is_object()) {
        d["allocator"].erase("free_timeline");
        d["allocator"].erase("largest_free_timeline");
      }
}

// The times of the peaks and OOMs in a report (the phases around them are kept).
void moments_of(const json& r, std::vector<uint64_t>& out) {
  if (!r.is_object()) return;
  if (r.contains("devices") && r["devices"].is_array())
    for (const auto& d : r["devices"])
      if (d.is_object() && d.contains("peak") && d["peak"].is_object() &&
          d["peak"].contains("time_ns"))
        out.push_back(uint_in(d["peak"], "time_ns"));
  if (r.contains("oom") && r["oom"].is_array())
    for (const auto& o : r["oom"])
      if (o.is_object() && o.contains("time_ns")) out.push_back(uint_in(o, "time_ns"));
}

void replace_once(std::string& page, const std::string& marker, const std::string& with) {
  size_t at = page.find(marker);
  if (at != std::string::npos) page.replace(at, marker.size(), with);
}

// A value of the report as text, whatever its type (a hand-edited or older report may lack a
// key or hold another type): never throws.
std::string text_of(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "";
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}
bool has_number(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number();
}
std::string bytes_of(const json& j, const char* key) {
  if (!has_number(j, key)) return "unknown";
  const double v = j[key].get<double>();
  return v < 0 ? "-" + human_bytes(static_cast<uint64_t>(-v))
               : human_bytes(static_cast<uint64_t>(v));
}
// A time of the report on the page's clock: from `origin`, the run's first CUDA work.
std::string secs_of(const json& j, const char* key, uint64_t origin) {
  if (!has_number(j, key)) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s",
                std::max(0.0, j[key].get<double>() - static_cast<double>(origin)) / 1e9);
  return buf;
}
bool recovered(const json& o) { return o.value("recovered", false) == true; }

// `vramtrace plan`'s result in plain HTML, as the page's first screen says it: per process
// stopped before its first training step, each device's predicted step against the limit (fits
// or not, as report.json's plan decided), the largest batch that fits, each remedy's replayed
// peak, what the prediction could not see and what the fake steps cost.
std::string plan_noscript(const json& r) {
  if (!r.is_object() || !r.contains("plan") || !r["plan"].is_object() ||
      !r["plan"].contains("processes") || !r["plan"]["processes"].is_array() ||
      r["plan"]["processes"].empty())
    return "";
  const json& procs = r["plan"]["processes"];
  // Seconds as the page gives them: 351.5 µs, 12.50 ms, 3.250 s.
  auto seconds = [](const json& p) {
    const double s = has_number(p, "fake_step_seconds") ? p["fake_step_seconds"].get<double>() : 0;
    char buf[32];
    if (s >= 1)
      std::snprintf(buf, sizeof buf, "%.3f s", s);
    else if (s >= 1e-3)
      std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
    else
      std::snprintf(buf, sizeof buf, "%.1f \xc2\xb5s", s * 1e6);
    return std::string(buf);
  };
  std::string out = "<h2>Plan: ";
  out += procs.size() == 1
             ? "stopped before the first training step (batch " +
                   html_escape(text_of(procs[0], "batch")) + ")"
             : std::to_string(procs.size()) + " processes stopped before their first training step";
  out += "</h2><ul>";
  std::string unseen;
  for (const auto& p : procs) {
    out += "<li>Process " + html_escape(text_of(p, "pid")) + " (batch " +
           html_escape(text_of(p, "batch")) + "): " +
           (text_of(p, "loss") == "program"
                ? "the program's own loop ran its steps on fake tensors (its loss, scaler, "
                  "zero_grad and accumulation) in "
                : "the step was predicted on fake tensors in ") +
           seconds(p) + "; nothing of it ran on the GPU</li>";
    if (p.contains("devices") && p["devices"].is_array())
      for (const auto& d : p["devices"]) {
        const std::string dev = "<li>Device " + html_escape(text_of(d, "device")) + ": ";
        if (d.value("predicted", false) != true) {
          out += dev + "no prediction: " + html_escape(text_of(d, "error")) + "</li>";
          continue;
        }
        // The limit the step is held to: PyTorch's per-process fraction where it is the lower.
        const bool by_fraction =
            has_number(d, "fraction_limit_bytes") &&
            (!has_number(d, "limit_bytes") ||
             d["fraction_limit_bytes"].get<double>() < d["limit_bytes"].get<double>());
        const bool fits = d.value("fits", false) == true;
        out += dev + "the whole step peaks at " + bytes_of(d, "peak_bytes") + " against " +
               (by_fraction
                    ? "PyTorch's per-process fraction of " + bytes_of(d, "fraction_limit_bytes")
                    : "a limit of " + bytes_of(d, "limit_bytes")) +
               (fits ? ": fits, " + bytes_of(d, "free_bytes") + " to spare"
                     : ": will run out of memory, " + bytes_of(d, "over_bytes") + " over") +
               "</li>";
        const bool largest = has_number(d, "largest_batch");
        out += dev + "the largest batch that fits: " +
               (largest ? std::string(d.value("largest_batch_at_least", false) == true ? "at least "
                                                                                       : "") +
                              html_escape(text_of(d, "largest_batch"))
                        : std::string("none")) +
               " (this one: " + html_escape(text_of(d, "batch")) + ")</li>";
        if (d.contains("remedies") && d["remedies"].is_array())
          for (const auto& m : d["remedies"]) {
            const std::string what =
                html_escape(text_of(m, m.contains("label") ? "label" : "kind"));
            out += dev + what + ": " +
                   (m.value("replayed", false) == true
                        ? "peak " + bytes_of(m, "peak_bytes") +
                              (m.value("fits", false) == true ? " (fits)" : " (runs out)")
                        : "not replayed: " + html_escape(text_of(m, "not_replayed_because"))) +
                   "</li>";
          }
      }
    if (p.contains("notes") && p["notes"].is_array())
      for (const auto& n : p["notes"])
        out += "<li>" + html_escape(n.is_string() ? n.get<std::string>() : n.dump()) + "</li>";
    if (p.contains("unseen") && p["unseen"].is_array())
      for (const auto& u : p["unseen"])
        unseen += "<li>" + html_escape(u.is_string() ? u.get<std::string>() : u.dump()) + "</li>";
  }
  out += "</ul>";
  if (!unseen.empty()) out += "<p>What the prediction could not see:</p><ul>" + unseen + "</ul>";
  return out;
}

// `vramtrace run --preflight`'s check of its own prediction in plain HTML, as the summary says
// it: per process and device, the first step's predicted reserved peak beside the recorded one.
std::string preflight_noscript(const json& r) {
  if (!r.is_object() || !r.contains("preflight") || !r["preflight"].is_object() ||
      !r["preflight"].contains("processes") || !r["preflight"]["processes"].is_array() ||
      r["preflight"]["processes"].empty())
    return "";
  std::string out = "<h2>Pre-flight: the first step predicted before it ran</h2><ul>";
  for (const auto& p : r["preflight"]["processes"]) {
    if (!p.is_object() || !p.contains("devices") || !p["devices"].is_array()) continue;
    for (const auto& d : p["devices"]) {
      if (!d.is_object()) continue;
      out += "<li>Process " + html_escape(text_of(p, "pid")) + ", device " +
             html_escape(text_of(d, "device")) + " (batch " + html_escape(text_of(d, "batch")) +
             "): ";
      if (d.value("predicted", false) != true) {
        out += "no prediction: " + html_escape(text_of(d, "error")) + "</li>";
        continue;
      }
      out += "predicted " + bytes_of(d, "predicted_reserved_peak_bytes") + " reserved";
      if (text_of(p, "loss") == "program") out += " by the program's own loop";
      if (d.value("compared", false) == true && has_number(d, "error_percent")) {
        char err[32];
        std::snprintf(err, sizeof err, "%+.1f %%", d["error_percent"].get<double>());
        out += ", the step took " + bytes_of(d, "recorded_reserved_peak_bytes") + " (error " + err +
               ")";
      } else {
        out += "; not compared: " + html_escape(text_of(d, "not_compared_because"));
      }
      out += "</li>";
    }
    if (p.contains("assumed") && p["assumed"].is_array())
      for (const auto& a : p["assumed"])
        out += "<li>Process " + html_escape(text_of(p, "pid")) + ": assumed " +
               html_escape(a.is_string() ? a.get<std::string>() : a.dump()) + "</li>";
  }
  return out + "</ul>";
}

// The page's essentials in plain HTML: the verdict, each device's peak against its limit, the
// OOMs, and (when the report has a diagnosis) the cause and the remedies.
std::string noscript_summary(const json& r) {
  std::string out =
      "<div class=\"noscript\"><p><strong>JavaScript is off</strong>: this is the "
      "summary; turn it on for the charts and breakdowns.</p>";
  out += plan_noscript(r);
  out += preflight_noscript(r);
  const json diag = r.is_object() && r.contains("diagnosis") && r["diagnosis"].is_object()
                        ? r["diagnosis"]
                        : json::object();
  const json ooms =
      r.is_object() && r.contains("oom") && r["oom"].is_array() ? r["oom"] : json::array();
  size_t fatal = 0, failed = 0;
  for (const auto& o : ooms) {
    if (recovered(o)) continue;
    ++failed;
    if (o.value("fatal", false) == true) ++fatal;
  }
  const bool oom = diag.contains("verdict") ? text_of(diag, "verdict") == "oom" : failed > 0;
  // Whether the OOM ended its process is the collector's (the diagnosis' fatal), as on the page.
  const bool died = diag.contains("fatal") ? diag["fatal"] == true : fatal > 0;
  out += "<h2>";
  out +=
      oom ? (died ? "Out of memory: the program died" : "Out of memory") : "No out-of-memory error";
  out += "</h2><ul>";
  const uint64_t origin = r.is_object() ? cuda_start_ns(r) : 0;
  if (origin)
    out += "<li>Times count from the first CUDA work, " + secs_of(r["run"], "cuda_start_ns", 0) +
           " after the start</li>";
  if (diag.contains("limit") && diag["limit"].is_object())
    out += "<li>Limit: " + html_escape(text_of(diag["limit"], "title")) + " (" +
           bytes_of(diag["limit"], "bytes") + ")</li>";
  if (has_number(diag, "headroom_bytes"))
    out += "<li>Headroom: " + bytes_of(diag, "headroom_bytes") + "</li>";
  if (r.is_object() && r.contains("devices") && r["devices"].is_array())
    for (const auto& d : r["devices"]) {
      const json peak = d.contains("peak") && d["peak"].is_object() ? d["peak"] : json::object();
      out += "<li>Device " + html_escape(text_of(d, "index")) + " (" +
             html_escape(text_of(d, "name")) + "): peak " + bytes_of(peak, "bytes") + " at " +
             secs_of(peak, "time_ns", origin) + " of " + bytes_of(d, "total_bytes") + "</li>";
    }
  for (const auto& o : ooms) {
    if (recovered(o)) continue;
    out += "<li>Out of memory on device " + html_escape(text_of(o, "device")) + " at " +
           secs_of(o, "time_ns", origin) + ": " + html_escape(text_of(o, "api")) + " asked for " +
           bytes_of(o, "requested_bytes") + " with " + bytes_of(o, "live_bytes") + " live (pid " +
           html_escape(text_of(o, "pid")) + ")";
    const std::string site =
        text_of(o, "python_site").empty() ? text_of(o, "site") : text_of(o, "python_site");
    if (!site.empty()) out += ", at " + html_escape(site);
    out += "</li>";
  }
  // Where the time after a first-step death went, as the collector says it.
  if (r.is_object() && r.contains("run") && r["run"].is_object() &&
      r["run"].contains("predicted_at_exit") && r["run"]["predicted_at_exit"].is_array())
    for (const auto& x : r["run"]["predicted_at_exit"])
      out += "<li>" + html_escape(text_of(x, "note")) + "</li>";
  out += "</ul>";
  if (diag.contains("cause") && diag["cause"].is_object())
    out += "<p>Likely cause: " + html_escape(text_of(diag["cause"], "title")) + "</p>";
  if (diag.contains("remedies") && diag["remedies"].is_array() && !diag["remedies"].empty()) {
    out += oom ? "<p>What to try:</p><ol>" : "<p>To use less memory:</p><ol>";
    for (const auto& m : diag["remedies"]) {
      out += "<li>" + html_escape(text_of(m, "title"));
      // As the page says it: a saving only where there is one (an OOM finding's advice has none).
      if (has_number(m, "saves_bytes") && m["saves_bytes"].get<double>() > 0)
        out += " (saves about " + bytes_of(m, "saves_bytes") + ")";
      // What it leads to, in the collector's words, as the page and the summary say it.
      if (!text_of(m, "outcome").empty()) out += ": " + html_escape(text_of(m, "outcome"));
      out += "</li>";
    }
    out += "</ol>";
  }
  return out + "</div>";
}

std::string page(const json& report_data, const std::string& noscript) {
  const json data = page_data(report_data);
  std::string p = assets::template_;
  // The markers that follow the data in the page are replaced before the data goes in, and the
  // ones before it (in <head>) are found first: a string in the data that looks like a marker
  // is never replaced. The <noscript> summary goes in last, after the data: its text is never
  // searched for a marker, and the data (every '<' escaped) cannot hold its marker.
  replace_once(p, "/*VT_REPORT_JS*/", assets::report_js);
  replace_once(p, "/*VT_UPLOT_JS*/", assets::uplot_js);
  replace_once(p, "/*VT_UPLOT_CSS*/", assets::uplot_css);
  replace_once(p, "/*VT_REPORT_CSS*/", assets::report_css);
  replace_once(p, "/*VT_DATA*/", json_for_script(data));
  replace_once(p, "<!--VT_NOSCRIPT-->", noscript);
  return p;
}

std::string command_of(const json& r) {
  std::string out;
  if (r.is_object() && r.contains("run") && r["run"].is_object() && r["run"].contains("command") &&
      r["run"]["command"].is_array())
    for (const auto& a : r["run"]["command"])
      out += (out.empty() ? "" : " ") + (a.is_string() ? a.get<std::string>() : a.dump());
  return out.empty() ? "(command unknown)" : out;
}

}  // namespace

json page_data(const json& data) {
  json out = data;
  std::vector<uint64_t> moments;
  moments_of(out, moments);
  if (out.is_object() && out.contains("diff") && out["diff"].is_object()) {
    if (out["diff"].contains("a")) moments_of(out["diff"]["a"], moments);
    if (out["diff"].contains("b")) moments_of(out["diff"]["b"], moments);
  }
  drop_undrawn(out);
  if (out.is_object() && out.contains("diff") && out["diff"].is_object())
    for (const char* k : {"a", "b"})
      if (out["diff"].contains(k)) drop_undrawn(out["diff"][k]);
  Frames frames;
  bound(out, frames, moments);
  if (out.is_object() && !frames.table.empty()) out["frames"] = std::move(frames.table);
  return out;
}

std::string to_html(const json& report) { return page(report, noscript_summary(report)); }

std::string diff_to_html(const json& a, const json& b, const json& changes) {
  json data = {
      {"diff",
       {{"a", a}, {"b", b}, {"names", {command_of(a), command_of(b)}}, {"changes", changes}}}};
  // Without JavaScript: the peaks and the sites that changed as a plain table, then each run's
  // summary.
  std::string ns =
      "<div class=\"noscript\"><h2>What changed from A to B</h2><table><tr><th>scope"
      "</th><th>site</th><th>A</th><th>B</th></tr>";
  for (const auto& c : changes) {
    ns += "<tr><td>" + html_escape(text_of(c, "scope")) + "</td><td>peak</td><td>" +
          bytes_of(c, "a_peak") + "</td><td>" + bytes_of(c, "b_peak") + "</td></tr>";
    if (c.contains("changes") && c["changes"].is_array())
      for (const auto& s : c["changes"])
        ns += "<tr><td>" + html_escape(text_of(c, "scope")) + "</td><td>" +
              html_escape(text_of(s, "site")) + "</td><td>" + bytes_of(s, "a") + "</td><td>" +
              bytes_of(s, "b") + "</td></tr>";
  }
  ns += "</table><h2>Run A</h2><p>" + html_escape(command_of(a)) + "</p>" + noscript_summary(a) +
        "<h2>Run B</h2><p>" + html_escape(command_of(b)) + "</p>" + noscript_summary(b) + "</div>";
  return page(data, ns);
}

}  // namespace vramtrace::report
