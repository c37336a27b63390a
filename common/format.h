// The vramtrace event stream, defined once for both sides of the pipeline: the file and frame
// headers, the api ids, and the varint primitives that common/records.h (the table of records,
// their encoder and decoder) is built on. Nothing here allocates or formats: it is safe on the
// hot path.
//
// A stream is a FileHeader followed by frames. A frame is a FrameHeader and a payload of
// records. Each record is one byte of RecordType followed by LEB128 varints and length-prefixed
// strings. Timestamps are CLOCK_MONOTONIC nanoseconds, encoded as the delta from the previous
// timestamp in the same frame; the first delta of a frame counts from FrameHeader::base_time_ns.
// A frame is written with a single write(), so a stream cut off by a crash loses at most the
// frame that was being written, and the reader says so.
//
// From version 2 every frame is checksummed: its stored bytes end with a CRC32C of its header and
// the stored bytes before it (frame_checksum()), and a compressed frame carries zstd's content
// checksum too, so a flipped bit anywhere in a frame makes it a damaged frame rather than other
// figures. Version 1 (no checksum) is still read.
//
// Compatibility rules (as memray does it): record types and api ids are only ever appended;
// a change of meaning bumps kFormatVersion and the reader refuses versions it does not know.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/crc32c.h"

namespace vramtrace::format {

inline constexpr char kMagic[8] = {'V', 'R', 'A', 'M', 'T', 'R', 'C', '\n'};
inline constexpr uint32_t kFormatVersion = 2;
// The oldest version the reader reads: version 1, the same frames without their checksum.
inline constexpr uint32_t kOldestFormatVersion = 1;

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(FileHeader) when written; lets later versions grow it
};
static_assert(sizeof(FileHeader) == 16, "FileHeader layout is part of the format");

enum class Codec : uint8_t { Raw = 0, Zstd = 1 };

struct FrameHeader {
  uint32_t stored_bytes;  // bytes of payload that follow this header, its checksum included
  uint32_t raw_bytes;     // bytes of records once decoded (stored_bytes - its checksum for Raw)
  uint8_t codec;          // Codec
  uint8_t reserved[3];
  uint32_t record_count;
  uint64_t base_time_ns;  // CLOCK_MONOTONIC; the first record's delta counts from here
};
static_assert(sizeof(FrameHeader) == 24, "FrameHeader layout is part of the format");

// A frame larger than this is corrupt: the writer never produces one.
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;

// The checksum at the end of a frame's stored bytes (version 2 on): 4 bytes, little-endian.
inline constexpr uint32_t kFrameChecksumBytes = 4;
inline constexpr uint32_t frame_checksum_bytes(uint32_t version) {
  return version >= 2 ? kFrameChecksumBytes : 0;
}

// The CRC32C of a frame: its header (as written, stored_bytes counting the checksum) and the
// `n` stored bytes before the checksum.
inline uint32_t frame_checksum(const FrameHeader& h, const void* stored, size_t n) {
  return crc32c(crc32c(0, &h, sizeof h), stored, n);
}

// A frame of `n` stored bytes made whole for this version: sets its header's stored_bytes (the
// checksum counted) and returns the checksum, which is written right after the stored bytes.
inline uint32_t seal_frame(FrameHeader& h, const void* stored, size_t n) {
  h.stored_bytes = static_cast<uint32_t>(n + kFrameChecksumBytes);
  return frame_checksum(h, stored, n);
}

// What a UserSegment record does. A segment is separate from its neighbours (cudaMalloc'd
// memory: a free block never spans two); a mapping joins the mappings next to it (expandable
// segments: mapped pieces of one reserved range).
enum class SegmentOp : uint8_t { RemoveSegment = 0, AddSegment = 1, Map = 2, Unmap = 3 };

// The CUDA driver entry point a record came from. Append only.
enum class Api : uint8_t {
  Unknown = 0,
  cuMemAlloc = 1,
  cuMemAllocPitch = 2,
  cuMemFree = 3,
  cuMemAllocAsync = 4,
  cuMemAllocFromPoolAsync = 5,
  cuMemFreeAsync = 6,
  cuMemAllocManaged = 7,
  cuMemCreate = 8,
  cuMemRelease = 9,
  cuMemMap = 10,
  cuMemUnmap = 11,
  cuArrayCreate = 12,
  cuArray3DCreate = 13,
  cuArrayDestroy = 14,
  cuMemHostAlloc = 15,
  cuMemAllocHost = 16,
  cuMemFreeHost = 17,
  cuLaunchKernel = 18,
  cuLaunchKernelEx = 19,
  cuLaunchCooperativeKernel = 20,
  cuGraphLaunch = 21,
  kCount
};

inline const char* api_name(Api api) {
  static const char* const names[] = {
      "unknown",        "cuMemAlloc",        "cuMemAllocPitch",
      "cuMemFree",      "cuMemAllocAsync",   "cuMemAllocFromPoolAsync",
      "cuMemFreeAsync", "cuMemAllocManaged", "cuMemCreate",
      "cuMemRelease",   "cuMemMap",          "cuMemUnmap",
      "cuArrayCreate",  "cuArray3DCreate",   "cuArrayDestroy",
      "cuMemHostAlloc", "cuMemAllocHost",    "cuMemFreeHost",
      "cuLaunchKernel", "cuLaunchKernelEx",  "cuLaunchCooperativeKernel",
      "cuGraphLaunch"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(Api::kCount));
  auto i = static_cast<size_t>(api);
  return i < static_cast<size_t>(Api::kCount) ? names[i] : "unknown";
}

// What kind of memory an allocation api hands out. Pinned host memory is reported apart from
// device memory; managed memory counts as device memory but is named so.
enum class MemoryKind : uint8_t { Device = 0, Managed = 1, Array = 2, PinnedHost = 3 };

inline MemoryKind memory_kind(Api api) {
  switch (api) {
    case Api::cuMemAllocManaged: return MemoryKind::Managed;
    case Api::cuArrayCreate:
    case Api::cuArray3DCreate:
    case Api::cuArrayDestroy: return MemoryKind::Array;
    case Api::cuMemHostAlloc:
    case Api::cuMemAllocHost:
    case Api::cuMemFreeHost: return MemoryKind::PinnedHost;
    default: return MemoryKind::Device;
  }
}

inline const char* memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::Device: return "device";
    case MemoryKind::Managed: return "managed";
    case MemoryKind::Array: return "array";
    case MemoryKind::PinnedHost: return "pinned_host";
  }
  return "device";
}

// ---- encoding (hot path: no allocation, caller guarantees room) ------------------------------

inline uint8_t* put_u8(uint8_t* p, uint8_t v) {
  *p++ = v;
  return p;
}

inline uint8_t* put_varint(uint8_t* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v) | 0x80;
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

inline uint8_t* put_bytes(uint8_t* p, const void* data, size_t n) {
  p = put_varint(p, n);
  std::memcpy(p, data, n);
  return p + n;
}

// ---- decoding (collector: every read is bounds-checked) --------------------------------------

class ByteReader {
 public:
  ByteReader() = default;  // empty: at_end()
  ByteReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  bool at_end() const { return p_ >= end_; }
  bool ok() const { return ok_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

  uint8_t u8() {
    if (p_ >= end_) return fail();
    return *p_++;
  }

  uint64_t varint() {
    // Most fields (ids, devices, threads, apis, small deltas) are below 128: one byte.
    if (p_ < end_ && *p_ < 0x80) return *p_++;
    return long_varint();
  }

  // Returns a view into the buffer; empty and !ok() when it runs past the end.
  const char* bytes(size_t* n) {
    uint64_t len = varint();
    if (!ok_ || len > remaining()) {
      fail();
      *n = 0;
      return "";
    }
    const char* s = reinterpret_cast<const char*>(p_);
    p_ += len;
    *n = static_cast<size_t>(len);
    return s;
  }

 private:
  // Varints of two bytes or more (time deltas, handles, addresses). Here p_[0], if there is
  // one, has its high bit set.
  [[gnu::noinline]] uint64_t long_varint() {
    const size_t left = remaining();
    if (left >= 3) {  // two or three bytes: most time deltas, sizes of small blocks
      uint64_t v = (p_[0] & 0x7f) | static_cast<uint64_t>(p_[1] & 0x7f) << 7;
      if (p_[1] < 0x80) {
        p_ += 2;
        return v;
      }
      if (p_[2] < 0x80) {
        p_ += 3;
        return v | static_cast<uint64_t>(p_[-1]) << 14;
      }
    }
    if (left >= 8) {
      // Four to eight bytes, as one little-endian word (the trace's headers are little-endian
      // too): the first byte without its high bit ends the varint; its 7-bit groups are then
      // packed together in three steps, 8-bit lanes to 7, 16 to 14, 32 to 28.
      uint64_t x;
      std::memcpy(&x, p_, 8);
      const uint64_t stops = ~x & 0x8080808080808080ull;
      if (stops) {
        x &= stops ^ (stops - 1);  // the varint's own bytes
        x = (x & 0x007f007f007f007full) | ((x & 0x7f007f007f007f00ull) >> 1);
        x = (x & 0x00003fff00003fffull) | ((x & 0x3fff00003fff0000ull) >> 2);
        x = (x & 0x000000000fffffffull) | ((x & 0x0fffffff00000000ull) >> 4);
        p_ += (__builtin_ctzll(stops) + 1) / 8;
        return x;
      }
    }
    // Nine or ten bytes, or the last bytes of the buffer: a byte at a time.
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) return fail();
      uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    return fail();  // more than 10 bytes: corrupt
  }
  uint8_t fail() {
    ok_ = false;
    p_ = end_;
    return 0;
  }
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  bool ok_ = true;
};

}  // namespace vramtrace::format

// The records themselves (their table, structs, encoder and decoder).
#include "common/records.h"  // IWYU pragma: export
