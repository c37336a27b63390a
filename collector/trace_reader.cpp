// Decoding of vramtrace streams (see trace_reader.h and common/format.h).
#include "collector/trace_reader.h"

#include <sys/stat.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>

namespace vramtrace::collector {

using format::RecordType;

namespace {
constexpr uint32_t kMaxDeviceOrdinals = 4096;
}  // namespace

TraceReader::TraceReader(const std::string& path) : name_(path) {
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

std::unique_ptr<TraceReader> TraceReader::from_bytes(std::vector<uint8_t> bytes,
                                                     std::string name) {
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
    *got = std::fread(dst, 1, n, file_);
  }
  offset_ += *got;
  return *got == n;
}

uint64_t TraceReader::remaining_input() const {
  if (from_memory_) return memory_.size() - memory_pos_;
  struct stat st {};
  if (fstat(fileno(file_), &st) != 0 || !S_ISREG(st.st_mode)) return UINT64_MAX;  // a pipe
  return static_cast<uint64_t>(st.st_size) > offset_ ? st.st_size - offset_ : 0;
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
  if (h.version != format::kFormatVersion)
    throw TraceError(name_ + ": trace format version " + std::to_string(h.version) +
                     ", this vramtrace reads version " + std::to_string(format::kFormatVersion));
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
      (h.codec != static_cast<uint8_t>(format::Codec::Raw) &&
       h.codec != static_cast<uint8_t>(format::Codec::Zstd))) {
    problem_ = "corrupt frame header at byte " + std::to_string(at);
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
  if (zstd) {
    // The size the compressed frame says it decodes to must be the header's, before we
    // allocate that much.
    if (ZSTD_getFrameContentSize(stored.data(), stored.size()) != h.raw_bytes) {
      problem_ = "corrupt compressed frame at byte " + std::to_string(at);
      return false;
    }
    frame_.resize(h.raw_bytes);
    size_t n = ZSTD_decompress(frame_.data(), frame_.size(), stored.data(), stored.size());
    if (ZSTD_isError(n) || n != h.raw_bytes) {
      problem_ = "corrupt compressed frame at byte " + std::to_string(at);
      return false;
    }
  } else if (h.raw_bytes != h.stored_bytes) {
    problem_ = "corrupt frame header at byte " + std::to_string(at);
    return false;
  }
  cursor_ = format::ByteReader(frame_.data(), frame_.size());
  frame_time_ = h.base_time_ns;
  frame_records_left_ = h.record_count;
  ++frames_;
  return true;
}

bool TraceReader::decode(format::ByteReader& r, Event& e) {
  auto type = static_cast<RecordType>(r.u8());
  // `e` is reused from the record before: clear what this record may not set (the strings are
  // assigned by the records that carry them).
  e.type = type;
  e.time_ns = 0;
  e.api = format::Api::Unknown;
  e.device = 0;
  e.address = e.bytes = e.stream = e.a = e.b = e.c = 0;
  e.thread = 0;
  auto time = [&] {
    frame_time_ += r.varint();
    e.time_ns = frame_time_;
  };
  auto api = [&] { e.api = static_cast<format::Api>(r.u8()); };
  auto str = [&](std::string& out) {
    size_t n = 0;
    const char* s = r.bytes(&n);
    out.assign(s, n);
  };
  switch (type) {
    case RecordType::Process:
      e.a = r.varint();  // pid
      e.b = r.varint();  // ppid
      e.c = r.varint();  // realtime ns at start
      e.time_ns = r.varint();
      str(e.text);   // host
      str(e.text2);  // exe
      str(e.text3);  // cmdline
      str(e.text4);  // rank environment
      break;
    case RecordType::ContextCreate:
      time();
      e.address = r.varint();
      e.device = static_cast<uint32_t>(r.varint());
      e.bytes = r.varint();
      str(e.text);   // device name
      str(e.text2);  // uuid bytes
      break;
    case RecordType::ContextDestroy:
      time();
      e.address = r.varint();
      break;
    case RecordType::Alloc:
      time();
      api();
      e.device = static_cast<uint32_t>(r.varint());
      e.address = r.varint();
      e.bytes = r.varint();
      e.stream = r.varint();
      e.thread = static_cast<uint32_t>(r.varint());
      break;
    case RecordType::Free:
      time();
      api();
      e.device = static_cast<uint32_t>(r.varint());
      e.address = r.varint();
      e.stream = r.varint();
      e.thread = static_cast<uint32_t>(r.varint());
      break;
    case RecordType::AllocFailed:
      time();
      api();
      e.device = static_cast<uint32_t>(r.varint());
      e.bytes = r.varint();
      e.a = r.varint();  // CUresult
      e.thread = static_cast<uint32_t>(r.varint());
      break;
    case RecordType::Launch:
      time();
      api();
      e.device = static_cast<uint32_t>(r.varint());
      e.stream = r.varint();
      e.a = r.varint();  // kernel name id
      break;
    case RecordType::String:
      e.a = r.varint();
      str(e.text);
      break;
    case RecordType::VmmCreate:
      time();
      e.device = static_cast<uint32_t>(r.varint());
      e.address = r.varint();  // handle
      e.bytes = r.varint();
      break;
    case RecordType::VmmRelease:
      time();
      e.address = r.varint();
      break;
    case RecordType::VmmMap:
      time();
      e.address = r.varint();  // virtual address
      e.bytes = r.varint();
      e.a = r.varint();  // offset
      e.b = r.varint();  // handle
      break;
    case RecordType::VmmUnmap:
      time();
      e.address = r.varint();
      e.bytes = r.varint();
      break;
    case RecordType::Dropped:
      e.a = r.varint();
      break;
    case RecordType::ProcessExit:
      time();
      e.a = r.varint();  // events recorded
      e.b = r.varint();  // events dropped
      break;
    case RecordType::Notice:
      str(e.text);
      break;
    case RecordType::MemInfo:
      time();
      e.device = static_cast<uint32_t>(r.varint());
      e.a = r.varint();  // free
      e.b = r.varint();  // total
      break;
    case RecordType::PoolUsage:
      time();
      e.device = static_cast<uint32_t>(r.varint());
      e.address = r.varint();  // pool handle
      e.a = r.varint();        // reserved
      e.b = r.varint();        // used
      e.c = r.varint();        // reserved high-water mark
      break;
    case RecordType::StackNode:
      e.a = r.varint();        // node id
      e.b = r.varint();        // parent id
      e.address = r.varint();  // return address
      break;
    case RecordType::PyStackNode:
      e.a = r.varint();  // node id
      e.b = r.varint();  // parent id
      e.c = r.varint();  // code id
      e.bytes = r.varint();  // line
      break;
    case RecordType::PyCode:
      e.a = r.varint();  // code id
      str(e.text);       // file
      str(e.text2);      // function
      break;
    case RecordType::AllocStack:
      e.a = r.varint();  // native leaf
      e.b = r.varint();  // Python leaf
      break;
    case RecordType::Module:
      e.a = r.varint();        // generation
      e.address = r.varint();  // load bias
      e.b = r.varint();        // lowest address
      e.c = r.varint();        // end address
      str(e.text);             // path
      str(e.text2);            // build-id bytes
      break;
    case RecordType::RangePush:
      time();
      e.thread = static_cast<uint32_t>(r.varint());
      e.a = r.varint();  // name string id
      break;
    case RecordType::RangePop:
      time();
      e.thread = static_cast<uint32_t>(r.varint());
      break;
    case RecordType::UserPool:
      e.a = r.varint();  // pool id
      e.device = static_cast<uint32_t>(r.varint());
      e.b = r.varint();  // name string id
      break;
    case RecordType::UserSegment:
      time();
      e.a = r.varint();  // pool id
      e.address = r.varint();
      e.bytes = r.varint();
      e.b = r.varint();  // SegmentOp
      if (e.b > static_cast<uint64_t>(format::SegmentOp::Unmap)) return false;
      break;
    case RecordType::UserBlock:
      time();
      e.a = r.varint();  // pool id
      e.address = r.varint();
      e.bytes = r.varint();
      e.thread = static_cast<uint32_t>(r.varint());
      break;
    case RecordType::UserOom:
      time();
      e.a = r.varint();  // pool id
      e.bytes = r.varint();
      e.thread = static_cast<uint32_t>(r.varint());
      e.b = r.varint();  // device free bytes + 1
      break;
    case RecordType::Step:
      time();
      e.a = r.varint();  // step number
      break;
    case RecordType::Settings: {
      const uint64_t n = r.varint();  // fields
      if (n > format::kMaxSettings) return false;
      e.a = 1;  // launches recorded, unless the record says otherwise
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t v = r.varint();
        if (i == static_cast<uint64_t>(format::Setting::Launches)) {
          if (v > 1) return false;
          e.a = v;
        }  // fields of later settings: skipped
      }
      e.b = n;
      break;
    }
    default:
      return false;
  }
  // A CUDA device ordinal is below cuDeviceGetCount(); one this large is corruption, and each
  // distinct one costs a device in the model and the report (a crafted 0.5 MB trace of 40k
  // ordinals made a 150 MB report.json and 1.4 GiB of memory).
  if (e.device >= kMaxDeviceOrdinals) return false;
  return r.ok();
}

std::optional<Event> TraceReader::next() {
  Event e;
  if (!next(e)) return std::nullopt;
  return e;
}

bool TraceReader::next(Event& e) {
  if (done_) return false;
  while (cursor_.at_end())
    if (!next_frame()) return stop();
  if (!decode(cursor_, e)) return stop(Stop::CorruptRecord, static_cast<int>(e.type));
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
