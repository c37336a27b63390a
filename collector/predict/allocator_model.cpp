// The model of PyTorch's CUDACachingAllocator (see allocator_model.h). Function names follow
// the allocator's own (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator) so that each
// rule can be checked against the source it models.
#include "collector/predict/allocator_model.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace vramtrace::collector {

// ---- settings -----------------------------------------------------------------------------------

uint64_t AllocatorSettings::divisions_for(uint64_t size) const {
  // CUDAAllocatorConfig::roundup_power2_divisions: intervals [1 MiB, 2 MiB), [2, 4), ... with
  // everything below 1 MiB in the first and everything from 32 GiB in the last.
  uint64_t log_size = 63 - static_cast<uint64_t>(__builtin_clzll(size | 1));
  constexpr uint64_t kStart = 20;  // log2(1 MiB)
  uint64_t index = log_size > kStart ? log_size - kStart : 0;
  return roundup_power2_divisions[std::min<uint64_t>(index, kRoundUpIntervals - 1)];
}

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

bool fail(std::string* error, const std::string& why) {
  *error = why;
  return false;
}

// A value's number as PyTorch 2.11's ConfigTokenizer reads it (toSizeT: std::stoull; toDouble:
// std::stod): the number the text starts with, the rest ignored ("1e3" is 1, "128MiB" 128, a
// '-' negates modulo 2^64 as strtoull does); no number at its start, or one out of range, is
// an error that stops PyTorch. `read` says what was taken when it was not the whole text.
bool torch_size(const std::string& key, const std::string& text, uint64_t* v, std::string* read,
                std::string* error) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str())
    return fail(error, "alloc-conf: " + key + ": '" + text + "' is not a number");
  if (errno == ERANGE)
    return fail(error, "alloc-conf: " + key + ": '" + text +
                           "' is out of range (PyTorch refuses a number past 2^64 - 1)");
  *v = x;
  *read = *end ? " (PyTorch reads '" + text + "' as " + std::to_string(x) +
                     ", the number it starts with)"
               : "";
  return true;
}

bool torch_double(const std::string& key, const std::string& text, double* v, std::string* read,
                  std::string* error) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(text.c_str(), &end);
  if (end == text.c_str())
    return fail(error, "alloc-conf: " + key + ": '" + text + "' is not a number");
  if (errno == ERANGE)
    return fail(error, "alloc-conf: " + key + ": '" + text +
                           "' is out of range of a double (PyTorch refuses it)");
  *v = x;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", x);
  *read = *end ? " (PyTorch reads '" + text + "' as " + buf + ", the number it starts with)" : "";
  return true;
}

// A True/False value (ConfigTokenizer::toBool: those two words exactly).
bool torch_bool(const std::string& key, const std::string& value, bool* v, std::string* error) {
  if (value != "True" && value != "False")
    return fail(error, "alloc-conf: " + key + " takes True or False, not '" + value + "'");
  *v = value == "True";
  return true;
}

bool power_of_2_or_0(uint64_t v) { return (v & (v - 1)) == 0; }

// A key's value into the settings; false with `*error` set when the value is not one PyTorch
// takes.
using KeyParser = bool (*)(const std::string& key, const std::string& value, AllocatorSettings& s,
                           std::string* error);

bool parse_expandable(const std::string& key, const std::string& value, AllocatorSettings& s,
                      std::string* error) {
  return torch_bool(key, value, &s.expandable_segments, error);
}

// max_split_size_mb, max_non_split_rounding_mb: at least kLargeBuffer (20 MiB), and no more
// MiB than a size_t holds in bytes (AcceleratorAllocatorConfig::parseMaxSplitSize).
bool parse_mib_limit(const std::string& key, const std::string& value, AllocatorSettings& s,
                     std::string* error) {
  uint64_t mib = 0;
  std::string read;
  if (!torch_size(key, value, &mib, &read, error)) return false;
  if (mib < (kLargeBuffer >> 20))
    return fail(error,
                "alloc-conf: " + key + " must be at least 20 (MiB), not '" + value + "'" + read);
  (key == "max_split_size_mb" ? s.max_split_size : s.max_non_split_rounding) =
      std::min<uint64_t>(mib, UINT64_MAX >> 20) << 20;
  return true;
}

bool parse_gc_threshold(const std::string& key, const std::string& value, AllocatorSettings& s,
                        std::string* error) {
  double d = 0;
  std::string read;
  if (!torch_double(key, value, &d, &read, error)) return false;
  if (!(d > 0 && d < 1))
    return fail(error, "alloc-conf: garbage_collection_threshold must be in (0, 1), not '" + value +
                           "'" + read);
  s.garbage_collection_threshold = d;
  return true;
}

bool parse_fraction(const std::string& key, const std::string& value, AllocatorSettings& s,
                    std::string* error) {
  double d = 0;
  std::string read;
  if (!torch_double(key, value, &d, &read, error)) return false;
  if (!(d > 0 && d <= 1))
    return fail(error, "alloc-conf: per_process_memory_fraction must be in (0, 1], not '" + value +
                           "'" + read);
  s.per_process_memory_fraction = d;
  return true;
}

// roundup_power2_divisions' list form: [SIZE_MB:DIVISIONS,...,>:DIVISIONS], each size a power of
// 2 setting the divisions of its interval and, from the previous size, the ones between.
bool parse_roundup_list(const std::string& value, AllocatorSettings& s, std::string* error) {
  if (value.back() != ']') return fail(error, "alloc-conf: roundup_power2_divisions: no ']'");
  std::array<uint64_t, kRoundUpIntervals> div{};
  bool first = true;
  size_t last = 0;
  std::string body = value.substr(1, value.size() - 2);
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string e =
        trim(body.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    start = comma == std::string::npos ? body.size() + 1 : comma + 1;
    if (e.empty()) continue;
    size_t c2 = e.find(':');
    uint64_t n = 0, mb = 0;
    std::string read;
    const std::string key = "roundup_power2_divisions";
    if (c2 == std::string::npos)
      return fail(error, "alloc-conf: roundup_power2_divisions entry '" + e +
                             "': SIZE_MB:DIVISIONS, divisions a power of 2 or 0");
    if (!torch_size(key, trim(e.substr(c2 + 1)), &n, &read, error)) return false;
    if (!power_of_2_or_0(n))
      return fail(error, "alloc-conf: roundup_power2_divisions entry '" + e +
                             "': divisions must be a power of 2 or 0" + read);
    const std::string k = trim(e.substr(0, c2));
    if (k == ">") {
      std::fill(div.begin() + static_cast<std::ptrdiff_t>(first ? 0 : last + 1), div.end(), n);
      continue;
    }
    if (!torch_size(key, k, &mb, &read, error)) return false;
    if (mb == 0 || !power_of_2_or_0(mb))
      return fail(error, "alloc-conf: roundup_power2_divisions size '" + k +
                             "' must be a power of 2 (MiB)" + read);
    size_t index = std::min<size_t>(63 - __builtin_clzll(mb), kRoundUpIntervals - 1);
    if (first)
      std::fill(div.begin(), div.begin() + static_cast<std::ptrdiff_t>(index), n);
    else
      for (size_t i = last + 1; i < index; ++i) div[i] = div[last];
    div[index] = n;
    last = index;
    first = false;
  }
  s.roundup_power2_divisions = div;
  return true;
}

bool parse_roundup(const std::string&, const std::string& value, AllocatorSettings& s,
                   std::string* error) {
  if (!value.empty() && value.front() == '[') return parse_roundup_list(value, s, error);
  uint64_t u = 0;
  std::string read;
  if (!torch_size("roundup_power2_divisions", value, &u, &read, error)) return false;
  // One number for every interval: a power of 2 (PyTorch takes 0 in the list form only).
  if (u == 0 || !power_of_2_or_0(u))
    return fail(error, "alloc-conf: roundup_power2_divisions must be a power of 2, not '" + value +
                           "'" + read);
  s.roundup_power2_divisions.fill(u);
  return true;
}

bool parse_backend(const std::string&, const std::string& value, AllocatorSettings&,
                   std::string* error) {
  if (value == "cudaMallocAsync")
    return fail(error,
                "alloc-conf: backend:cudaMallocAsync is the driver's stream-ordered allocator, not "
                "PyTorch's caching allocator that what-if models");
  if (value != "native") return fail(error, "alloc-conf: backend is native or cudaMallocAsync");
  return true;
}

// Taken and left alone: they change neither what the device's memory holds nor when. Their
// values are checked as PyTorch checks them (it refuses to start on a bad one).
bool no_effect_bool(const std::string& key, const std::string& value, AllocatorSettings&,
                    std::string* error) {
  bool ignored = false;
  return torch_bool(key, value, &ignored, error);
}
bool no_effect_threads(const std::string& key, const std::string& value, AllocatorSettings&,
                       std::string* error) {
  uint64_t n = 0;
  std::string read;
  if (!torch_size(key, value, &n, &read, error)) return false;
  // A power of 2, at most pinned_max_register_threads() (128).
  if (n == 0 || !power_of_2_or_0(n) || n > 128)
    return fail(error, "alloc-conf: " + key + " must be a power of 2 up to 128, not '" + value +
                           "'" + read);
  return true;
}
bool no_effect_mib(const std::string& key, const std::string& value, AllocatorSettings&,
                   std::string* error) {
  uint64_t n = 0;
  std::string read;
  if (!torch_size(key, value, &n, &read, error)) return false;
  if (n == 0)
    return fail(error,
                "alloc-conf: " + key + " must be more than 0 (MiB), not '" + value + "'" + read);
  return true;
}

// Every key PyTorch's CUDAAllocatorConfig takes, in the order error messages list them.
struct ConfKey {
  const char* name;
  KeyParser parse;
};
const ConfKey kConfKeys[] = {
    {"backend", parse_backend},
    {"expandable_segments", parse_expandable},
    {"garbage_collection_threshold", parse_gc_threshold},
    {"graph_capture_record_stream_reuse", no_effect_bool},
    {"max_non_split_rounding_mb", parse_mib_limit},
    {"max_split_size_mb", parse_mib_limit},
    {"per_process_memory_fraction", parse_fraction},
    {"pinned_num_register_threads", no_effect_threads},
    {"pinned_reserve_segment_size_mb", no_effect_mib},
    {"pinned_use_background_threads", no_effect_bool},
    {"pinned_use_cuda_host_register", no_effect_bool},
    {"release_lock_on_cudamalloc", no_effect_bool},
    {"roundup_power2_divisions", parse_roundup},
};

// PyTorch's ConfigTokenizer: ',', ':', '[' and ']' each a token, the text between them the
// others, whitespace dropped wherever it is ("max_split_size_mb: 1 28" is 128).
std::vector<std::string> conf_tokens(const std::string& conf) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : conf) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
      out.emplace_back(1, c);
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

bool separator(const std::string& t) { return t == "," || t == ":" || t == "[" || t == "]"; }

// KEY:VALUE items separated by commas (a trailing comma allowed, as PyTorch's loop allows it);
// a VALUE is one token or a bracketed list (roundup_power2_divisions's [256:1,>:8]), given
// back as its text.
bool conf_items(const std::string& conf, std::vector<std::pair<std::string, std::string>>* items,
                std::string* error) {
  const std::vector<std::string> t = conf_tokens(conf);
  for (size_t i = 0; i < t.size();) {
    const std::string& key = t[i];
    if (separator(key) || i + 2 >= t.size() || t[i + 1] != ":")
      return fail(error,
                  "alloc-conf: '" + conf + "' is not KEY:VALUE,KEY:VALUE... (at '" + key + "')");
    std::string value = t[i + 2];
    i += 3;
    if (value == "[") {
      while (i < t.size() && t[i] != "]") value += t[i++];
      if (i == t.size())
        return fail(error, "alloc-conf: " + key + ": '" + value + "' has no closing ']'");
      value += t[i++];
    } else if (separator(value)) {
      return fail(error, "alloc-conf: " + key + " has no value");
    }
    items->emplace_back(key, value);
    if (i < t.size() && t[i++] != ",")
      return fail(error, "alloc-conf: a ',' between items, not '" + t[i - 1] + "' after " + key);
  }
  return true;
}

}  // namespace

const std::vector<std::string>& alloc_conf_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> v;
    for (const ConfKey& k : kConfKeys) v.push_back(k.name);
    return v;
  }();
  return keys;
}

bool parse_alloc_conf(const std::string& conf, AllocatorSettings* out, std::string* error) {
  AllocatorSettings s = *out;
  std::vector<std::pair<std::string, std::string>> items;
  if (!conf_items(conf, &items, error)) return false;
  for (const auto& [key, value] : items) {
    const ConfKey* found = nullptr;
    for (const ConfKey& k : kConfKeys)
      if (key == k.name) found = &k;
    if (!found) {
      std::string known;
      for (const auto& k : alloc_conf_keys()) known += (known.empty() ? "" : ", ") + k;
      return fail(error, "alloc-conf: unknown key '" + key + "' (known: " + known + ")");
    }
    if (!found->parse(key, value, s, error)) return false;
  }
  *out = s;
  return true;
}

std::string describe_settings(const AllocatorSettings& s) {
  std::string out;
  auto add = [&](const std::string& kv) { out += (out.empty() ? "" : ",") + kv; };
  if (s.expandable_segments) add("expandable_segments:True");
  if (s.max_split_size != UINT64_MAX)
    add("max_split_size_mb:" + std::to_string(s.max_split_size >> 20));
  if (s.max_non_split_rounding != kLargeBuffer)
    add("max_non_split_rounding_mb:" + std::to_string(s.max_non_split_rounding >> 20));
  bool any = false, same = true;
  for (auto d : s.roundup_power2_divisions) {
    any |= d != 0;
    same &= d == s.roundup_power2_divisions[0];
  }
  if (any && same) add("roundup_power2_divisions:" + std::to_string(s.roundup_power2_divisions[0]));
  if (any && !same) {
    std::string l = "[";
    for (size_t i = 0; i < kRoundUpIntervals; ++i)
      l += (i ? "," : "") + std::to_string(1ull << i) + ":" +
           std::to_string(s.roundup_power2_divisions[i]);
    add("roundup_power2_divisions:" + l + "]");
  }
  if (s.garbage_collection_threshold > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "garbage_collection_threshold:%g",
                  s.garbage_collection_threshold);
    add(buf);
  }
  if (s.per_process_memory_fraction) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "per_process_memory_fraction:%g",
                  *s.per_process_memory_fraction);
    add(buf);
  }
  return out;
}

// ---- the allocator ------------------------------------------------------------------------------

struct CachingAllocatorModel::Block {
  uint64_t ptr = 0, size = 0, requested = 0, stream = 0;
  Pool* pool = nullptr;
  Block *prev = nullptr, *next = nullptr;  // neighbours in the same segment
  Segment* es = nullptr;                   // its expandable segment, if any
  int64_t gc_count_base = 0;               // the pool's get_free_block count when cached
  bool allocated = false, mapped = true;
  bool is_split() const { return prev || next; }
};

namespace {
using Block = CachingAllocatorModel::Block;
// BlockComparatorSize and BlockComparatorAddress.
struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};
struct ByAddress {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    return a->ptr < b->ptr;
  }
};
}  // namespace

struct CachingAllocatorModel::Pool {
  explicit Pool(bool small) : is_small(small) {}
  bool is_small;
  std::set<Block*, BySize> blocks;
  std::set<Block*, ByAddress> unmapped;
  int64_t get_free_blocks_call_count = 0;
  void insert_into_blocks(Block* b) {
    b->gc_count_base = get_free_blocks_call_count;
    blocks.insert(b);
  }
};

// An expandable segment: a virtual range of `pages` pages of `page` bytes (2 MiB for the small
// pool, 20 MiB for the large), for one stream. Pages are mapped on demand.
struct CachingAllocatorModel::Segment {
  uint64_t base = 0, page = 0, pages = 0, stream = 0;
};

struct CachingAllocatorModel::Params {
  uint64_t size = 0, stream = 0, alloc_size = 0;
  Pool* pool = nullptr;
  Block* block = nullptr;
};

CachingAllocatorModel::CachingAllocatorModel(AllocatorSettings settings, uint64_t device_limit,
                                             std::optional<uint64_t> fraction_limit,
                                             uint64_t device_total)
    : s_(settings),
      device_limit_(device_limit),
      fraction_limit_(fraction_limit),
      device_total_(device_total ? device_total : device_limit),
      small_(std::make_unique<Pool>(true)),
      large_(std::make_unique<Pool>(false)) {}

CachingAllocatorModel::~CachingAllocatorModel() = default;

Block* CachingAllocatorModel::new_block() {
  if (free_list_.empty()) {
    constexpr size_t kChunk = 4096;
    block_chunks_.emplace_back(new Block[kChunk]);
    for (size_t i = kChunk; i-- > 0;) free_list_.push_back(&block_chunks_.back()[i]);
  }
  Block* b = free_list_.back();
  free_list_.pop_back();
  *b = Block{};
  return b;
}

void CachingAllocatorModel::delete_block(Block* b) { free_list_.push_back(b); }

void CachingAllocatorModel::grew(uint64_t bytes) {
  total_allocated_memory_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, total_allocated_memory_);
  ++segment_allocs_;
}

// round_size and roundup_power2_next_division.
uint64_t CachingAllocatorModel::round_size(uint64_t size) const {
  if (size < kMinBlockSize) return kMinBlockSize;
  const uint64_t divisions = s_.divisions_for(size);
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    if ((size & (size - 1)) == 0) return size;
    const uint64_t floor2 = 1ull << (63 - __builtin_clzll(size));
    const uint64_t step = floor2 >> (63 - __builtin_clzll(divisions));
    if (step == 0) return floor2 << 1;
    const uint64_t down = size & ~(step - 1);
    return down == size ? size : down + step;
  }
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

namespace {
// get_allocation_size: what a new segment for a request of `size` (rounded) takes.
uint64_t get_allocation_size(uint64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}
}  // namespace

int64_t CachingAllocatorModel::malloc(uint64_t orig_size, uint64_t stream) {
  Params p;
  p.size = round_size(orig_size);
  p.stream = stream;
  p.pool = p.size <= kSmallSize ? small_.get() : large_.get();  // get_pool
  p.alloc_size = get_allocation_size(p.size);
  // malloc: the cache first (trigger_free_memory_callbacks frees nothing in a replay: its
  // callbacks release CUDA IPC memory, which a replay has none of).
  bool found = get_free_block(p);
  if (!found) {
    if (fraction_limit_ && s_.garbage_collection_threshold > 0) garbage_collect_cached_blocks();
    found = alloc_block(p) || (release_available_cached_blocks(p) && alloc_block(p)) ||
            (release_cached_blocks(), alloc_block(p));
  }
  if (!found) return -1;
  Block* b = alloc_found_block(p, orig_size, should_split(p.block, p.size));
  int64_t h;
  if (!free_handles_.empty()) {
    h = free_handles_.back();
    free_handles_.pop_back();
    handles_[static_cast<size_t>(h)] = b;
  } else {
    h = static_cast<int64_t>(handles_.size());
    handles_.push_back(b);
  }
  return h;
}

void CachingAllocatorModel::free(int64_t handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= handles_.size()) return;
  Block* b = handles_[static_cast<size_t>(handle)];
  if (!b) return;
  handles_[static_cast<size_t>(handle)] = nullptr;
  free_handles_.push_back(handle);
  free_block(b);
}

uint64_t CachingAllocatorModel::block_size(int64_t handle) const {
  const Block* b = handle >= 0 && static_cast<size_t>(handle) < handles_.size()
                       ? handles_[static_cast<size_t>(handle)]
                       : nullptr;
  return b ? b->size : 0;
}

uint64_t CachingAllocatorModel::block_address(int64_t handle) const {
  const Block* b = handle >= 0 && static_cast<size_t>(handle) < handles_.size()
                       ? handles_[static_cast<size_t>(handle)]
                       : nullptr;
  return b ? b->ptr : 0;
}

void CachingAllocatorModel::empty_cache() { release_cached_blocks(); }

bool CachingAllocatorModel::get_free_block(Params& p) {
  Pool& pool = *p.pool;
  if (fraction_limit_ && s_.garbage_collection_threshold > 0) ++pool.get_free_blocks_call_count;
  Block key;
  key.stream = p.stream;
  key.size = p.size;
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != p.stream) return false;
  if ((*it)->es && s_.expandable_segments) {
    // A free block at the mapped end of an expandable segment can grow into the unmapped
    // range after it: best fit counts that room.
    auto expandable_size = [](const Block* b) {
      return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
    };
    auto next = std::next(it);
    while ((*it)->es && next != pool.blocks.end() && (*next)->stream == p.stream &&
           expandable_size(*next) < expandable_size(*it))
      it = next++;
  }
  // Oversize blocks (>= max_split_size) serve only requests at least that large, and those
  // only within max_non_split_rounding of their size.
  if (p.size < s_.max_split_size && (*it)->size >= s_.max_split_size) return false;
  if (p.size >= s_.max_split_size && (*it)->size >= p.size + s_.max_non_split_rounding)
    return false;
  p.block = *it;
  pool.blocks.erase(it);
  return true;
}

void CachingAllocatorModel::garbage_collect_cached_blocks() {
  // Frees cached whole segments of the large pool that were not reused for the longest (by
  // get_free_block calls) until reserved is back under the threshold of the fraction.
  const auto threshold = static_cast<uint64_t>(s_.garbage_collection_threshold *
                                               static_cast<double>(*fraction_limit_));
  if (total_allocated_memory_ <= threshold) return;
  const uint64_t target = total_allocated_memory_ - threshold;
  uint64_t reclaimed = 0, total_age = 0;
  int64_t count = 0;
  Pool& pool = *large_;
  auto age = [&](const Block* b) {
    return static_cast<uint64_t>(pool.get_free_blocks_call_count - b->gc_count_base);
  };
  for (Block* b : pool.blocks)
    if (!b->is_split() && !b->es) {
      total_age += age(b);
      ++count;
    }
  if (count == 0) return;
  bool freed = true;
  while (reclaimed < target && freed && count > 0) {
    const double age_threshold = static_cast<double>(total_age) / static_cast<double>(count);
    freed = false;
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
      Block* b = *it;
      ++it;
      if (!b->is_split() && !b->es && static_cast<double>(age(b)) >= age_threshold) {
        freed = true;
        reclaimed += b->size;
        total_age -= age(b);
        --count;
        release_block(b);
      }
    }
  }
}

bool CachingAllocatorModel::alloc_block(Params& p) {
  // The per-process fraction is PyTorch's own check, before the driver is asked.
  if (fraction_limit_ && total_allocated_memory_ + p.alloc_size > *fraction_limit_) return false;
  if (s_.expandable_segments) {
    p.block = try_allocate_expandable_block(p.stream, *p.pool, p.size);
    return p.block != nullptr;
  }
  if (!device_has(p.alloc_size)) return false;  // cudaMalloc: out of memory
  Block* b = new_block();
  // Best fit breaks ties by address, so the model lays segments out as the driver did on the
  // H200: the large pool's from the top down (each below the one before: the newer wins a
  // tie), the small pool's 2 MiB ones upwards, one after the other, in a range of their own.
  if (p.pool->is_small) {
    b->ptr = next_small_address_;
    next_small_address_ += p.alloc_size;
  } else {
    next_address_ -= kRoundLarge * ((p.alloc_size + kRoundLarge - 1) / kRoundLarge);
    b->ptr = next_address_;
  }
  b->size = p.alloc_size;
  b->stream = p.stream;
  b->pool = p.pool;
  grew(p.alloc_size);
  ++live_segments_;
  p.block = b;
  return true;
}

bool CachingAllocatorModel::release_available_cached_blocks(const Params& p) {
  // Frees the smallest oversize cached block that covers the request, else the largest ones
  // until they do. Only with max_split_size set.
  if (s_.max_split_size == UINT64_MAX) return false;
  Pool& pool = *p.pool;
  Block key;
  key.stream = p.stream;
  key.size = std::max(p.size, s_.max_split_size);
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != p.stream) {
    if (it == pool.blocks.begin()) return false;
    uint64_t released = 0;
    --it;
    while (released < key.size && (*it)->size >= s_.max_split_size && (*it)->stream == p.stream &&
           !(*it)->es) {
      auto cur = it;
      released += (*it)->size;
      if (it != pool.blocks.begin()) {
        --it;
        release_block(*cur);
      } else {
        release_block(*cur);
        break;
      }
    }
    if (released < key.size) return false;
  } else {
    if ((*it)->es) return false;
    release_block(*it);
  }
  return true;
}

void CachingAllocatorModel::release_cached_blocks() {
  release_blocks(*large_);
  release_blocks(*small_);
}

void CachingAllocatorModel::release_blocks(Pool& pool) {
  // Every unsplit cached segment goes back to the driver; in expandable segments every free
  // page is unmapped.
  std::vector<Block*> to_unmap;
  for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
    Block* b = *it;
    ++it;
    if (b->es)
      to_unmap.push_back(b);
    else if (!b->prev && !b->next)
      release_block(b);
  }
  for (Block* b : to_unmap) {
    unmap_block(b);
    if (!b->prev && !b->next && !b->mapped) release_expandable_segment(b);
  }
}

void CachingAllocatorModel::release_block(Block* b) {
  total_allocated_memory_ -= b->size;
  ++segment_frees_;
  --live_segments_;
  b->pool->blocks.erase(b);
  delete_block(b);
}

void CachingAllocatorModel::unmap_block(Block* b) {
  // ExpandableSegment::unmap: only whole pages inside the block.
  const Segment& es = *b->es;
  const uint64_t off = b->ptr - es.base;
  const uint64_t begin = (off + es.page - 1) / es.page, end = (off + b->size) / es.page;
  if (begin >= end) return;
  Pool& pool = *b->pool;
  pool.blocks.erase(b);
  const uint64_t uptr = es.base + begin * es.page, usize = (end - begin) * es.page;
  auto splice = [](Block* n, Block* before, Block* after) {
    n->prev = before;
    if (before) before->next = n;
    n->next = after;
    if (after) after->prev = n;
  };
  if (uptr > b->ptr) {
    Block* before = new_block();
    *before = Block{b->ptr, uptr - b->ptr, 0, b->stream, &pool, nullptr, nullptr, b->es};
    splice(before, b->prev, b);
    pool.insert_into_blocks(before);
  }
  const uint64_t after_size = b->ptr + b->size - (uptr + usize);
  if (after_size > 0) {
    Block* after = new_block();
    *after = Block{uptr + usize, after_size, 0, b->stream, &pool, nullptr, nullptr, b->es};
    splice(after, b, b->next);
    pool.insert_into_blocks(after);
  }
  b->ptr = uptr;
  b->size = usize;
  b->mapped = false;
  try_merge_blocks(b, b->prev, pool);
  try_merge_blocks(b, b->next, pool);
  pool.unmapped.insert(b);
  total_allocated_memory_ -= usize;
  ++segment_frees_;
}

void CachingAllocatorModel::release_expandable_segment(Block* b) {
  b->pool->unmapped.erase(b);
  for (auto it = expandable_.begin(); it != expandable_.end(); ++it)
    if (it->get() == b->es) {
      expandable_.erase(it);
      break;
    }
  delete_block(b);
}

Block* CachingAllocatorModel::find_expandable_block(uint64_t stream, Pool& pool, uint64_t size) {
  // The lowest address of the stream's segments where free and unmapped room together fit the
  // request; else a new segment.
  auto allocatable = [](const Block* b) { return b && !b->allocated; };
  auto has_room = [&](const Block* b) {
    uint64_t bytes = 0;
    while (bytes < size && allocatable(b)) {
      bytes += b->size;
      b = b->next;
    }
    return bytes >= size;
  };
  Block key;
  key.stream = stream;
  for (auto it = pool.unmapped.lower_bound(&key);
       it != pool.unmapped.end() && (*it)->stream == stream; ++it) {
    Block* c = *it;
    if (allocatable(c->prev)) c = c->prev;
    if (has_room(c)) return c;
  }
  auto seg = std::make_unique<Segment>();
  seg->page = pool.is_small ? kSmallBuffer : kLargeBuffer;
  // Address space for 1 1/8 of the device's memory.
  const uint64_t space = device_total_ + device_total_ / 8;
  seg->pages = std::max<uint64_t>(1, (space + seg->page - 1) / seg->page);
  next_address_ -= seg->pages * seg->page;
  seg->base = next_address_;
  seg->stream = stream;
  Block* c = new_block();
  c->ptr = seg->base;
  c->size = seg->pages * seg->page;
  c->stream = stream;
  c->pool = &pool;
  c->mapped = false;
  c->es = seg.get();
  expandable_.push_back(std::move(seg));
  pool.unmapped.insert(c);
  return c;
}

bool CachingAllocatorModel::map_block(Block* to_map, uint64_t size) {
  const Segment& es = *to_map->es;
  const uint64_t begin = (to_map->ptr - es.base) / es.page;
  const uint64_t end = (to_map->ptr + size - es.base + es.page - 1) / es.page;
  if (begin == end) return false;
  const uint64_t bytes = (end - begin) * es.page;
  // cuMemCreate page by page: one that fails releases those made before it.
  if (!device_has(bytes)) return false;
  Pool& pool = *to_map->pool;
  pool.unmapped.erase(to_map);
  to_map->mapped = true;
  if (bytes < to_map->size) {
    Block* rest = new_block();
    *rest =
        Block{to_map->ptr + bytes, to_map->size - bytes, 0, to_map->stream, &pool, nullptr, nullptr,
              to_map->es};
    rest->mapped = false;
    rest->prev = to_map;
    rest->next = to_map->next;
    if (to_map->next) to_map->next->prev = rest;
    to_map->next = rest;
    pool.unmapped.insert(rest);
    to_map->size = bytes;
  }
  try_merge_blocks(to_map, to_map->prev, pool);
  try_merge_blocks(to_map, to_map->next, pool);
  pool.insert_into_blocks(to_map);
  grew(bytes);
  return true;
}

Block* CachingAllocatorModel::try_allocate_expandable_block(uint64_t stream, Pool& pool,
                                                            uint64_t size) {
  Block* c = find_expandable_block(stream, pool, size);
  if (!c->mapped && !map_block(c, std::min(c->size, size))) return nullptr;
  while (c->size < size) {
    const uint64_t remaining = size - c->size;
    Block* n = c->next;
    if (!map_block(n, std::min(remaining, n->size))) return nullptr;
    c = n;  // map_block merged the free block before it into it
  }
  pool.blocks.erase(c);
  return c;
}

bool CachingAllocatorModel::should_split(const Block* b, uint64_t size) const {
  const uint64_t remaining = b->size - size;
  if (b->pool->is_small || s_.expandable_segments) return remaining >= kMinBlockSize;
  return size < s_.max_split_size && remaining > kSmallSize;
}

Block* CachingAllocatorModel::alloc_found_block(Params& p, uint64_t orig_size, bool split) {
  Block* b = p.block;
  if (split) {
    Block* remaining = b;
    b = new_block();
    b->ptr = remaining->ptr;
    b->size = p.size;
    b->stream = p.stream;
    b->pool = p.pool;
    b->es = remaining->es;
    b->prev = remaining->prev;
    if (b->prev) b->prev->next = b;
    b->next = remaining;
    remaining->prev = b;
    remaining->ptr += p.size;
    remaining->size -= p.size;
    p.pool->insert_into_blocks(remaining);
  }
  b->allocated = true;
  b->requested = orig_size;
  allocated_ += b->size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return b;
}

void CachingAllocatorModel::free_block(Block* b) {
  b->allocated = false;
  allocated_ -= b->size;
  Pool& pool = *b->pool;
  try_merge_blocks(b, b->prev, pool);
  try_merge_blocks(b, b->next, pool);
  pool.insert_into_blocks(b);
}

uint64_t CachingAllocatorModel::try_merge_blocks(Block* dst, Block* src, Pool& pool) {
  if (!src || src->allocated || dst->mapped != src->mapped) return 0;
  if (dst->prev == src) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  const uint64_t subsumed = src->size;
  dst->size += subsumed;
  if (src->mapped)
    pool.blocks.erase(src);
  else
    pool.unmapped.erase(src);
  delete_block(src);
  return subsumed;
}

AllocatorState CachingAllocatorModel::state() const {
  AllocatorState st;
  st.reserved_bytes = total_allocated_memory_;
  st.allocated_bytes = allocated_;
  st.cached_free_bytes = total_allocated_memory_ - std::min(total_allocated_memory_, allocated_);
  for (const Pool* pool : {small_.get(), large_.get()})
    for (const Block* b : pool->blocks) {
      st.largest_free_block = std::max(st.largest_free_block, b->size);
      ++st.free_blocks;
    }
  st.segments = live_segments_ + expandable_.size();
  st.background_bytes = background_;
  return st;
}

}  // namespace vramtrace::collector
