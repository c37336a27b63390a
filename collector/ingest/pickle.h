// A restricted reader of Python pickles (protocols 2 to 5) for PyTorch's memory snapshots
// (torch.cuda.memory._dump_snapshot writes its dict with pickle.dump): only Python's built-in
// values are read (None, bool, int, float, str, bytes, tuple, list, dict, set). Every opcode that
// would name, import or call anything (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ,
// PERSID, EXT, out-of-band buffers) is refused with its name: a snapshot never runs code. The
// reading is iterative (no recursion, whatever the nesting), every length is checked against the
// bytes left, and the values it may make are bounded by the input's size (kMaxNodesPerByte), so
// that a damaged or hostile file is a PickleError, in bounded memory.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace vramtrace::collector {

// The input is not a pickle this reader takes: what was wrong and at which byte.
struct PickleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The values, in one arena: a container holds the indices of its items, so that the memo's
// references (one object reached twice, as PyTorch shares a stack's frames between entries)
// cost an index, and a container that holds itself is no cycle to free.
class PickleValues {
 public:
  enum class Kind : uint8_t { None, Bool, Int, BigInt, Float, Str, Bytes, Tuple, List, Dict, Set };
  using Index = uint32_t;

  Kind kind(Index v) const { return nodes_[v].kind; }
  bool is_int(Index v) const { return kind(v) == Kind::Int || kind(v) == Kind::Bool; }
  int64_t int_of(Index v) const { return nodes_[v].i; }  // Int and Bool
  double float_of(Index v) const { return nodes_[v].f; }
  // Str (UTF-8 as Python wrote it) and Bytes.
  std::string_view str_of(Index v) const;
  // Tuple, List, Set: the items; Dict: keys and values alternating, in insertion order.
  const std::vector<Index>& items(Index v) const { return nodes_[v].items; }
  // A dict's value under a string key; npos when it is not a dict or has no such key.
  static constexpr Index npos = UINT32_MAX;
  Index get(Index dict, std::string_view key) const;
  size_t size() const { return nodes_.size(); }

 private:
  friend class PickleReader;
  struct Node {
    Kind kind = Kind::None;
    union {
      int64_t i = 0;
      double f;
      uint64_t text_at;  // Str, Bytes: in text_
    };
    uint64_t text_len = 0;
    std::vector<Index> items;
  };
  std::vector<Node> nodes_;
  std::string text_;
};

// The most values per byte of input (each opcode makes at most one): the arena stays within a
// small multiple of the file's size.
inline constexpr uint64_t kPickleMaxNodesPerByte = 1;

// Reads one pickle from `bytes` (to its STOP). Throws PickleError.
struct Unpickled {
  PickleValues values;
  PickleValues::Index root = 0;
  int protocol = 0;  // the PROTO opcode's (0: none)
};
Unpickled unpickle(std::string_view bytes);

}  // namespace vramtrace::collector
