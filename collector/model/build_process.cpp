// The builder's records of the process itself: its Process and context records, strings, stacks,
// modules, notices and exit (see builder.h).
#include "collector/model/builder.h"

#include <tuple>

namespace vramtrace::collector {

using format::Api;
using format::Record;
using format::RecordType;
namespace rec = format::rec;

namespace {

std::string hex_uuid(std::string_view raw) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    auto c = static_cast<unsigned char>(raw[i]);
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::vector<std::string> split_nul(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    size_t end = s.find('\0', start);
    if (end == std::string_view::npos) end = s.size();
    out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

void Builder::on_process(const rec::Process& r) {
  p_->has_process_record = true;
  p_->pid = r.pid;
  p_->ppid = r.ppid;
  p_->start_realtime_ns = r.realtime_ns;
  p_->start_ns = r.start_ns;
  p_->host = std::string(r.host);
  run_slot_ = SIZE_MAX;  // run-wide devices are keyed by host
  p_->exe = std::string(r.exe);
  p_->cmdline = split_nul(r.cmdline);
  const std::string_view env = r.rank_env;
  for (size_t start = 0; start < env.size();) {
    size_t end = env.find('\n', start);
    if (end == std::string_view::npos) end = env.size();
    std::string_view kv = env.substr(start, end - start);
    size_t eq = kv.find('=');
    // The run id is recorded among these variables, but is not a rank's.
    if (eq != std::string_view::npos && kv.substr(0, eq) != "VRAMTRACE_RUN_ID")
      p_->ranks.emplace_back(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
    start = end + 1;
  }
}

void Builder::on_context(const rec::ContextCreate& r, uint64_t t) {
  DeviceModel& d = device(r.device);
  d.name = std::string(r.name);
  d.uuid = hex_uuid(r.uuid);
  d.total_bytes = r.total_bytes;
  RunDevice& rd = run_dev(r.device);
  rd.name = d.name;
  rd.uuid = d.uuid;
  rd.total_bytes = d.total_bytes;
  if (t && (!rd.first_ns || t < rd.first_ns)) rd.first_ns = t;
}

// Taken right after an OOM: attach to it.
void Builder::on_mem_info(const rec::MemInfo& r) {
  if (!p_->ooms.empty() && p_->ooms.back().device == r.device && !p_->ooms.back().free_bytes) {
    p_->ooms.back().free_bytes = r.free_bytes;
    p_->ooms.back().total_bytes = r.total_bytes;
  }
}

void Builder::on_string(const rec::String& r) {
  p_->kernel_names[r.id] = std::string(r.text);  // kernel, range and pool names
}

void Builder::on_stack_node(const rec::StackNode& r) {
  StackNode n;
  n.parent = r.parent;
  n.ip = r.ip;
  auto it = module_map_.upper_bound(r.ip);
  if (it != module_map_.begin()) {
    --it;
    if (r.ip < p_->modules[it->second].end) n.module = static_cast<int64_t>(it->second);
  }
  p_->stack_nodes[r.id] = n;
}

void Builder::on_py_stack_node(const rec::PyStackNode& r) {
  StackNode n;
  n.parent = r.parent;
  n.python = true;
  n.code = r.code;
  n.line = r.line;
  p_->stack_nodes[r.id] = n;
}

void Builder::on_py_code(const rec::PyCode& r) {
  p_->py_codes[r.id] = {std::string(r.file), std::string(r.function)};
}

void Builder::on_alloc_stack(const rec::AllocStack& r) {
  pend_->stack = r.native_leaf;
  pend_->py = r.py_leaf;
}

void Builder::on_module(const rec::Module& r) {
  if (r.generation != module_generation_) {
    module_generation_ = r.generation;
    module_map_.clear();
  }
  ModuleInfo m{std::string(r.path), std::string(r.build_id), r.load_bias, r.start, r.end};
  auto key = std::make_tuple(m.path, m.bias, m.start);
  auto [it, inserted] = module_index_.try_emplace(key, p_->modules.size());
  if (inserted) p_->modules.push_back(m);
  module_map_[m.start] = it->second;
}

// The library writes the status as the parent sees it; a larger value no writer produces is
// not taken (the exit status stays unknown).
void Builder::on_exit_status(const rec::ExitStatus& r) {
  if (r.status <= 255) p_->exit_status = static_cast<int>(r.status);
}

void Builder::on_notice(const rec::Notice& r) {
  p_->notices.emplace_back(r.text);
  if (p_->not_profiled.empty())
    p_->not_profiled = r.text.empty() ? "(no reason given)" : std::string(r.text);
}

}  // namespace vramtrace::collector
