// The names of the environment variables vramtrace reads, once for both sides: the preloaded
// library reads them (interpose/options.cpp, the only place it does) and `vramtrace run` sets
// them for the command it launches (cli/). The Python hook (python/vramtrace/_hook) reads the
// VRAMTRACE_TORCH_* ones.
#pragma once

namespace vramtrace::env {

// ---- read by the preloaded library -------------------------------------------------------------
// Where the trace goes: a file name pattern (%p: the pid), or the collector's socket (it wins).
inline constexpr char kOutput[] = "VRAMTRACE_OUTPUT";
inline constexpr char kSocket[] = "VRAMTRACE_SOCKET";
// The run a process belongs to: made by the first process of a tree (or by `vramtrace run`),
// inherited by the processes it starts, recorded with each process.
inline constexpr char kRunId[] = "VRAMTRACE_RUN_ID";
// The writer: each buffer's size (KiB), the flush period (ms), frame compression (auto|off) and
// the libzstd to load.
inline constexpr char kBufferKb[] = "VRAMTRACE_BUFFER_KB";
inline constexpr char kFlushMs[] = "VRAMTRACE_FLUSH_MS";
inline constexpr char kCompress[] = "VRAMTRACE_COMPRESS";
inline constexpr char kZstdLib[] = "VRAMTRACE_ZSTD_LIB";
// Stacks at allocations: auto|native|python|all|none, their depth, and the size from which a
// stream-ordered allocation gets one in auto mode.
inline constexpr char kStacks[] = "VRAMTRACE_STACKS";
inline constexpr char kMaxDepth[] = "VRAMTRACE_MAX_DEPTH";
inline constexpr char kAsyncStackMinBytes[] = "VRAMTRACE_ASYNC_STACK_MIN_BYTES";
// Kernel launches recorded: on|off.
inline constexpr char kLaunches[] = "VRAMTRACE_LAUNCHES";
// Anything but empty or 0: the library stays off in this process.
inline constexpr char kDisable[] = "VRAMTRACE_DISABLE";
// The CUPTI library to load, before the usual places.
inline constexpr char kCupti[] = "VRAMTRACE_CUPTI";
// Folders (':'-separated) where NVIDIA's pip wheels may hold CUPTI, looked at after every other
// place: the Python package's `vramtrace` command sets them to its Python's path.
inline constexpr char kSitePackages[] = "VRAMTRACE_SITE_PACKAGES";

// ---- read by the Python hook (python/vramtrace/_hook/sitecustomize.py) --------------------------
inline constexpr char kTorchDir[] = "VRAMTRACE_TORCH_DIR";
inline constexpr char kTorchStacks[] = "VRAMTRACE_TORCH_STACKS";
// PyTorch's allocator trace: "sampled", on in the sampled iterations only (--torch=sampled);
// "full", on throughout (--torch=full); unset, sampled where it would cost more than
// VRAMTRACE_TORCH_TRACE_BUDGET's share of an iteration (default 0.01).
inline constexpr char kTorchTrace[] = "VRAMTRACE_TORCH_TRACE";
inline constexpr char kTorchContext[] = "VRAMTRACE_TORCH_CONTEXT";  // off: no categories
inline constexpr char kTorchModules[] = "VRAMTRACE_TORCH_MODULES";  // every: no sampling
// The Python lines of blocks made between forward, backward and step: off, or the share of an
// iteration their frames may cost (default 0.005).
inline constexpr char kTorchLines[] = "VRAMTRACE_TORCH_LINES";
// A file the launcher touches to ask for the allocator's trace of the moment (a live report).
inline constexpr char kTorchLive[] = "VRAMTRACE_TORCH_LIVE";
// `vramtrace plan`: "1", the hook predicts the first training step on fake tensors and ends the
// process (status 0) before that step's forward runs.
inline constexpr char kPlan[] = "VRAMTRACE_PLAN";
// `vramtrace run --preflight`: the folder where the hook asks the launcher for the verdict of its
// first training step, predicted on fake tensors before it runs (preflight.<pid>.ask), and
// finds it said (preflight.<pid>.done).
inline constexpr char kPreflight[] = "VRAMTRACE_PREFLIGHT";
// How long the hook waits for that verdict, in seconds (default 30; 0: it does not wait).
inline constexpr char kPreflightWait[] = "VRAMTRACE_PREFLIGHT_WAIT";

// ---- read by the command-line tool -----------------------------------------------------------
inline constexpr char kLib[] = "VRAMTRACE_LIB";
inline constexpr char kProgress[] = "VRAMTRACE_PROGRESS";

}  // namespace vramtrace::env
