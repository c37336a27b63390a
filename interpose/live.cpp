// Live figures of the traced process, kept in the process itself so that it can ask about its
// own device memory while it runs (vramtrace_v1_live_* in vramtrace.h; the Python API and the
// pytest plugin read them through ctypes).
//
// Every tracked allocation is one entry of an open-addressing table (address or handle, bytes,
// device, site, sequence number), so that a free, which carries only an address, can take its
// bytes off the right device and site. Per device: bytes live, their peak, and what the
// program's own pools (vramtrace.h) only cache; "in use" is live minus cached. Per site (the
// innermost Python frame, else the first native frame outside CUDA and vramtrace, per device):
// bytes in use now and at the in-use peak since the last mark. The at-peak figure costs O(1) per
// update: a site copies its value aside the first time it changes after a new peak (an epoch per
// device), so the peak's breakdown is never rebuilt.
//
// Own lock, separate from the recorder's; the table is mmap'd and grows by doubling. Nothing here
// writes trace records or does I/O.
#include "interpose/live.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "interpose/intern.h"
#include "interpose/stacks.h"

namespace vramtrace::interpose {
namespace {

constexpr int kMaxDevices = 64;
constexpr uint32_t kMaxSites = 8192;
constexpr size_t kSiteName = 192;
constexpr uint64_t kMaxPools = 4096;

struct Entry {
  uint64_t id;
  uint64_t pool;
  uint64_t bytes;
  uint64_t seq;
  uint32_t site;
  int16_t device;
  uint8_t kind;
  uint8_t used : 1;
  uint8_t segment : 1;  // a driver allocation registered as a pool's segment: cached, not in use
};

struct Device {
  int64_t live = 0, peak = 0;
  int64_t segments = 0, blocks = 0;  // the pools' segments and the blocks handed out of them
  int64_t in_use_peak_mark = 0, live_peak_mark = 0;
  uint64_t epoch = 0;  // bumped at each new in-use peak since the mark
};

struct Site {
  uint64_t hash;
  int16_t device;
  bool used;
  int64_t in_use, snap;
  uint64_t epoch;
  char name[kSiteName];
};

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
Entry* g_tab = nullptr;
uint64_t g_cap = 0, g_count = 0;
uint64_t g_seq = 1;
uint64_t g_untracked = 0;  // allocations the table could not hold (mmap failed)
int g_devices = 0;
Device g_dev[kMaxDevices];
Site g_sites[kMaxSites];
uint32_t g_site_count = 0;
int16_t g_pool_device[kMaxPools];  // device + 1; 0: unknown pool
// Scratch for the site queries (under the lock).
int64_t g_acc_bytes[kMaxSites];
uint64_t g_acc_count[kMaxSites];
uint32_t g_order[kMaxSites];

struct Lock {
  Lock() { pthread_mutex_lock(&g_lock); }
  ~Lock() { pthread_mutex_unlock(&g_lock); }
};

// A child forked while another thread held the lock would wait on it forever: the child starts
// with a fresh one (its figures are its parent's at the fork).
void reset_lock_in_child() { pthread_mutex_init(&g_lock, nullptr); }
struct AtFork {
  AtFork() { pthread_atfork(nullptr, nullptr, reset_lock_in_child); }
} g_at_fork;

using hash::mix;

uint64_t key_hash(uint8_t kind, uint64_t id, uint64_t pool) {
  return mix(id ^ (pool * 0x9e3779b97f4a7c15ull) ^ (static_cast<uint64_t>(kind) << 60));
}

Entry* map_entries(uint64_t n) {
  void* p = mmap(nullptr, n * sizeof(Entry), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<Entry*>(p);
}

void place(Entry* tab, uint64_t cap, const Entry& e) {
  uint64_t i = key_hash(e.kind, e.id, e.pool) & (cap - 1);
  while (tab[i].used) i = (i + 1) & (cap - 1);
  tab[i] = e;
}

// Room for one more entry (load at most 1/2); false when the table cannot grow.
bool reserve() {
  if (g_tab && (g_count + 1) * 2 <= g_cap) return true;
  uint64_t cap = g_cap ? g_cap * 2 : 16384;
  Entry* tab = map_entries(cap);
  if (!tab) return false;
  for (uint64_t i = 0; i < g_cap; ++i)
    if (g_tab[i].used) place(tab, cap, g_tab[i]);
  if (g_tab) munmap(g_tab, g_cap * sizeof(Entry));
  g_tab = tab;
  g_cap = cap;
  return true;
}

Entry* find(uint8_t kind, uint64_t id, uint64_t pool) {
  if (!g_tab) return nullptr;
  uint64_t i = key_hash(kind, id, pool) & (g_cap - 1);
  while (g_tab[i].used) {
    Entry& e = g_tab[i];
    if (e.id == id && e.pool == pool && e.kind == kind) return &e;
    i = (i + 1) & (g_cap - 1);
  }
  return nullptr;
}

// Linear probing's deletion without tombstones: later entries of the run move back.
void erase(Entry* at) {
  const uint64_t mask = g_cap - 1;
  uint64_t i = static_cast<uint64_t>(at - g_tab), j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (!g_tab[j].used) break;
    uint64_t home = key_hash(g_tab[j].kind, g_tab[j].id, g_tab[j].pool) & mask;
    bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    g_tab[i] = g_tab[j];
    i = j;
  }
  g_tab[i].used = 0;
  --g_count;
}

// ---- sites ----------------------------------------------------------------------------------

bool is_cuda_or_vramtrace(const char* base) {
  for (const char* p : {"libcuda.so", "libcudart", "libcupti", "libvramtrace"})
    if (strncmp(base, p, strlen(p)) == 0) return true;
  return false;
}

// A name that is safe in a terminal and in one tab-separated line.
void clean(char* s) {
  for (; *s; ++s)
    if (static_cast<unsigned char>(*s) < 0x20 || *s == 0x7f) *s = '?';
}

uint64_t site_hash(const CapturedStack& s) {
  if (s.py_depth) return mix(s.py[0].code_hash * 31 + s.py[0].line) | 2;
  if (s.depth) {
    uint64_t h = hash::kFnvOffset;
    for (int i = 0; i < s.depth; ++i) h = hash::fnv1a_word(h, s.ips[i]);
    return mix(h) | 2;
  }
  return 1;  // no stack recorded
}

// Outside the lock: dladdr takes the loader's.
void site_name(const CapturedStack& s, char* out, size_t n) {
  if (s.py_depth) {
    // A long file name keeps its end (the file itself, and room for the line number).
    const PyFrameRef& f = s.py[0];
    constexpr uint32_t kMaxFile = 120;
    const char* file = f.file;
    uint32_t file_len = f.file_len;
    const char* cut = "";
    if (file_len > kMaxFile) {
      file += file_len - kMaxFile;
      file_len = kMaxFile;
      cut = "...";
    }
    snprintf(out, n, "%.*s (%s%.*s:%u)", static_cast<int>(std::min<uint32_t>(f.function_len, 48)),
             f.function, cut, static_cast<int>(file_len), file, f.line);
  } else if (!s.depth) {
    snprintf(out, n, "(no stack recorded)");
  } else {
    snprintf(out, n, "(inside CUDA)");
    for (int i = 0; i < s.depth; ++i) {
      Dl_info info;
      const uintptr_t ip = s.ips[i] ? s.ips[i] - 1 : 0;  // a return address: the call is before
      if (!dladdr(reinterpret_cast<void*>(ip), &info) || !info.dli_fname) continue;
      const char* base = strrchr(info.dli_fname, '/');
      base = base ? base + 1 : info.dli_fname;
      if (is_cuda_or_vramtrace(base)) continue;
      if (!*base) base = "(program)";
      if (info.dli_sname)
        snprintf(out, n, "%s (%s)", info.dli_sname, base);
      else
        snprintf(out, n, "%s+0x%lx", base,
                 static_cast<unsigned long>(ip - reinterpret_cast<uintptr_t>(info.dli_fbase)));
      break;
    }
  }
  clean(out);
}

// Under the lock. The site of (hash, device); the first call names it.
uint32_t find_site(uint64_t hash, int device, const char* name) {
  uint64_t i = mix(hash ^ static_cast<uint64_t>(device)) % kMaxSites;
  for (uint32_t n = 0; n < kMaxSites; ++n, i = (i + 1) % kMaxSites) {
    Site& s = g_sites[i];
    if (s.used && s.hash == hash && s.device == device) return static_cast<uint32_t>(i);
    if (!s.used) {
      if (g_site_count + 1 >= kMaxSites) break;  // keep a free slot so lookups terminate
      s.used = true;
      s.hash = hash;
      s.device = static_cast<int16_t>(device);
      snprintf(s.name, sizeof s.name, "%s", name);
      ++g_site_count;
      return static_cast<uint32_t>(i);
    }
  }
  return UINT32_MAX;  // table full: counted on the device, not on a site
}

bool site_known(uint64_t hash, int device) {
  uint64_t i = mix(hash ^ static_cast<uint64_t>(device)) % kMaxSites;
  for (uint32_t n = 0; n < kMaxSites && g_sites[i].used; ++n, i = (i + 1) % kMaxSites)
    if (g_sites[i].hash == hash && g_sites[i].device == device) return true;
  return false;
}

void site_add(uint32_t site, int64_t delta) {
  if (site >= kMaxSites) return;
  Site& s = g_sites[site];
  const Device& d = g_dev[s.device];
  if (s.epoch != d.epoch) {  // first change since the latest peak: keep its value at the peak
    s.snap = s.in_use;
    s.epoch = d.epoch;
  }
  s.in_use += delta;
}

int64_t site_at_peak(const Site& s) { return s.epoch == g_dev[s.device].epoch ? s.snap : s.in_use; }

void update_peaks(Device& d) {
  if (d.live > d.peak) d.peak = d.live;
  if (d.live > d.live_peak_mark) d.live_peak_mark = d.live;
  const int64_t in_use = d.live - d.segments + d.blocks;
  if (in_use > d.in_use_peak_mark) {
    d.in_use_peak_mark = in_use;
    ++d.epoch;
  }
}

bool valid_device(int device) { return device >= 0 && device < kMaxDevices; }

// Under the lock.
int pool_device(uint64_t pool) { return pool < kMaxPools ? g_pool_device[pool] - 1 : -1; }

}  // namespace

void live_alloc(LiveKind kind, int device, uint64_t id, uint64_t bytes, const CapturedStack& stack,
                uint64_t pool) {
  const uint64_t hash = site_hash(stack);
  Lock lock;
  if (kind == LiveKind::Block) device = pool_device(pool);
  if (!valid_device(device)) return;
  char name[kSiteName] = "(site)";
  if (!site_known(hash, device)) {
    // A new site: named once, outside the lock (dladdr takes the loader's lock).
    pthread_mutex_unlock(&g_lock);
    site_name(stack, name, sizeof name);
    pthread_mutex_lock(&g_lock);
  }
  const auto k = static_cast<uint8_t>(kind);
  if (Entry* old = find(k, id, pool)) {  // a free we did not see (e.g. during a fork)
    Device& od = g_dev[old->device];
    od.live -= kind == LiveKind::Block ? 0 : static_cast<int64_t>(old->bytes);
    if (kind == LiveKind::Block) od.blocks -= static_cast<int64_t>(old->bytes);
    if (!old->segment)
      site_add(old->site, -static_cast<int64_t>(old->bytes));
    else
      od.segments -= static_cast<int64_t>(old->bytes);
    erase(old);
  }
  if (!reserve()) {
    ++g_untracked;
    return;
  }
  Entry e{};
  e.id = id;
  e.pool = pool;
  e.bytes = bytes;
  e.seq = g_seq++;
  e.site = find_site(hash, device, name);
  e.device = static_cast<int16_t>(device);
  e.kind = k;
  e.used = 1;
  place(g_tab, g_cap, e);
  ++g_count;
  if (device >= g_devices) g_devices = device + 1;
  Device& d = g_dev[device];
  if (kind == LiveKind::Block)
    d.blocks += static_cast<int64_t>(bytes);
  else
    d.live += static_cast<int64_t>(bytes);
  site_add(e.site, static_cast<int64_t>(bytes));
  update_peaks(d);
}

void live_free(LiveKind kind, uint64_t id, uint64_t pool) {
  Lock lock;
  Entry* e = find(static_cast<uint8_t>(kind), id, pool);
  if (!e) return;
  Device& d = g_dev[e->device];
  const auto bytes = static_cast<int64_t>(e->bytes);
  if (kind == LiveKind::Block)
    d.blocks -= bytes;
  else
    d.live -= bytes;
  if (e->segment)
    d.segments -= bytes;
  else
    site_add(e->site, -bytes);
  erase(e);
  update_peaks(d);  // a free can raise in-use when a pool's blocks outlive its segment
}

void live_pool(uint64_t pool, int device) {
  if (pool >= kMaxPools || !valid_device(device)) return;
  Lock lock;
  g_pool_device[pool] = static_cast<int16_t>(device + 1);
}

void live_segment(uint64_t pool, uint64_t base, uint64_t bytes, bool add) {
  Lock lock;
  const int device = pool_device(pool);
  if (!valid_device(device)) return;
  Device& d = g_dev[device];
  Entry* e = find(static_cast<uint8_t>(LiveKind::Driver), base, 0);
  if (e && e->device == device && e->bytes == bytes) {
    // The segment is exactly one driver allocation: it stays cached until that allocation is
    // freed (the pool usually removes the segment just before), so in-use does not jump between.
    if (add && !e->segment) {
      e->segment = 1;
      d.segments += static_cast<int64_t>(bytes);
      site_add(e->site, -static_cast<int64_t>(bytes));
    }
  } else {
    d.segments += add ? static_cast<int64_t>(bytes) : -static_cast<int64_t>(bytes);
  }
  update_peaks(d);
}

}  // namespace vramtrace::interpose

// ---- vramtrace.h: the live figures ----------------------------------------------------------

using namespace vramtrace::interpose;

// The devices seen so far: ordinals 0 to the returned value - 1.
extern "C" __attribute__((visibility("default"))) int vramtrace_v1_live_devices() {
  Lock lock;
  return g_devices;
}

// out[0] bytes live (driver allocations, VMM physical memory), out[1] their peak, out[2] bytes
// in use (live minus what vramtrace.h pools only cache), out[3] in-use peak since the last mark,
// out[4] live peak since the last mark, out[5] allocations not tracked (table full). Returns how
// many fields were written (at most n), 0 for a device out of range.
extern "C" __attribute__((visibility("default"))) int vramtrace_v1_live_figures(int device,
                                                                                long long* out,
                                                                                int n) {
  if (!valid_device(device) || !out || n <= 0) return 0;
  Lock lock;
  const Device& d = g_dev[device];
  const long long v[] = {d.live,
                         d.peak,
                         d.live - d.segments + d.blocks,
                         d.in_use_peak_mark,
                         d.live_peak_mark,
                         static_cast<long long>(g_untracked)};
  const int count = std::min<int>(n, sizeof v / sizeof v[0]);
  for (int i = 0; i < count; ++i) out[i] = v[i];
  return count;
}

// Starts a measurement (one test): each device's peaks since the mark restart from what is live
// now. Returns the sequence number of the next allocation: allocations made after the mark have
// this number or more (vramtrace_v1_live_sites with what = 1).
extern "C" __attribute__((visibility("default"))) unsigned long long vramtrace_v1_live_mark() {
  Lock lock;
  for (Device& d : g_dev) {
    d.in_use_peak_mark = d.live - d.segments + d.blocks;
    d.live_peak_mark = d.live;
    ++d.epoch;
  }
  return g_seq;
}

// The sites of a device, most bytes first, as lines "bytes\tcount\tsite\n" written into buf (at
// most `top` lines, whole lines only, NUL-terminated). what = 0: bytes in use at the in-use peak
// since the last mark (count 0: not kept); what = 1: allocations made at sequence number `since`
// or later and still in use now (count: how many). Returns the bytes written, without the NUL.
extern "C" __attribute__((visibility("default"))) size_t vramtrace_v1_live_sites(
    int device, int what, unsigned long long since, int top, char* buf, size_t cap) {
  if (!buf || cap == 0) return 0;
  buf[0] = 0;
  if (!valid_device(device) || (what != 0 && what != 1)) return 0;
  Lock lock;
  memset(g_acc_bytes, 0, sizeof g_acc_bytes);
  memset(g_acc_count, 0, sizeof g_acc_count);
  if (what == 0) {
    for (uint32_t i = 0; i < kMaxSites; ++i)
      if (g_sites[i].used && g_sites[i].device == device) g_acc_bytes[i] = site_at_peak(g_sites[i]);
  } else {
    for (uint64_t i = 0; i < g_cap; ++i) {
      const Entry& e = g_tab[i];
      if (!e.used || e.segment || e.device != device || e.seq < since || e.site >= kMaxSites)
        continue;
      g_acc_bytes[e.site] += static_cast<int64_t>(e.bytes);
      ++g_acc_count[e.site];
    }
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < kMaxSites; ++i)
    if (g_acc_bytes[i] > 0) g_order[n++] = i;
  const uint32_t shown = std::min<uint32_t>(n, top > 0 ? static_cast<uint32_t>(top) : 0);
  std::partial_sort(g_order, g_order + shown, g_order + n, [](uint32_t a, uint32_t b) {
    return g_acc_bytes[a] != g_acc_bytes[b] ? g_acc_bytes[a] > g_acc_bytes[b] : a < b;
  });
  size_t used = 0;
  for (uint32_t k = 0; k < shown; ++k) {
    const uint32_t i = g_order[k];
    int len =
        snprintf(buf + used, cap - used, "%lld\t%llu\t%s\n", static_cast<long long>(g_acc_bytes[i]),
                 static_cast<unsigned long long>(g_acc_count[i]), g_sites[i].name);
    if (len < 0 || static_cast<size_t>(len) >= cap - used) {
      buf[used] = 0;  // a line that does not fit is left out whole
      break;
    }
    used += static_cast<size_t>(len);
  }
  return used;
}
