// report.json's view of what the memory is (categories over time, modules, named tensors,
// phases), of each OOM's moment (phase, module, iteration, the user's line) and the run's
// diagnosis (verdict, effective limit, cause, remedies): written from
// collector/analysis/torch_device.h and collector/analysis/run_diagnosis.h, which do the analysis.
#include "report/torch_json.h"

#include <algorithm>
#include <string>

#include "report/json_report.h"
#include "report/report_keys.h"

namespace vramtrace::report {

using collector::Category;
using collector::CategoryBytes;
using collector::TorchMemory;
using nlohmann::json;

namespace {

uint64_t since(uint64_t ns, uint64_t origin) { return ns >= origin ? ns - origin : 0; }

json bytes_json(const CategoryBytes& c) {
  json j = json::object();
  for (size_t i = 0; i < collector::kCategories; ++i)
    j[collector::category_key(static_cast<Category>(i))] = c[i];
  return j;
}

json bytes_json(const collector::CategoryMap& m) {
  json j = json::object();
  for (const auto& [c, bytes] : m) j[collector::category_key(c)] = bytes;
  return j;
}

json categories_order() {
  json order = json::array();
  for (size_t i = 0; i < collector::kCategories; ++i)
    order.push_back(category_key(static_cast<Category>(i)));
  return order;
}

// The categories at the peak moment, at the end and over time, and the private pools.
json categories_json(const collector::TorchDevice& t, uint64_t origin) {
  json titles = json::object();
  for (size_t i = 0; i < collector::kCategories; ++i)
    titles[category_key(static_cast<Category>(i))] = category_title(static_cast<Category>(i));
  json cat = {
      {"order", categories_order()},
      {field::titles, titles},
      {field::at_peak, bytes_json(t.at_peak)},
      {"at_peak_moment",
       {{"what", t.peak_moment.moment},
        {"kind", t.peak_moment.allocator_in_use_peak ? "allocator_in_use_peak" : "device_peak"},
        {field::time_ns, since(t.peak_moment.time_ns, origin)},
        {field::bytes, t.peak_moment.device_bytes}}},
      {"at_exit", bytes_json(t.at_exit)},
      {"note",
       "PyTorch's blocks by what they hold (the start-up hook's module, autograd "
       "and optimizer hooks); a private pool's segments (CUDA graphs', "
       "torch.cuda.MemPool) count whole as CUDA-graph / private pools; the "
       "allocator's cache is its other segments less their blocks; the rest "
       "of the process's device memory is split by the library that allocated "
       "it. The categories add up to the device figure."}};
  if (!t.private_pools.empty()) {
    json list = json::array();
    for (const collector::PrivatePool& pool : t.private_pools)
      list.push_back({{"pool_id", {pool.pool_id[0], pool.pool_id[1]}},
                      {"cuda_graph", pool.cuda_graph},
                      {"segments", pool.segments},
                      {field::bytes, pool.bytes},
                      {"in_use_bytes", pool.in_use_bytes}});
    cat["private_pools"] = list;
  }
  // The window's start is the timeline's first point: the words give no time of their own.
  if (t.window_start)
    cat["note"] = cat["note"].get<std::string>() +
                  " PyTorch's trace held only the latest entries (VRAMTRACE_TORCH_MAX_ENTRIES "
                  "raises their number): the blocks made before them are unclassified unless "
                  "named (parameters, gradients, optimizer state), and the categories over time "
                  "begin with them.";
  json columns = json::array({field::time_ns});
  for (size_t i = 0; i < collector::kCategories; ++i)
    columns.push_back(category_key(static_cast<Category>(i)));
  json points = json::array();
  for (size_t i = 0; i < t.times.size(); ++i) {
    json row = json::array({since(t.times[i], origin)});
    for (uint64_t v : t.series[i]) row.push_back(v);
    points.push_back(row);
  }
  cat["timeline"] = {{"columns", columns}, {"points", points}};
  return cat;
}

json modules_json(const collector::TorchDevice& t) {
  json mods = json::array();
  for (const auto& m : t.by_module) {
    json mj = {{field::module, m.module}, {field::bytes, m.bytes}};
    if (m.detailed) {
      mj[field::count] = m.count;
      mj["type"] = m.type;
      if (!m.forward_at.empty()) mj["forward_at"] = m.forward_at;
      mj[field::categories] = bytes_json(m.categories);
      json sites = json::array();
      for (const auto& s : m.sites)
        sites.push_back({{field::bytes, s.bytes}, {field::count, s.count}, {field::site, s.site}});
      mj["sites"] = sites;
    }
    mods.push_back(mj);
  }
  return mods;
}

// The modules, named tensors, Python lines and largest blocks live at the peak.
void put_torch_peak(json& peak, const collector::TorchDevice& t) {
  peak["by_module"] = modules_json(t);
  json tops = json::array();
  for (const auto& [name, bytes] : t.by_top_module)
    tops.push_back({{field::module, name}, {field::bytes, bytes}});
  peak["by_top_module"] = tops;
  json tensors = json::array();
  for (const auto& n : t.tensors)
    tensors.push_back({{field::name, n.label->name},
                       {field::kind, n.label->kind},
                       {"category", category_key(n.category)},
                       {field::bytes, n.bytes},
                       {"shape", n.label->shape},
                       {"dtype", n.label->dtype}});
  peak["tensors"] = tensors;
  peak["named_tensors"] = t.named_tensors;
  json by_line = json::array();
  for (const auto& l : t.by_line) {
    json j = {{field::site, l.site},
              {field::bytes, l.bytes},
              {field::count, l.count},
              {field::categories, bytes_json(l.categories)}};
    if (l.module) j[field::module] = *l.module;
    by_line.push_back(j);
  }
  peak["by_line"] = by_line;
  json blocks = json::array();
  for (const auto& b : t.blocks) {
    json j = {{field::bytes, b.bytes},
              {"address", b.address},
              {"category", category_key(b.category)},
              {"what", b.what}};
    if (b.module) j[field::module] = *b.module;
    if (b.site) j[field::site] = *b.site;
    if (b.name) j[field::name] = *b.name;
    if (b.phase) j[field::phase] = collector::phase_key(*b.phase);
    if (b.iteration) j[field::iteration] = *b.iteration;
    blocks.push_back(j);
  }
  peak["blocks"] = blocks;
}

// PyTorch's phases as bands (capped).
json phases_json(const TorchMemory& tm, uint64_t origin) {
  json phases = json::array();
  for (const auto& ph : tm.phases()) {
    if (phases.size() >= 4000) break;
    json j = {{field::phase, collector::phase_key(ph.phase)},
              {field::iteration, ph.iteration},
              {"start_ns", since(ph.start_ns, origin)}};
    if (ph.end_ns != UINT64_MAX) j["end_ns"] = since(ph.end_ns, origin);
    if (ph.site) j[field::site] = tm.site_text(ph.site);
    phases.push_back(j);
  }
  return phases;
}

// A remedy as report.json has it: the peak it leads to and, where the allocator's model could
// apply it, its replay.
json remedy_json(const collector::RemedyOutcome& o) {
  const collector::Remedy& r = o.remedy;
  json j = {{field::kind, r.name()},
            {field::title, r.title},
            {field::saves_bytes, r.saves_bytes},
            {"assumption", r.assumption},
            {field::how, r.how}};
  if (o.predicted_peak) j[field::predicted_peak_bytes] = *o.predicted_peak;
  if (r.lower_bound) j[field::predicted_peak_is_lower_bound] = true;
  if (r.upper_bound) j[field::predicted_peak_is_upper_bound] = true;
  if (r.predicted_peak_high) j[field::predicted_peak_high_bytes] = *r.predicted_peak_high;
  if (const auto& w = o.replayed) {
    json rj = {{field::verdict, w->fits ? "fits" : "oom"},
               {field::reserved_peak_bytes, w->reserved_peak_bytes},
               {"limit_bytes", w->limit_bytes},
               {field::up_to_recorded_oom, w->up_to_recorded_oom}};
    if (w->oom)
      rj[field::oom] = {{field::requested_bytes, w->oom->requested_bytes},
                        {field::iteration, w->oom->iteration},
                        {field::module, w->oom->module},
                        {field::phase, w->oom->phase}};
    if (const auto& c = w->completion)
      rj[field::completed_by_prediction] = {{"predicted_requests", c->predicted_requests},
                                            {"modules", c->modules},
                                            {"batches", c->batches},
                                            {"recorded_batch", c->recorded_batch},
                                            {"batch", c->batch},
                                            {"method", c->method}};
    if (const auto& f = w->fake_step_change)
      rj["weighed_on_fake_step"] = {{"change", f->change},
                                    {"step_without_change_peak_bytes", f->without_bytes},
                                    {"step_with_change_peak_bytes", f->with_bytes}};
    if (!w->not_weighed_because.empty()) rj["not_weighed_on_fake_step"] = w->not_weighed_because;
    j[field::replayed] = rj;
  }
  if (!o.not_replayed.empty()) j[field::not_replayed_because] = o.not_replayed;
  if (r.leaves_growth) j[field::leaves_growth] = true;
  if (std::string outcome = collector::outcome_text(o); !outcome.empty()) j["outcome"] = outcome;
  return j;
}

}  // namespace

void add_torch_device(json& dj, const collector::ProcessModel& p, const collector::TorchDevice& t,
                      uint64_t origin) {
  // JAX: the driver sees XLA's pool as one allocation; what it held comes from XLA itself.
  if (const collector::XlaPool* x = t.xla)
    dj["xla_pool"] = {{"in_use_at_exit_bytes", x->in_use},
                      {"peak_in_use_bytes", x->peak_in_use},
                      {"limit_bytes", x->limit},
                      {"reserved_bytes", x->reserved},
                      {"largest_allocation_bytes", x->largest_alloc},
                      {"note",
                       "XLA's own allocator (JAX's memory_stats() at exit): the pool it "
                       "took from the driver is the device figure; its peak in use is "
                       "what the program's arrays needed"}};
  if (!t.classified) return;  // no PyTorch blocks were classified
  dj[field::categories] = categories_json(t, origin);
  put_torch_peak(dj[field::peak], t);
  dj["phases"] = phases_json(*p.torch_memory, origin);
}

void add_torch_oom(json& oj, const collector::OomEvent& o,
                   const std::optional<collector::TorchOom>& t) {
  if (o.fatal) oj[field::fatal] = true;
  if (!t) return;
  oj[field::phase] = t->phase;
  oj[field::iteration] = t->iteration;
  if (t->module) oj[field::module] = *t->module;
  if (t->python_site) oj[field::python_site] = *t->python_site;
  if (t->python_function) oj["python_function"] = *t->python_function;
  if (t->exception)
    oj["exception"] = {{"type", t->exception->type}, {"message", t->exception->message}};
  oj[field::categories] = bytes_json(t->categories);
}

json diagnosis_json(const collector::Diagnosis& dg) {
  json j = {{field::verdict, dg.oom ? "oom" : "peak"},
            {"fatal_ooms", dg.fatal_ooms},
            {"recovered_ooms", dg.recovered_ooms}};
  if (dg.oom_index) {
    j[field::oom_index] = *dg.oom_index;
    j[field::fatal] = dg.oom_fatal;
    j["asked_bytes"] = dg.asked_bytes;
    j["ooms_on_device"] = dg.ooms_on_device;
  }
  if (!dg.device) return j;
  j[field::device] = *dg.device;
  j[field::pid] = dg.pid;
  if (!dg.limit.kind.empty())
    j[field::limit] = {{field::bytes, dg.limit.bytes},
                       {field::kind, dg.limit.kind},
                       {field::title, dg.limit.title}};
  j["held_bytes"] = dg.held_bytes;
  j[field::requested_bytes] = dg.requested_bytes;
  if (!dg.limit.kind.empty()) j["headroom_bytes"] = dg.headroom_bytes;
  if (const auto& c = dg.cause) {
    json ev = json::array();
    for (const auto& f : c->evidence) ev.push_back({{"label", f.label}, {field::bytes, f.bytes}});
    j[field::cause] = {{field::kind, c->kind}, {field::title, c->title}, {"evidence", ev}};
  }
  if (const auto& g = dg.growth) {
    j[field::growth] = {{field::kind, g->kind},
                        {field::bytes_per_iteration, g->bytes_per_iteration},
                        {"kept_bytes", g->kept_bytes}};
    if (g->iterations) j[field::growth][field::iterations] = *g->iterations;
  }
  if (dg.remedies) {
    json remedies = json::array();
    for (const auto& r : *dg.remedies) remedies.push_back(remedy_json(r));
    j[field::remedies] = remedies;
  }
  if (dg.categories) j[field::categories] = bytes_json(*dg.categories);
  if (dg.xla_pool)
    j["xla_pool"] = {{"peak_in_use_bytes", dg.xla_pool->peak_in_use_bytes},
                     {"limit_bytes", dg.xla_pool->limit_bytes}};
  return j;
}

json plan_json(const std::vector<collector::ProcessPlan>& plans, uint64_t origin) {
  json processes = json::array();
  for (const auto& pp : plans) {
    json devices = json::array();
    for (const auto& d : pp.devices) {
      json dj = {{"device", d.device},
                 {"batch", d.batch},
                 {"predicted", d.predicted},
                 {"predicted_batches", d.predicted_batches}};
      if (!d.predicted) {
        dj["error"] = d.error;
        devices.push_back(std::move(dj));
        continue;
      }
      dj["reserved_peak_bytes"] = d.reserved_peak_bytes;
      dj["outside_bytes"] = d.outside_bytes;
      dj["peak_bytes"] = d.peak_bytes;
      dj["limit_bytes"] = d.limit_bytes;
      dj["limit_source"] = d.limit_source;
      if (d.fraction_limit_bytes) dj["fraction_limit_bytes"] = *d.fraction_limit_bytes;
      dj["fits"] = d.fits;
      dj["over_bytes"] = d.over_bytes;
      dj["free_bytes"] = d.free_bytes;
      dj["largest_batch"] = d.largest_batch ? json(*d.largest_batch) : json(nullptr);
      dj["largest_batch_at_least"] = d.largest_at_least;
      json remedies = json::array();
      for (const auto& r : d.remedies) {
        json rj = {{"kind", collector::remedy_kind_row(r.kind).name},
                   {"label", r.label},
                   {"replayed", r.replayed}};
        if (r.replayed) {
          rj["peak_bytes"] = r.peak_bytes;
          rj["fits"] = r.fits;
        } else {
          rj["not_replayed_because"] = r.not_replayed_because;
        }
        remedies.push_back(std::move(rj));
      }
      dj["remedies"] = std::move(remedies);
      devices.push_back(std::move(dj));
    }
    processes.push_back({{"pid", pp.pid},
                         {"batch", pp.batch},
                         {"stopped_ns", pp.stopped_ns > origin ? pp.stopped_ns - origin : 0},
                         {"fake_step_seconds", static_cast<double>(pp.spent_ns) / 1e9},
                         {"rng_restored", pp.rng_restored},
                         {"loss", pp.loss},
                         {"unseen", pp.unseen},
                         {"notes", pp.notes},
                         {"devices", std::move(devices)}});
  }
  return {{"processes", std::move(processes)}};
}

json preflight_json(const std::vector<collector::ProcessPreflight>& preflights, uint64_t origin) {
  auto since = [origin](uint64_t t) { return t > origin ? t - origin : 0; };
  json processes = json::array();
  for (const auto& pp : preflights) {
    json devices = json::array();
    for (const auto& d : pp.devices) {
      json dj = {{"device", d.device}, {"batch", d.batch}, {"predicted", d.predicted}};
      if (!d.predicted) {
        dj["error"] = d.error;
        devices.push_back(std::move(dj));
        continue;
      }
      dj["predicted_reserved_peak_bytes"] = d.predicted_reserved_peak_bytes;
      dj["predicted_peak_bytes"] = d.predicted_peak_bytes;
      dj["predicted_fits"] = d.predicted_fits;
      dj["limit_bytes"] = d.limit_bytes;
      dj["compared"] = d.compared;
      if (d.compared) {
        dj["recorded_reserved_peak_bytes"] = d.recorded_reserved_peak_bytes;
        dj["recorded_from_ns"] = since(d.from_ns);
        dj["recorded_to_ns"] = since(d.to_ns);
        dj["error_percent"] = d.error_percent;
      } else {
        dj["not_compared_because"] = d.not_compared_because;
      }
      devices.push_back(std::move(dj));
    }
    processes.push_back({{"pid", pp.pid},
                         {"batch", pp.batch},
                         {"asked_ns", since(pp.time_ns)},
                         {"fake_step_seconds", static_cast<double>(pp.spent_ns) / 1e9},
                         {"rng_restored", pp.rng_restored},
                         {"loss", pp.loss},
                         {"assumed", pp.assumed},
                         {"devices", std::move(devices)}});
  }
  return {{"processes", std::move(processes)}};
}

}  // namespace vramtrace::report
