// The report's remedies as changes of the request stream (collector/predict/request_stream.h),
// each then replayed through the allocator's model like any other prediction: what the program
// would ask the allocator for with the remedy applied. How each is read from what the start-up
// hook recorded is in docs/WHATIF.md. Each returns "" when it applied, else why it could not.
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "collector/predict/request_stream.h"

namespace vramtrace::collector {

// bf16 autocast: the activations and temporaries made in the forward and the backward (not
// gradients, parameters or optimizer state), and a failed request made in either, take half
// their bytes. Refused when a forward already ran under autocast (`autocast`).
std::string to_bf16_autocast(RequestStream& s, bool autocast);

// Activation checkpointing of the modules named (and those inside them): in each training
// forward call of one, the activations it made except its last (its output, the next one's
// input) are freed when its call ends, and made again, one module at a time, where the backward
// first frees one of them (their frees stay where they were).
std::string checkpoint_modules(RequestStream& s, const TorchContext& ctx,
                               const std::vector<std::string>& modules);

// The blocks kept across iterations (no_grad, .item(), detach: what the remedy stops keeping)
// are never made: `blocks` are indices into the trace's blocks.
std::string without_blocks(RequestStream& s, const std::unordered_set<size_t>& blocks);

}  // namespace vramtrace::collector
