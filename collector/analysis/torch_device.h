// What PyTorch's (or XLA's) memory on one device of a process was, as the report shows it: the
// categories at the peak moment, at the end and over time (with the allocator's cache and the
// memory outside PyTorch made to add up to the driver's figure), the modules, Python lines,
// named tensors (parameters, gradients, optimizer state) and largest blocks live at the peak,
// and what an OOM's moment was in PyTorch's terms (phase, iteration, module, the user's line).
// The classification itself is collector/model/torch_memory.h's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collector/analysis/diagnosis.h"
#include "collector/analysis/stacks.h"
#include "collector/model/model.h"
#include "collector/model/torch_memory.h"

namespace vramtrace::collector {

// Bytes by category, naming only the categories that hold something (or a block of 0 bytes).
using CategoryMap = std::map<Category, uint64_t>;

// A module's activations and temporaries live at the peak.
struct ModuleAtPeak {
  std::string module;  // full name ("layer3.2.conv2")
  uint64_t bytes = 0;
  // What the page expands a module to (known when the hook recorded the module itself): its
  // blocks by the user's line that ran it and by category, and where it is defined.
  bool detailed = false;
  uint64_t count = 0;
  std::string type;
  std::string forward_at;  // "model.py:41", "" when unknown
  CategoryMap categories;
  struct Line {
    std::string site;  // "forward (train.py:41)", "(line unknown)"
    uint64_t bytes = 0, count = 0;
  };
  std::vector<Line> sites;  // largest first
};

// PyTorch's blocks live at the peak by the user's Python line (the phase's call, or the line
// that moved a tensor to the GPU): what `check`, `diff` and the page name instead of the
// allocator's segments, whose sites are the line that happened to make a segment.
struct LineAtPeak {
  std::string site;  // "train.py:41", "(line unknown)"
  uint64_t bytes = 0, count = 0;
  CategoryMap categories;
  std::optional<std::string> module;  // the module that holds most of it
};

// A named tensor live at the peak: a parameter, buffer, gradient or optimizer state.
struct NamedTensorAtPeak {
  const TorchLabel* label = nullptr;  // its name, kind, shape and dtype
  Category category = Category::Parameters;
  uint64_t bytes = 0;
};

// One of the largest blocks live at the peak.
struct BlockAtPeak {
  uint64_t bytes = 0, address = 0;
  Category category = Category::Parameters;
  std::string what;  // TorchMemory::describe
  std::optional<std::string> module, site, name;
  std::optional<TorchPhase> phase;
  std::optional<int64_t> iteration;
};

struct TorchDevice {
  const XlaPool* xla = nullptr;  // JAX: XLA's own pool on the device, from memory_stats()
  bool classified = false;       // PyTorch's blocks were classified: everything below is set
  PeakMoment peak_moment;
  CategoryBytes at_peak{}, at_exit{};
  std::vector<PrivatePool> private_pools;  // CUDA graphs' pools, torch.cuda.MemPool
  // A run longer than PyTorch's ring: its earliest entry (0: the whole run is there).
  uint64_t window_start = 0;
  // Over time: the categories at each moment (the trace's clock), adding up to the driver's
  // figure then.
  std::vector<uint64_t> times;
  std::vector<CategoryBytes> series;
  std::vector<ModuleAtPeak> by_module;  // largest first, at most kTopModules
  std::vector<std::pair<std::string, uint64_t>> by_top_module;  // "layer1", largest first
  std::vector<NamedTensorAtPeak> tensors;  // largest first, at most kTopTensors
  size_t named_tensors = 0;                // how many were live at the peak in all
  std::vector<LineAtPeak> by_line;         // largest first, at most kTopLines
  std::vector<BlockAtPeak> blocks;         // largest first, at most kTopBlocks
};
inline constexpr size_t kTopModules = 200, kTopTensors = 100, kTopLines = 200, kTopBlocks = 50;

// None without the hook's context (no TorchMemory). `timeline_end_ns`: where the categories
// over time end (ProcessAnalysis::timeline_end_ns).
std::optional<TorchDevice> torch_device(const ProcessModel& p, const DeviceModel& d,
                                        uint64_t timeline_end_ns, StackResolver& stacks);

// An OOM's moment in PyTorch's terms.
struct TorchOom {
  std::string phase;  // forward, backward, optimizer, evaluation, "other"
  int64_t iteration = -1;
  std::optional<std::string> module;  // the innermost module running
  // The phase's call, or for the fatal OOM the user's innermost frame of the exception that
  // reached the top (with its function).
  std::optional<std::string> python_site, python_function;
  const TorchException* exception = nullptr;  // the fatal OOM's
  CategoryBytes categories{};
};
std::optional<TorchOom> torch_oom(const ProcessModel& p, const OomEvent& o, StackResolver& stacks);

}  // namespace vramtrace::collector
