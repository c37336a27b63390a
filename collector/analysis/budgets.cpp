// The budgets of the CI gate (see compare.h): "5%", "256MiB", "1:10%", "activations:5%", each
// parsed once, and how much a budget allows above a baseline's figure.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "collector/analysis/compare.h"
#include "collector/model/torch_memory.h"
#include "common/bytes_text.h"

namespace vramtrace::collector {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

}  // namespace

std::string Budget::text() const {
  char buf[48];
  if (percent) {
    std::snprintf(buf, sizeof buf, "+%g%%", *percent);
    return buf;
  }
  return "+" + human_bytes(bytes.value_or(0));
}

namespace {
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Digits with at most one '.', at least one digit: what a budget's number may be. strtod alone
// also reads "0x10" (16), "1e3", "+5", "inf" and leading spaces.
bool plain_decimal(const std::string& s) {
  return std::count(s.begin(), s.end(), '.') <= 1 && std::any_of(s.begin(), s.end(), is_digit) &&
         std::all_of(s.begin(), s.end(), [](char c) { return c == '.' || is_digit(c); });
}
}  // namespace

namespace {

// A size in bytes; `with_percent`: the value of --max-increase, whose messages name
// percentages too.
uint64_t parse_size_of(const std::string& raw, bool with_percent) {
  const std::string not_size =
      "'" + raw +
      (with_percent ? "' is not a percentage or a size (examples: 5%, 256MiB)"
                    : "' is not a size (examples: 256MiB, 40GiB, 1048576)");
  std::string s = trim(raw);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) throw CheckError(not_size);
  char* end = nullptr;
  const std::string num = s.substr(0, i);
  double v = std::strtod(num.c_str(), &end);  // not stod: "." and 400 digits must not throw
  if (!end || *end != '\0' || !std::isfinite(v)) throw CheckError(not_size);
  std::string unit = trim(s.substr(i));
  // "0x10", "1e3", "1 2": what follows the number is more number, not a unit.
  if (std::any_of(unit.begin(), unit.end(), [](char c) { return c == '.' || is_digit(c); }))
    throw CheckError(not_size);
  std::string u;
  for (char ch : unit) u += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  static const std::map<std::string, double> units = {{"", 1},
                                                      {"b", 1},
                                                      {"k", 1024.0},
                                                      {"kib", 1024.0},
                                                      {"m", 1048576.0},
                                                      {"mib", 1048576.0},
                                                      {"g", 1073741824.0},
                                                      {"gib", 1073741824.0},
                                                      {"t", 1099511627776.0},
                                                      {"tib", 1099511627776.0},
                                                      {"kb", 1e3},
                                                      {"mb", 1e6},
                                                      {"gb", 1e9},
                                                      {"tb", 1e12}};
  auto it = units.find(u);
  if (it == units.end())
    throw CheckError("'" + raw + "': unknown unit '" + unit + "' (use " +
                     (with_percent ? "%, " : "") + "B, KiB, MiB, GiB, TiB)");
  if (v * it->second >= 18446744073709549568.0)  // the largest double below 2^64
    throw CheckError("'" + raw + "': too large");
  return static_cast<uint64_t>(std::round(v * it->second));  // llround stops at 2^63
}

}  // namespace

uint64_t parse_size(const std::string& raw) { return parse_size_of(raw, false); }

Budget parse_increase(const std::string& raw) {
  std::string s = trim(raw);
  Budget b;
  if (!s.empty() && s.back() == '%') {
    std::string num = trim(s.substr(0, s.size() - 1));
    char* end = nullptr;
    double p = plain_decimal(num) ? std::strtod(num.c_str(), &end) : -1;
    if (num.empty() || !end || *end != '\0' || !(p >= 0) || !std::isfinite(p))
      throw CheckError("'" + raw + "' is not a percentage (example: 5%)");
    b.percent = p;
  } else if (plain_decimal(s) && std::strtod(s.c_str(), nullptr) == 0.0) {
    // Zero is the same in every unit: no growth at all ("parameters:0").
    b.bytes = 0;
  } else if (plain_decimal(s)) {
    // "--max-increase 5" read as 5 bytes fails any growth at all: a share or a size is meant.
    throw CheckError("'" + raw + "' has no unit: write " + s +
                     "% for a share of the baseline's peak, or " + s + "MiB for a size");
  } else {
    b.bytes = parse_size_of(s, true);
  }
  return b;
}

namespace {
// "1:10%" -> device 1, "10%". A plain value has no device. `categories`: the option also takes
// CATEGORY:BUDGET, which the message of a word that is neither then lists.
std::pair<std::optional<uint32_t>, std::string> split_device(const std::string& v,
                                                             bool categories) {
  size_t colon = v.find(':');
  if (colon == std::string::npos) return {std::nullopt, v};
  std::string dev = trim(v.substr(0, colon));
  if (dev.empty() || dev.size() > 9 || !std::all_of(dev.begin(), dev.end(), ::isdigit)) {
    std::string names;
    for (const auto& k : category_keys()) names += (names.empty() ? "" : ", ") + k;
    throw CheckError("'" + v + "': expected DEVICE:BUDGET, e.g. 1:10%" +
                     (categories ? ", or CATEGORY:BUDGET with one of PyTorch's categories (" +
                                       names + "), e.g. activations:5%"
                                 : std::string()));
  }
  return {static_cast<uint32_t>(std::stoul(dev)), v.substr(colon + 1)};
}
}  // namespace

void given_once(Budgets& b, const std::string& option, const std::string& scope,
                const std::string& value) {
  auto [it, added] = b.given.try_emplace(option + " " + scope, value);
  if (!added)
    throw CheckError("'" + value + "': a second " + option + " for " + scope + " (the first: '" +
                     it->second + "'): give each budget once");
}

void add_increase_option(Budgets& b, const std::string& value) {
  if (add_category_option(b, value)) return;
  auto [dev, rest] = split_device(value, true);
  given_once(b, "--max-increase", dev ? "device " + std::to_string(*dev) : "every device", value);
  if (dev)
    b.max_increase_by_device[*dev] = parse_increase(rest);
  else
    b.max_increase = parse_increase(rest);
}

void add_peak_option(Budgets& b, const std::string& value) {
  auto [dev, rest] = split_device(value, false);
  given_once(b, "--max-peak", dev ? "device " + std::to_string(*dev) : "every device", value);
  if (dev)
    b.max_peak_by_device[*dev] = parse_size(rest);
  else
    b.max_peak = parse_size(rest);
}

uint64_t allowed_by(const Budget& inc, uint64_t b) {
  // Saturating: a budget of 1e300% or a peak near 2^64 allows everything, it does not wrap.
  double pct_slack = inc.percent ? std::floor(static_cast<double>(b) * *inc.percent / 100.0) : 0;
  uint64_t slack = !inc.percent                          ? inc.bytes.value_or(0)
                   : pct_slack >= 18446744073709549568.0 ? UINT64_MAX
                                                         : static_cast<uint64_t>(pct_slack);
  return slack > UINT64_MAX - b ? UINT64_MAX : b + slack;
}

std::vector<std::string> category_keys() {
  std::vector<std::string> out;
  for (size_t i = 0; i < collector::kCategories; ++i)
    out.push_back(collector::category_key(static_cast<collector::Category>(i)));
  return out;
}

bool add_category_option(Budgets& b, const std::string& value) {
  const size_t colon = value.find(':');
  if (colon == std::string::npos) return false;
  std::string key = value.substr(0, colon);
  std::replace(key.begin(), key.end(), '-', '_');  // "optimizer-state" reads as the key
  // Anything else before ':' is a device's, or a mistake that split_device() words.
  const std::vector<std::string> keys = category_keys();
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) return false;
  given_once(b, "--max-increase", key, value);
  b.by_category[key] = parse_increase(value.substr(colon + 1));
  return true;
}

}  // namespace vramtrace::collector
