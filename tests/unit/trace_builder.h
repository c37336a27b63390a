// Builds vramtrace streams in memory for tests, record by record, with the encoder of
// common/records.h (each record at `step` ns after the one before).
#pragma once

#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "common/format.h"

namespace vt_test {

using vramtrace::format::Api;
using vramtrace::format::RecordType;
namespace rec = vramtrace::format::rec;

// The format version a stream's FileHeader names.
inline uint32_t stream_version(const std::vector<uint8_t>& stream) {
  vramtrace::format::FileHeader h{};
  std::memcpy(&h, stream.data(), sizeof h);
  return h.version;
}

// Appends to a stream of format `version` a frame of header `h` and `n` stored bytes, with its
// checksum when that version has one (h.stored_bytes is set here).
inline void append_frame(std::vector<uint8_t>& out, vramtrace::format::FrameHeader h,
                         const uint8_t* stored, size_t n, uint32_t version) {
  h.stored_bytes = static_cast<uint32_t>(n);
  const bool sealed = vramtrace::format::frame_checksum_bytes(version) != 0;
  const uint32_t sum = sealed ? vramtrace::format::seal_frame(h, stored, n) : 0;
  const auto* hp = reinterpret_cast<const uint8_t*>(&h);
  out.insert(out.end(), hp, hp + sizeof h);
  out.insert(out.end(), stored, stored + n);
  const auto* sp = reinterpret_cast<const uint8_t*>(&sum);
  if (sealed) out.insert(out.end(), sp, sp + sizeof sum);
}

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
    add(rec::Process{pid, 1, 1'700'000'000'000'000'000ull, start_, host, "/bin/test",
                     std::string_view("test\0--flag", 11), ranks});
  }

  TraceBuilder& context(uint32_t device, uint64_t total, const std::string& name = "Test GPU") {
    const std::string uuid(16, '\x01');
    return add(rec::ContextCreate{0x1000 + device, device, total, name, uuid});
  }
  TraceBuilder& alloc(uint64_t addr, uint64_t bytes, Api api = Api::cuMemAlloc, uint32_t dev = 0) {
    return add(rec::Alloc{api, dev, addr, bytes, 0, 7});
  }
  TraceBuilder& free(uint64_t addr, Api api = Api::cuMemFree, uint32_t dev = 0) {
    return add(rec::Free{api, dev, addr, 0, 7});
  }
  TraceBuilder& failed(uint64_t bytes, uint64_t result = 2, uint32_t dev = 0) {
    return add(rec::AllocFailed{Api::cuMemAlloc, dev, bytes, result, 7});
  }
  TraceBuilder& meminfo(uint64_t free_b, uint64_t total, uint32_t dev = 0) {
    return add(rec::MemInfo{dev, free_b, total});
  }
  TraceBuilder& kernel(uint32_t id, const std::string& name) { return add(rec::String{id, name}); }
  TraceBuilder& launch(uint32_t id, uint32_t dev = 0) {
    return add(rec::Launch{Api::cuLaunchKernel, dev, 0, id});
  }
  TraceBuilder& vmm_create(uint64_t handle, uint64_t bytes, uint32_t dev = 0) {
    return add(rec::VmmCreate{dev, handle, bytes});
  }
  TraceBuilder& vmm_release(uint64_t handle) { return add(rec::VmmRelease{handle}); }
  TraceBuilder& vmm_map(uint64_t va, uint64_t bytes, uint64_t handle) {
    return add(rec::VmmMap{va, bytes, 0, handle});
  }
  TraceBuilder& vmm_unmap(uint64_t va, uint64_t bytes) { return add(rec::VmmUnmap{va, bytes}); }
  // Stacks: the module map, trace-tree nodes, and the AllocStack that precedes an allocation.
  TraceBuilder& module(uint64_t generation, uint64_t bias, uint64_t start, uint64_t end,
                       const std::string& path, const std::string& build_id = "") {
    return add(rec::Module{generation, bias, start, end, path, build_id});
  }
  TraceBuilder& stack_node(uint32_t id, uint32_t parent, uint64_t ip) {
    return add(rec::StackNode{id, parent, ip});
  }
  TraceBuilder& py_code(uint32_t id, const std::string& file, const std::string& function) {
    return add(rec::PyCode{id, file, function});
  }
  TraceBuilder& py_node(uint32_t id, uint32_t parent, uint32_t code, uint32_t line) {
    return add(rec::PyStackNode{id, parent, code, line});
  }
  TraceBuilder& alloc_stack(uint32_t native_leaf, uint32_t py_leaf = 0) {
    return add(rec::AllocStack{native_leaf, py_leaf});
  }
  TraceBuilder& pool(uint64_t handle, uint64_t reserved, uint64_t used, uint64_t high,
                     uint32_t dev = 0) {
    return add(rec::PoolUsage{dev, handle, reserved, used, high});
  }
  // Any record of common/records.h: a timed one `step` ns after the record before.
  template <typename R>
  TraceBuilder& add(const R& r) {
    if (frame_.empty()) count_in_frame_ = 0;
    ++count_in_frame_;
    ++count_;
    const size_t at = frame_.size();
    frame_.resize(at + vramtrace::format::max_bytes(r));
    uint8_t* end;
    if constexpr (R::kTimed) {
      const uint64_t t_now = last_ + step_;
      end = vramtrace::format::put(frame_.data() + at, r, t_now - last_);
      last_ = t_now;  // the frame's base is the last time of the frame before
    } else {
      end = vramtrace::format::put(frame_.data() + at, r);
    }
    frame_.resize(static_cast<size_t>(end - frame_.data()));
    return *this;
  }
  // The recorder's settings, in format::Setting order ({0}: launches off), any number of fields
  // (rec::Settings writes those of this version only). No time.
  TraceBuilder& settings(std::initializer_list<uint64_t> fields) {
    u8(RecordType::Settings);
    v(fields.size());
    for (uint64_t f : fields) v(f);
    return *this;
  }
  // The library gave up on this process (a Notice record has no time).
  TraceBuilder& notice(const std::string& text) { return add(rec::Notice{text}); }
  TraceBuilder& exit_clean() { return add(rec::ProcessExit{count_ + 2, 0}); }
  // exit(status): the ExitStatus record the library writes right before ProcessExit (for a
  // non-zero status only).
  TraceBuilder& exit_with(uint64_t status) { return add(rec::ExitStatus{status}).exit_clean(); }
  // The stream as an older library wrote it (format version 1: frames without a checksum);
  // before the first flush.
  TraceBuilder& format_version(uint32_t version) {
    version_ = version;
    std::memcpy(bytes_.data() + offsetof(vramtrace::format::FileHeader, version), &version,
                sizeof version);
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
    fh.raw_bytes = static_cast<uint32_t>(frame_.size());
    fh.codec = 0;
    fh.record_count = count_in_frame_;
    fh.base_time_ns = frame_base_;
    append_frame(bytes_, fh, frame_.data(), frame_.size(), version_);
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
  uint32_t version_ = vramtrace::format::kFormatVersion;
};

}  // namespace vt_test
