// The Python start-up hook, python/vramtrace/_hook/sitecustomize.py, embedded at build time
// (cli/python_hook.cmake): `vramtrace run` writes it as sitecustomize.py into a private folder
// that it puts first on the command's PYTHONPATH. When the program imports torch (or jax) it
// turns PyTorch's allocator trace on and writes the side channel that
// collector/ingest/torch_trace.cpp reads (its lines: common/side_channel.h). kPythonStepPrediction,
// written beside it as _vramtrace_step.py, runs the rest of a first step that died of an OOM on
// fake tensors, at exit.
#pragma once

namespace vramtrace::cli {
extern const char* const kPythonHook;
extern const char* const kPythonStepPrediction;
}  // namespace vramtrace::cli
