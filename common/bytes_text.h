// Byte counts as the reports, the summary and the remedies' words write them: one family, so
// that a figure reads the same wherever it is shown (report.json's texts depend on these
// exact forms: "512 B", "1.50 GiB").
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace vramtrace {

// In the largest binary unit the count reaches (B, KiB, MiB, GiB, TiB), two decimals; bytes
// whole ("512 B").
inline std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

// In GiB, two decimals ("0.50 GiB"), whatever the size: figures compared side by side.
inline std::string gib_text(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

// In MiB, two decimals ("1536.00 MiB").
inline std::string mib_text(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / 1048576.0);
  return buf;
}

// In GiB from 1 GiB up, else in MiB, two decimals.
inline std::string gib_or_mib_text(uint64_t bytes) {
  return bytes >= (1ull << 30) ? gib_text(bytes) : mib_text(bytes);
}

}  // namespace vramtrace
