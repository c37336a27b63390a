// Reading back what a dead process recorded but had not sent (see shared_recovery.h).
#include "collector/ingest/shared_recovery.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace vramtrace::collector {

bool write_all_fd(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

int recover_unsent(int shared, int out, const StreamPosition& pos) {
  int appended = 0;
  if (shared < 0 || pos.broken || !pos.header_done) return 0;
  format::SharedControl ctl;
  if (pread(shared, &ctl, sizeof ctl, 0) != static_cast<ssize_t>(sizeof ctl)) return appended;
  if (std::memcmp(ctl.magic, format::kSharedMagic, sizeof ctl.magic) != 0 ||
      ctl.version != format::kSharedVersion || ctl.buffer_count != 2 || ctl.capacity == 0 ||
      ctl.capacity > format::kMaxFrameBytes)
    return appended;
  struct Pending {
    int index;
    uint64_t used, count, epoch, base_time;
  };
  std::vector<Pending> pending;
  for (int i = 0; i < 2; ++i) {
    const format::SharedBufferState& b = ctl.buffers[i];
    uint64_t used = format::unpack_used(b.used_count), count = format::unpack_count(b.used_count);
    if (used == 0 || used > ctl.capacity || count == 0) continue;
    if (b.sending != 0 && b.sending - 1 < pos.frames) continue;  // it arrived whole
    pending.push_back({i, used, count, b.epoch, b.base_time_ns});
  }
  std::sort(pending.begin(), pending.end(),
            [](const Pending& a, const Pending& b) { return a.epoch < b.epoch; });
  if (pending.empty() && ctl.dropped_pending == 0) return 0;
  // Everything is read before the file is touched: a region that lies changes nothing.
  std::vector<std::vector<uint8_t>> data(pending.size());
  for (size_t k = 0; k < pending.size(); ++k) {
    const Pending& p = pending[k];
    data[k].resize(p.used);
    off_t at = static_cast<off_t>(format::kSharedDataOffset + p.index * ctl.capacity);
    if (pread(shared, data[k].data(), p.used, at) != static_cast<ssize_t>(p.used)) return 0;
  }
  // A frame cut off in the middle is written again whole: cut the piece off.
  if (pos.written != pos.boundary && ftruncate(out, static_cast<off_t>(pos.boundary)) != 0)
    return 0;
  if (lseek(out, static_cast<off_t>(pos.boundary), SEEK_SET) < 0) return 0;
  // A raw frame as the stream's version writes it: with its checksum from version 2 on.
  auto write_frame = [&pos, out](format::FrameHeader h, const uint8_t* records, size_t n) {
    h.stored_bytes = h.raw_bytes = static_cast<uint32_t>(n);
    h.codec = static_cast<uint8_t>(format::Codec::Raw);
    const bool sealed = format::frame_checksum_bytes(pos.version) != 0;
    const uint32_t sum = sealed ? format::seal_frame(h, records, n) : 0;
    return write_all_fd(out, &h, sizeof h) && write_all_fd(out, records, n) &&
           (!sealed || write_all_fd(out, &sum, sizeof sum));
  };
  uint64_t last_time = 0;
  for (size_t k = 0; k < pending.size(); ++k) {
    const Pending& p = pending[k];
    format::FrameHeader h{};
    h.record_count = static_cast<uint32_t>(p.count);
    h.base_time_ns = p.base_time;
    last_time = p.base_time;
    if (!write_frame(h, data[k].data(), data[k].size())) return appended;
    ++appended;
  }
  if (ctl.dropped_pending) {
    // Events dropped (both buffers full) after the last Dropped record: a record of no time.
    uint8_t record[format::max_fixed_bytes<format::rec::Dropped>()];
    uint8_t* end = format::put(record, format::rec::Dropped{ctl.dropped_pending});
    format::FrameHeader h{};
    h.record_count = 1;
    h.base_time_ns = last_time;
    if (!write_frame(h, record, static_cast<size_t>(end - record))) return appended;
    ++appended;
  }
  return appended;
}

}  // namespace vramtrace::collector
