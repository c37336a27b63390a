// Reading the library's options from the environment: the only place the library calls getenv
// for a VRAMTRACE_* variable (see options.h).
#include "interpose/options.h"

#include <stdlib.h>
#include <string.h>

#include "common/env_names.h"
#include "common/format.h"
#include "interpose/stacks.h"

namespace vramtrace::interpose {

Options read_options() {
  Options o{};
  o.output = getenv(env::kOutput);
  o.socket = getenv(env::kSocket);
  o.buffer_bytes = buffer_bytes(getenv(env::kBufferKb), format::kMaxFrameBytes);
  o.flush_interval_ns = flush_interval_ns(getenv(env::kFlushMs));
  o.compress = getenv(env::kCompress);
  o.zstd_lib = getenv(env::kZstdLib);
  o.stacks = stack_options(getenv(env::kStacks), getenv(env::kMaxDepth),
                           getenv(env::kAsyncStackMinBytes), kMaxStackDepth);
  o.launches_value = getenv(env::kLaunches);
  o.launches = launches_recorded(o.launches_value, &o.bad_launches);
  o.cupti = getenv(env::kCupti);
  o.site_packages = getenv(env::kSitePackages);
  return o;
}

bool disabled_by_environment() {
  const char* off = getenv(env::kDisable);
  return off && *off && strcmp(off, "0") != 0;
}

}  // namespace vramtrace::interpose
