// The Python start-up hook, the files of python/vramtrace/_hook/ embedded at build time
// (cli/python_hook.cmake): `vramtrace run` writes them into a private folder that it puts first
// on the command's PYTHONPATH, where Python runs sitecustomize.py at start. When the program
// imports torch (or jax) it turns PyTorch's allocator trace on and writes the side channel that
// collector/ingest/torch_trace.cpp reads (its lines: common/side_channel.h); the
// _vramtrace_*.py beside it are its parts (what the memory is, the lines written, the first
// step run on fake tensors).
#pragma once

namespace vramtrace::cli {
struct PythonHookFile {
  const char* name;  // sitecustomize.py, _vramtrace_context.py, ...
  const char* content;
};
extern const PythonHookFile kPythonHookFiles[];
extern const int kPythonHookFileCount;
}  // namespace vramtrace::cli
