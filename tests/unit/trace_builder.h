// Builds vramtrace streams in memory for tests, record by record, in the layout of format.h.
#pragma once

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/format.h"

namespace vt_test {

using vramtrace::format::Api;
using vramtrace::format::RecordType;

class TraceBuilder {
 public:
  // `ranks`: the process's rank variables, NAME=VALUE lines, as the library records them.
  explicit TraceBuilder(uint64_t pid = 100, std::string host = "testhost",
                        std::string ranks = "RANK=0\n") {
    vramtrace::format::FileHeader h{};
    std::memcpy(h.magic, vramtrace::format::kMagic, sizeof h.magic);
    h.version = vramtrace::format::kFormatVersion;
    h.header_bytes = sizeof h;
    raw(&h, sizeof h);
    u8(RecordType::Process);
    v(pid);
    v(1);
    v(1'700'000'000'000'000'000ull);
    v(start_);
    s(host);
    s("/bin/test");
    s(std::string("test\0--flag", 11));
    s(ranks);
  }

  TraceBuilder& context(uint32_t device, uint64_t total, const std::string& name = "Test GPU") {
    at(RecordType::ContextCreate);
    v(0x1000 + device);
    v(device);
    v(total);
    s(name);
    s(std::string(16, '\x01'));
    return *this;
  }
  TraceBuilder& alloc(uint64_t addr, uint64_t bytes, Api api = Api::cuMemAlloc, uint32_t dev = 0) {
    at(RecordType::Alloc);
    u8(api);
    v(dev);
    v(addr);
    v(bytes);
    v(0);
    v(7);
    return *this;
  }
  TraceBuilder& free(uint64_t addr, Api api = Api::cuMemFree, uint32_t dev = 0) {
    at(RecordType::Free);
    u8(api);
    v(dev);
    v(addr);
    v(0);
    v(7);
    return *this;
  }
  TraceBuilder& failed(uint64_t bytes, uint64_t result = 2, uint32_t dev = 0) {
    at(RecordType::AllocFailed);
    u8(Api::cuMemAlloc);
    v(dev);
    v(bytes);
    v(result);
    v(7);
    return *this;
  }
  TraceBuilder& meminfo(uint64_t free_b, uint64_t total, uint32_t dev = 0) {
    at(RecordType::MemInfo);
    v(dev);
    v(free_b);
    v(total);
    return *this;
  }
  TraceBuilder& kernel(uint32_t id, const std::string& name) {
    u8(RecordType::String);
    v(id);
    s(name);
    return *this;
  }
  TraceBuilder& launch(uint32_t id, uint32_t dev = 0) {
    at(RecordType::Launch);
    u8(Api::cuLaunchKernel);
    v(dev);
    v(0);
    v(id);
    return *this;
  }
  TraceBuilder& vmm_create(uint64_t handle, uint64_t bytes, uint32_t dev = 0) {
    at(RecordType::VmmCreate);
    v(dev);
    v(handle);
    v(bytes);
    return *this;
  }
  TraceBuilder& vmm_release(uint64_t handle) {
    at(RecordType::VmmRelease);
    v(handle);
    return *this;
  }
  TraceBuilder& vmm_map(uint64_t va, uint64_t bytes, uint64_t handle) {
    at(RecordType::VmmMap);
    v(va);
    v(bytes);
    v(0);
    v(handle);
    return *this;
  }
  TraceBuilder& vmm_unmap(uint64_t va, uint64_t bytes) {
    at(RecordType::VmmUnmap);
    v(va);
    v(bytes);
    return *this;
  }
  // Stacks: the module map, trace-tree nodes, and the AllocStack that precedes an allocation.
  TraceBuilder& module(uint64_t generation, uint64_t bias, uint64_t start, uint64_t end,
                       const std::string& path, const std::string& build_id = "") {
    u8(RecordType::Module);
    v(generation);
    v(bias);
    v(start);
    v(end);
    s(path);
    s(build_id);
    return *this;
  }
  TraceBuilder& stack_node(uint32_t id, uint32_t parent, uint64_t ip) {
    u8(RecordType::StackNode);
    v(id);
    v(parent);
    v(ip);
    return *this;
  }
  TraceBuilder& py_code(uint32_t id, const std::string& file, const std::string& function) {
    u8(RecordType::PyCode);
    v(id);
    s(file);
    s(function);
    return *this;
  }
  TraceBuilder& py_node(uint32_t id, uint32_t parent, uint32_t code, uint32_t line) {
    u8(RecordType::PyStackNode);
    v(id);
    v(parent);
    v(code);
    v(line);
    return *this;
  }
  TraceBuilder& alloc_stack(uint32_t native_leaf, uint32_t py_leaf = 0) {
    u8(RecordType::AllocStack);
    v(native_leaf);
    v(py_leaf);
    return *this;
  }
  TraceBuilder& pool(uint64_t handle, uint64_t reserved, uint64_t used, uint64_t high,
                     uint32_t dev = 0) {
    at(RecordType::PoolUsage);
    v(dev);
    v(handle);
    v(reserved);
    v(used);
    v(high);
    return *this;
  }
  // The recorder's settings, in format::Setting order ({0}: launches off). No time.
  TraceBuilder& settings(std::initializer_list<uint64_t> fields) {
    u8(RecordType::Settings);
    v(fields.size());
    for (uint64_t f : fields) v(f);
    return *this;
  }
  // The library gave up on this process (a Notice record has no time).
  TraceBuilder& notice(const std::string& text) {
    u8(RecordType::Notice);
    s(text);
    return *this;
  }
  TraceBuilder& exit_clean() {
    at(RecordType::ProcessExit);
    v(count_ + 1);
    v(0);
    return *this;
  }
  // Time passes between records: every record is `step_ns` after the previous one.
  TraceBuilder& step(uint64_t ns) {
    step_ = ns;
    return *this;
  }
  // Ends the current frame; the next record starts a new one.
  TraceBuilder& flush() {
    if (frame_.empty()) return *this;
    vramtrace::format::FrameHeader fh{};
    fh.stored_bytes = fh.raw_bytes = static_cast<uint32_t>(frame_.size());
    fh.codec = 0;
    fh.record_count = count_in_frame_;
    fh.base_time_ns = frame_base_;
    raw(&fh, sizeof fh);
    bytes_.insert(bytes_.end(), frame_.begin(), frame_.end());
    frame_.clear();
    count_in_frame_ = 0;
    frame_base_ = last_;
    return *this;
  }
  std::vector<uint8_t> bytes() {
    flush();
    return bytes_;
  }
  uint64_t now() const { return last_; }
  static constexpr uint64_t start_ = 1'000'000'000;

 private:
  void at(RecordType t) {
    u8(t);
    uint64_t t_now = last_ + step_;
    v(t_now - last_);  // the frame's base is the last time of the frame before
    last_ = t_now;
  }
  template <typename E>
  void u8(E e) {
    if (frame_.empty()) count_in_frame_ = 0;
    if constexpr (std::is_same_v<E, RecordType>) {
      ++count_in_frame_;
      ++count_;
    }
    frame_.push_back(static_cast<uint8_t>(e));
  }
  void v(uint64_t x) {
    uint8_t buf[10];
    uint8_t* end = vramtrace::format::put_varint(buf, x);
    frame_.insert(frame_.end(), buf, end);
  }
  void s(const std::string& x) {
    v(x.size());
    frame_.insert(frame_.end(), x.begin(), x.end());
  }
  void raw(const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  std::vector<uint8_t> bytes_, frame_;
  uint32_t count_in_frame_ = 0;
  uint64_t count_ = 0;
  uint64_t step_ = 1000;
  uint64_t last_ = start_;
  uint64_t frame_base_ = start_;
};

}  // namespace vt_test
