// Decoding of vramtrace streams: the framing here, the records in common/records.h.
#include "collector/ingest/trace_reader.h"

#include <sys/stat.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>

namespace vramtrace::collector {

TraceReader::TraceReader(const std::string& path) : TraceReader(path, UINT64_MAX) {}

TraceReader::TraceReader(const std::string& path, uint64_t max_bytes)
    : name_(path), max_bytes_(max_bytes) {
  file_ = std::fopen(path.c_str(), "rbe");
  if (!file_) throw TraceError(path + ": cannot open: " + std::strerror(errno));
  try {
    read_header();
  } catch (...) {
    std::fclose(file_);
    file_ = nullptr;
    throw;
  }
}

std::unique_ptr<TraceReader> TraceReader::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  std::unique_ptr<TraceReader> r(new TraceReader());
  r->name_ = std::move(name);
  r->memory_ = std::move(bytes);
  r->from_memory_ = true;
  r->read_header();
  return r;
}

TraceReader::~TraceReader() {
  if (file_) std::fclose(file_);
}

bool TraceReader::read_exact(void* dst, size_t n, size_t* got) {
  if (from_memory_) {
    size_t avail = memory_.size() - memory_pos_;
    *got = n < avail ? n : avail;
    if (*got) std::memcpy(dst, memory_.data() + memory_pos_, *got);  // data() may be null
    memory_pos_ += *got;
  } else {
    const uint64_t left = max_bytes_ > offset_ ? max_bytes_ - offset_ : 0;
    const size_t want = n < left ? n : static_cast<size_t>(left);
    *got = want ? std::fread(dst, 1, want, file_) : 0;
  }
  offset_ += *got;
  return *got == n;
}

uint64_t TraceReader::remaining_input() const {
  if (from_memory_) return memory_.size() - memory_pos_;
  struct stat st {};
  if (fstat(fileno(file_), &st) != 0 || !S_ISREG(st.st_mode)) return UINT64_MAX;  // a pipe
  const uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(st.st_size), max_bytes_);
  return end > offset_ ? end - offset_ : 0;
}

void TraceReader::read_header() {
  format::FileHeader h{};
  size_t got = 0;
  if (!read_exact(&h, sizeof h, &got)) {
    if (got == 0) throw TraceError(name_ + ": empty file, not a vramtrace trace");
    throw TraceError(name_ + ": too short to be a vramtrace trace (" + std::to_string(got) +
                     " bytes)");
  }
  if (std::memcmp(h.magic, format::kMagic, sizeof h.magic) != 0)
    throw TraceError(name_ + ": not a vramtrace trace (bad magic)");
  if (h.version < format::kOldestFormatVersion || h.version > format::kFormatVersion)
    throw TraceError(name_ + ": trace format version " + std::to_string(h.version) +
                     ", this vramtrace reads versions " +
                     std::to_string(format::kOldestFormatVersion) + " to " +
                     std::to_string(format::kFormatVersion));
  checksum_bytes_ = format::frame_checksum_bytes(h.version);
  if (h.header_bytes < sizeof h || h.header_bytes > 4096)
    throw TraceError(name_ + ": corrupt header (size " + std::to_string(h.header_bytes) + ")");
  std::vector<uint8_t> rest(h.header_bytes - sizeof h);
  if (!rest.empty() && !read_exact(rest.data(), rest.size(), &got))
    throw TraceError(name_ + ": truncated header");
}

bool TraceReader::load_frame() {
  format::FrameHeader h{};
  size_t got = 0;
  const uint64_t at = offset_;
  if (!read_exact(&h, sizeof h, &got)) {
    if (got != 0)
      problem_ = "trace ends inside a frame header at byte " + std::to_string(at) +
                 " (the process was cut off while writing)";
    return false;
  }
  if (h.stored_bytes > format::kMaxFrameBytes || h.raw_bytes > format::kMaxFrameBytes ||
      h.stored_bytes < checksum_bytes_ ||
      (h.codec != static_cast<uint8_t>(format::Codec::Raw) &&
       h.codec != static_cast<uint8_t>(format::Codec::Zstd))) {
    problem_ = "corrupt frame header at byte " + std::to_string(at);
    return false;
  }
  // What a file can make the reader decode is bounded by its size: a frame of zstd can claim
  // 64 MiB from a few KB, and records cost time (and what they describe, memory) to apply.
  // Traces the library writes decode to 2 to 3 times their size, the most regular (bench/'s
  // synthetic ones) to 80 times.
  decoded_ += h.raw_bytes;
  const uint64_t file_bytes = at + sizeof h + h.stored_bytes;
  const uint64_t budget = kDecodeFloorBytes + kDecodePerByte * file_bytes;
  if (decoded_ > budget) {
    problem_ = "frame " + std::to_string(frames_ + 1) + " at byte " + std::to_string(at) +
               " would decode the trace to " + std::to_string(decoded_) +
               " bytes of records, more than the " + std::to_string(budget) + " that " +
               std::to_string(file_bytes) +
               " bytes of trace may decode to (256 MiB, and 256 a byte): the rest is not read";
    return false;
  }
  // A header may claim up to kMaxFrameBytes: allocate only what the input can still hold, so
  // that a few corrupt bytes cannot make us allocate (and zero) 64 MiB. The buffers are kept
  // from frame to frame (a raw frame is read straight into frame_).
  cursor_ = {};
  const bool zstd = h.codec == static_cast<uint8_t>(format::Codec::Zstd);
  std::vector<uint8_t>& stored = zstd ? stored_ : frame_;
  stored.resize(std::min<uint64_t>(remaining_input(), h.stored_bytes));
  read_exact(stored.data(), stored.size(), &got);
  if (got < h.stored_bytes) {
    problem_ = "trace ends inside a frame at byte " + std::to_string(at) + " (" +
               std::to_string(got) + " of " + std::to_string(h.stored_bytes) +
               " bytes; the process was cut off while writing)";
    return false;
  }
  // Version 2 on: the stored bytes end with their checksum (format.h), checked before anything
  // is made of them. A frame that fails it is damaged, as one that cannot be decoded.
  const size_t payload = stored.size() - checksum_bytes_;
  if (checksum_bytes_) {
    uint32_t sum;
    std::memcpy(&sum, stored.data() + payload, sizeof sum);
    if (sum != format::frame_checksum(h, stored.data(), payload)) {
      problem_ = "damaged frame at byte " + std::to_string(at) + ": its checksum does not match";
      return false;
    }
  }
  if (zstd) {
    // The size the compressed frame says it decodes to must be the header's, before we
    // allocate that much. zstd checks the content checksum a frame carries as it decodes.
    if (ZSTD_getFrameContentSize(stored.data(), payload) != h.raw_bytes) {
      problem_ = "corrupt compressed frame at byte " + std::to_string(at);
      return false;
    }
    frame_.resize(h.raw_bytes);
    size_t n = ZSTD_decompress(frame_.data(), frame_.size(), stored.data(), payload);
    if (ZSTD_isError(n) || n != h.raw_bytes) {
      problem_ = "corrupt compressed frame at byte " + std::to_string(at);
      return false;
    }
  } else if (h.raw_bytes != payload) {
    problem_ = "corrupt frame header at byte " + std::to_string(at);
    return false;
  } else {
    frame_.resize(payload);  // the checksum off
  }
  cursor_ = format::ByteReader(frame_.data(), frame_.size());
  frame_time_ = h.base_time_ns;
  frame_records_left_ = h.record_count;
  ++frames_;
  return true;
}

bool TraceReader::read_on(uint64_t max_bytes) {
  if (from_memory_ || !problem_.empty() || max_bytes < max_bytes_) return false;
  max_bytes_ = max_bytes;
  done_ = false;
  std::clearerr(file_);  // the end met before is not the file's end now
  return true;
}

std::unique_ptr<TraceReader> TraceReader::clone() const {
  if (from_memory_) return nullptr;
  std::unique_ptr<TraceReader> r(new TraceReader());
  // The same file, even if its name has gone or names another one since.
  const std::string self = "/proc/self/fd/" + std::to_string(fileno(file_));
  r->file_ = std::fopen(self.c_str(), "rbe");
  if (!r->file_ || fseeko(r->file_, static_cast<off_t>(offset_), SEEK_SET) != 0) return nullptr;
  r->name_ = name_;
  r->max_bytes_ = max_bytes_;
  r->frame_ = frame_;
  const size_t at = frame_.size() - cursor_.remaining();
  if (!cursor_.at_end())
    r->cursor_ = format::ByteReader(r->frame_.data() + at, cursor_.remaining());
  r->frame_time_ = frame_time_;
  r->frame_records_left_ = frame_records_left_;
  r->frames_ = frames_;
  r->offset_ = offset_;
  r->checksum_bytes_ = checksum_bytes_;
  r->decoded_ = decoded_;
  r->problem_ = problem_;
  r->done_ = done_;
  return r;
}

std::optional<Record> TraceReader::next() {
  Record r;
  if (!next(r)) return std::nullopt;
  return r;
}

bool TraceReader::next(Record& r) {
  if (done_) return false;
  while (cursor_.at_end())
    if (!next_frame()) return stop();
  if (!format::decode(cursor_, frame_time_, r))
    return stop(Stop::CorruptRecord, static_cast<int>(r.type));
  if (frame_records_left_ == 0) return stop(Stop::TooManyRecords);
  --frame_records_left_;
  return true;
}

// Out of line, so that next() stays small: it runs once a stream.
bool TraceReader::stop(Stop why, int type) {
  if (why == Stop::CorruptRecord)
    problem_ = "corrupt record in frame " + std::to_string(frames_) + " (type " +
               std::to_string(type) + ")";
  else if (why == Stop::TooManyRecords)
    problem_ = "frame " + std::to_string(frames_) + " holds more records than its header says";
  done_ = true;
  return false;
}

bool TraceReader::next_frame() {
  if (frame_records_left_ != 0) {  // 0 before the first frame
    problem_ = "frame " + std::to_string(frames_) + " holds fewer records than its header says";
    return false;
  }
  const bool loaded = load_frame();
  if (progress_) {
    progress_(offset_ - progress_reported_);
    progress_reported_ = offset_;
  }
  return loaded;
}

}  // namespace vramtrace::collector
