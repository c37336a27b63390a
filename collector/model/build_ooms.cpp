// The builder's OOMs: failed driver allocations with the live set then, and, once the trace is
// read, which OOM ended the job (see builder.h).
#include "collector/model/builder.h"

#include <algorithm>
#include <cstring>

namespace vramtrace::collector {

using format::Api;
using format::Record;
using format::RecordType;
namespace rec = format::rec;

namespace {

constexpr size_t kOomLiveCap = 256;

}  // namespace

void Builder::on_failed(const rec::AllocFailed& r, uint64_t t) {
  const uint32_t stack = pend_->stack, py_stack = pend_->py;
  pend_->stack = pend_->py = 0;
  DeviceModel& d = device(r.device);
  ++d.apis[api_slot(r.api)].failed;
  constexpr uint64_t kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY
  if (r.result != kOutOfMemory) {
    ++p_->failures_by_result[r.result];
    return;
  }
  OomEvent o;
  o.device = r.device;
  o.pid = p_->pid;
  o.requested_bytes = r.bytes;
  o.time_ns = t;
  o.api = r.api;
  o.result = r.result;
  o.thread = r.thread;
  o.live_bytes = d.memory.live_bytes();
  o.last_kernel = p_->kernel_name(d.last_kernel);
  o.stack = stack;
  o.py_stack = py_stack;
  if (d.has_allocator_view) o.fragmentation = allocator_state(r.device, t);
  if (p_->ooms.size() < kOomsWithSurvivors) o.survivors = survivors(r.device);
  fill_live_set(o);
  p_->ooms.push_back(std::move(o));
}

// Only the first OOMs keep their live set: a trace of many OOMs (a retry loop, a corrupt
// or crafted file) must not cost OOMs x live allocations (250 KB of trace took 2 GiB).
void Builder::fill_live_set(OomEvent& o) {
  if (p_->ooms.size() >= kOomsWithLiveSet) return;
  for (auto& [k, a] : p_->live)
    if (a.device == o.device) o.live.push_back(a);
  for (auto& [k, h] : p_->vmm_handles)
    if (h.alloc.device == o.device) o.live.push_back(h.alloc);
  std::sort(o.live.begin(), o.live.end(),
            [](const Allocation& a, const Allocation& b) { return a.bytes > b.bytes; });
  if (o.live.size() > kOomLiveCap) o.live.resize(kOomLiveCap);
}

// Iterations, best source first: vramtrace_step() calls; the depth-0 NVTX range that repeats
// most; the kernel that repeats at a constant distance with the longest period.
// Which OOM ended the job. With the start-up hook's record of the exception that reached
// the top: the allocator's last OOM before it, if it was an OutOfMemoryError (none if the
// program ended otherwise: every OOM was survived). Without it: the last OOM not recovered
// from of a process that did not reach exit() cleanly or gave exit() a non-zero status (a
// native program that checks cudaMalloc and exits with its own error code after the OOM).
void Builder::find_fatal_oom() {
  OomEvent* last = nullptr;
  const TorchContext* ctx = p_->torch_memory ? &p_->torch_memory->context() : nullptr;
  // JAX: an OOM inside XLA's preallocated pool never reaches the driver; the exception that
  // ended the program ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate N
  // bytes") is the OOM, measured against the pool.
  if (ctx && !ctx->xla.empty() && ctx->exception &&
      ctx->exception->message.find("RESOURCE_EXHAUSTED") != std::string::npos) {
    const auto& [device, pool] = *ctx->xla.begin();
    OomEvent o;
    o.device = device;
    o.pid = p_->pid;
    o.time_ns = ctx->exception->time_ns;
    o.allocator = true;
    o.pool = "XLA";
    o.fatal = true;
    const std::string& m = ctx->exception->message;
    size_t at = m.find("allocate ");
    if (at != std::string::npos) {
      // "allocate 8589934592 bytes" or "allocate 8.00GiB"
      char* end = nullptr;
      const double v = std::strtod(m.c_str() + at + 9, &end);
      double scale = 1;
      if (end && std::strncmp(end, "KiB", 3) == 0)
        scale = 1024.0;
      else if (end && std::strncmp(end, "MiB", 3) == 0)
        scale = 1024.0 * 1024;
      else if (end && std::strncmp(end, "GiB", 3) == 0)
        scale = 1024.0 * 1024 * 1024;
      else if (end && std::strncmp(end, "TiB", 3) == 0)
        scale = 1024.0 * 1024 * 1024 * 1024;
      if (v > 0 && v * scale < 1.8e19) o.requested_bytes = static_cast<uint64_t>(v * scale + 0.5);
    }
    o.allocator_request = o.requested_bytes;
    o.live_bytes = pool.in_use;
    if (p_->devices.count(device) && p_->devices[device].total_bytes)
      o.total_bytes = p_->devices[device].total_bytes;
    o.api = format::Api::Unknown;
    p_->ooms.push_back(std::move(o));
    return;
  }
  if (ctx && ctx->present) {
    const auto& x = ctx->exception;
    if (!x || x->type.find("OutOfMemoryError") == std::string::npos) return;
    for (OomEvent& o : p_->ooms)
      if (o.allocator && o.time_ns <= x->time_ns) last = &o;
  } else {
    if (p_->clean_exit && p_->exit_status.value_or(0) == 0) return;
    for (OomEvent& o : p_->ooms)
      if (!o.recovered) last = &o;
  }
  if (last) last->fatal = true;
}

}  // namespace vramtrace::collector
