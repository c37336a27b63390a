// The pickle writer of report/pickle.h: protocol 2's opcodes for built-in values, as
// Lib/pickle.py's _Pickler writes them (without its memo).
#include "report/pickle.h"

#include <cstring>

#include "common/utf8.h"

namespace vramtrace::report::pickle {

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}
Value Value::uinteger(uint64_t u) {
  Value v;
  v.kind_ = Kind::UInt;
  v.u_ = u;
  return v;
}
Value Value::real(double d) {
  Value v;
  v.kind_ = Kind::Float;
  v.d_ = d;
  return v;
}
Value Value::str(std::string s) {
  Value v;
  v.kind_ = Kind::Str;
  v.s_ = std::move(s);
  return v;
}
Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::List;
  v.items_ = std::move(items);
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::Tuple;
  v.items_ = std::move(items);
  return v;
}
Value Value::dict() {
  Value v;
  v.kind_ = Kind::Dict;
  return v;
}
Value& Value::set(std::string key, Value v) {
  entries_.emplace_back(std::move(key), std::move(v));
  return *this;
}
Value& Value::push(Value v) {
  items_.push_back(std::move(v));
  return *this;
}

namespace {

// Opcodes (Lib/pickletools.py).
constexpr char kProto = '\x80', kStop = '.', kNone = 'N', kTrue = '\x88', kFalse = '\x89';
constexpr char kBinInt = 'J', kBinInt1 = 'K', kLong1 = '\x8a', kBinFloat = 'G';
constexpr char kBinUnicode = 'X', kEmptyList = ']', kEmptyDict = '}', kMark = '(';
constexpr char kAppends = 'e', kSetItems = 'u', kTuple = 't', kEmptyTuple = ')';
// Lib/pickle.py batches APPENDS and SETITEMS by 1000: a loader's stack stays small.
constexpr size_t kBatch = 1000;

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// An int of any size as LONG1: little-endian two's complement, as few bytes as hold it.
void put_long(std::string& out, bool negative, uint64_t magnitude_or_bits) {
  std::string bytes;
  uint64_t v = magnitude_or_bits;  // the value's bits (two's complement when negative)
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  // Drop the high bytes that only repeat the sign, keeping the sign bit of the top byte right.
  const char fill = negative ? '\xff' : '\0';
  while (bytes.size() > 1 && bytes.back() == fill &&
         ((static_cast<unsigned char>(bytes[bytes.size() - 2]) & 0x80) != 0) == negative)
    bytes.pop_back();
  // A positive value whose top bit is set needs a zero byte above it (2^63 .. 2^64 - 1).
  if (!negative && (static_cast<unsigned char>(bytes.back()) & 0x80)) bytes.push_back('\0');
  out.push_back(kLong1);
  out.push_back(static_cast<char>(bytes.size()));
  out += bytes;
}

// Valid UTF-8, each sequence that is not replaced by U+FFFD (Python refuses invalid bytes).
std::string utf8_of(const std::string& s) {
  if (utf8::valid(s)) return s;
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      out.push_back(s[i++]);
      continue;
    }
    const utf8::Step st = utf8::step(s, i);
    if (st.valid)
      out.append(s, i, st.length);
    else
      out += "\xef\xbf\xbd";
    i += st.length;
  }
  return out;
}

void write_str(std::string& out, const std::string& s) {
  const std::string u = utf8_of(s);
  out.push_back(kBinUnicode);
  put_le(out, u.size(), 4);
  out += u;
}

}  // namespace

void write_value(std::string& out, const Value& v) {
  switch (v.kind_) {
    case Value::Kind::None: out.push_back(kNone); return;
    case Value::Kind::Bool: out.push_back(v.b_ ? kTrue : kFalse); return;
    case Value::Kind::Int:
      if (v.i_ >= 0 && v.i_ < 256) {
        out.push_back(kBinInt1);
        out.push_back(static_cast<char>(v.i_));
      } else if (v.i_ >= INT32_MIN && v.i_ <= INT32_MAX) {
        out.push_back(kBinInt);
        put_le(out, static_cast<uint32_t>(static_cast<int32_t>(v.i_)), 4);
      } else {
        put_long(out, v.i_ < 0, static_cast<uint64_t>(v.i_));
      }
      return;
    case Value::Kind::UInt:
      if (v.u_ <= INT32_MAX)
        write_value(out, Value::integer(static_cast<int64_t>(v.u_)));
      else
        put_long(out, false, v.u_);
      return;
    case Value::Kind::Float: {
      uint64_t bits = 0;
      std::memcpy(&bits, &v.d_, sizeof bits);
      out.push_back(kBinFloat);
      for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
      return;
    }
    case Value::Kind::Str: write_str(out, v.s_); return;
    case Value::Kind::Tuple:
      if (v.items_.empty()) {
        out.push_back(kEmptyTuple);
        return;
      }
      out.push_back(kMark);
      for (const auto& item : v.items_) write_value(out, item);
      out.push_back(kTuple);
      return;
    case Value::Kind::List:
      out.push_back(kEmptyList);
      for (size_t i = 0; i < v.items_.size(); i += kBatch) {
        out.push_back(kMark);
        for (size_t k = i; k < v.items_.size() && k < i + kBatch; ++k)
          write_value(out, v.items_[k]);
        out.push_back(kAppends);
      }
      return;
    case Value::Kind::Dict:
      out.push_back(kEmptyDict);
      for (size_t i = 0; i < v.entries_.size(); i += kBatch) {
        out.push_back(kMark);
        for (size_t k = i; k < v.entries_.size() && k < i + kBatch; ++k) {
          write_str(out, v.entries_[k].first);
          write_value(out, v.entries_[k].second);
        }
        out.push_back(kSetItems);
      }
      return;
  }
}

std::string dumps(const Value& v) {
  std::string out;
  out.push_back(kProto);
  out.push_back('\x02');
  write_value(out, v);
  out.push_back(kStop);
  return out;
}

}  // namespace vramtrace::report::pickle
