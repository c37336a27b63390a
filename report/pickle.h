// A Python pickle (protocol 2) of built-in values only: dict, list, tuple, str, int, float, bool
// and None, enough for a PyTorch memory snapshot (report/memory_viz.h) that Python's pickle and
// pytorch.org/memory_viz load. No classes, no memo: what the file holds is plain data whatever
// the strings in it say.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace vramtrace::report::pickle {

// A value of the pickle: one of the built-in kinds. Integers are 64-bit signed or unsigned
// (addresses reach 2^64 - 1) and are written as Python ints of any size.
class Value {
 public:
  enum class Kind { None, Bool, Int, UInt, Float, Str, List, Tuple, Dict };
  Value() = default;  // None
  static Value boolean(bool b);
  static Value integer(int64_t v);
  static Value uinteger(uint64_t v);
  static Value real(double v);
  static Value str(std::string s);  // UTF-8; invalid bytes are replaced (pickle checks them)
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value dict();

  Kind kind() const { return kind_; }
  // A dict's entry, appended in order (a key given twice is written twice: the last wins).
  Value& set(std::string key, Value v);
  // A list's item, appended.
  Value& push(Value v);
  const std::vector<Value>& items() const { return items_; }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  friend std::string dumps(const Value& v);
  friend void write_value(std::string& out, const Value& v);
  Kind kind_ = Kind::None;
  bool b_ = false;
  int64_t i_ = 0;
  uint64_t u_ = 0;
  double d_ = 0;
  std::string s_;
  std::vector<Value> items_;
  std::vector<std::pair<std::string, Value>> entries_;
};

// The pickle's bytes: PROTO 2, the value, STOP.
std::string dumps(const Value& v);

}  // namespace vramtrace::report::pickle
