// The restricted pickle reader (pickle.h): Python's built-in values only, every length and
// reference checked, iterative, bounded by the input's size.
#include "collector/ingest/pickle.h"

#include <cstring>
#include <unordered_map>

namespace vramtrace::collector {

std::string_view PickleValues::str_of(Index v) const {
  const Node& n = nodes_[v];
  if (n.kind != Kind::Str && n.kind != Kind::Bytes) return {};
  return std::string_view(text_).substr(n.text_at, n.text_len);
}

PickleValues::Index PickleValues::get(Index dict, std::string_view key) const {
  if (dict >= nodes_.size() || nodes_[dict].kind != Kind::Dict) return npos;
  const auto& kv = nodes_[dict].items;
  // The last of a key given twice, as Python's dict keeps it.
  for (size_t i = kv.size(); i >= 2; i -= 2)
    if (nodes_[kv[i - 2]].kind == Kind::Str && str_of(kv[i - 2]) == key) return kv[i - 1];
  return npos;
}

class PickleReader {
 public:
  explicit PickleReader(std::string_view in) : in_(in) {
    // One value per opcode at most, and every opcode is a byte: a bound on the arena that no
    // valid pickle reaches.
    const uint64_t bound = (in.size() + 16) * kPickleMaxNodesPerByte;
    max_nodes_ = bound < PickleValues::npos - 1 ? bound : PickleValues::npos - 1;
  }

  Unpickled run();

 private:
  using Index = PickleValues::Index;
  using Kind = PickleValues::Kind;

  [[noreturn]] void fail(const std::string& why) const {
    throw PickleError("not a snapshot pickle this reader takes: " + why + " (at byte " +
                      std::to_string(op_at_) + ")");
  }
  const uint8_t* take(uint64_t n) {
    if (n > in_.size() - at_)
      fail("the file ends early (" + std::to_string(n) + " bytes wanted, " +
           std::to_string(in_.size() - at_) + " left)");
    const auto* p = reinterpret_cast<const uint8_t*>(in_.data() + at_);
    at_ += n;
    return p;
  }
  uint64_t le(int n) {
    const uint8_t* p = take(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
    return v;
  }
  Index node(Kind kind) {
    auto& nodes = out_.values.nodes_;
    if (nodes.size() >= max_nodes_) fail("more values than its size allows");
    nodes.emplace_back();
    nodes.back().kind = kind;
    return static_cast<Index>(nodes.size() - 1);
  }
  PickleValues::Node& at(Index v) { return out_.values.nodes_[v]; }
  size_t base() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Index v) { stack_.push_back(v); }
  Index pop() {
    if (stack_.size() <= base()) fail("a value taken from an empty stack");
    const Index v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Index top() {
    if (stack_.size() <= base()) fail("a value taken from an empty stack");
    return stack_.back();
  }
  // The items since the last MARK, taken off the stack with the mark.
  std::vector<Index> since_mark() {
    if (marks_.empty()) fail("no MARK before an opcode that needs one");
    const size_t from = marks_.back();
    marks_.pop_back();
    std::vector<Index> items(stack_.begin() + static_cast<ptrdiff_t>(from), stack_.end());
    stack_.resize(from);
    return items;
  }
  Index container(Kind kind, std::vector<Index> items) {
    const Index v = node(kind);
    at(v).items = std::move(items);
    return v;
  }
  void text(Kind kind, uint64_t n) {
    const uint8_t* p = take(n);
    const Index v = node(kind);
    auto& t = out_.values.text_;
    at(v).text_at = t.size();
    at(v).text_len = n;
    t.append(reinterpret_cast<const char*>(p), n);
    push(v);
  }
  void integer(int64_t i) {
    const Index v = node(Kind::Int);
    at(v).i = i;
    push(v);
  }
  // LONG1/LONG4: n bytes, little-endian two's complement. One past int64 is kept as a BigInt
  // (its value unread): no field of a snapshot is one.
  void long_bytes(uint64_t n) {
    const uint8_t* p = take(n);
    if (n == 0) return integer(0);
    const bool negative = p[n - 1] & 0x80;
    bool fits = true;
    for (uint64_t i = 8; i < n; ++i) fits = fits && p[i] == (negative ? 0xff : 0x00);
    if (n > 8 && fits) fits = ((p[7] & 0x80) != 0) == negative;
    if (!fits) return push(node(Kind::BigInt));
    // Shifting the bytes in over all ones extends the sign of a shorter number.
    uint64_t v = negative ? ~0ull : 0;
    for (uint64_t i = n < 8 ? n : 8; i-- > 0;) v = v << 8 | p[i];
    int64_t s;
    std::memcpy(&s, &v, sizeof s);
    integer(s);
  }
  void memo_put(uint64_t key) {
    if (memo_.size() >= max_nodes_) fail("more memo entries than its size allows");
    memo_[key] = top();
  }
  void memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail("a memo reference to nothing stored (" + std::to_string(key) + ")");
    push(it->second);
  }
  void add_to(Kind want, Index target, const std::vector<Index>& items, const char* op) {
    if (at(target).kind != want) fail(std::string(op) + " onto a value of another type");
    auto& v = at(target).items;
    v.insert(v.end(), items.begin(), items.end());
  }

  std::string_view in_;
  size_t at_ = 0, op_at_ = 0;
  uint64_t max_nodes_ = 0;
  Unpickled out_;
  std::vector<Index> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Index> memo_;
};

namespace {

// The opcodes that would import, construct or call something, or reach outside the file.
const char* code_opcode(uint8_t op) {
  switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

// Protocol 0's text opcodes: never written by protocol 2 and later.
const char* text_opcode(uint8_t op) {
  switch (op) {
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 'F': return "FLOAT";
    case 'p': return "PUT";
    case 'g': return "GET";
    default: return nullptr;
  }
}

}  // namespace

Unpickled PickleReader::run() {
  while (true) {
    op_at_ = at_;
    const uint8_t op = *take(1);
    if (const char* name = code_opcode(op))
      fail(std::string("opcode ") + name +
           " refused: a memory snapshot holds only Python's built-in values, and this would "
           "import or call code");
    if (const char* name = text_opcode(op))
      fail(std::string("protocol 0 opcode ") + name + " (snapshots are written with protocol 2-5)");
    switch (op) {
      case 0x80: {
        out_.protocol = static_cast<int>(le(1));
        if (out_.protocol < 2 || out_.protocol > 5)
          fail("pickle protocol " + std::to_string(out_.protocol) + " (2 to 5 are read)");
        break;
      }
      case 0x95: {  // FRAME: a length hint; the opcodes follow as usual
        const uint64_t n = le(8);
        if (n > in_.size() - at_) fail("a frame longer than the file");
        break;
      }
      case '.': {
        if (stack_.size() != 1 || !marks_.empty())
          fail("STOP with " + std::to_string(stack_.size()) + " values on the stack");
        out_.root = stack_.back();
        return std::move(out_);
      }
      case '(': marks_.push_back(stack_.size()); break;
      case '0':
        if (stack_.size() > base())
          stack_.pop_back();
        else
          since_mark();
        break;
      case '1': since_mark(); break;
      case '2': push(top()); break;
      case 'N': push(node(Kind::None)); break;
      case 0x88:
      case 0x89: {
        const Index v = node(Kind::Bool);
        at(v).i = op == 0x88;
        push(v);
        break;
      }
      case 'J': {
        const auto u = static_cast<uint32_t>(le(4));
        int32_t s;
        std::memcpy(&s, &u, sizeof s);
        integer(s);
        break;
      }
      case 'K': integer(static_cast<int64_t>(le(1))); break;
      case 'M': integer(static_cast<int64_t>(le(2))); break;
      case 0x8a: long_bytes(le(1)); break;
      case 0x8b: {
        const uint64_t n = le(4);
        if (n & 0x80000000u) fail("LONG4 of a negative length");
        long_bytes(n);
        break;
      }
      case 'G': {
        const uint8_t* p = take(8);
        uint64_t u = 0;
        for (int i = 0; i < 8; ++i) u = u << 8 | p[i];
        const Index v = node(Kind::Float);
        std::memcpy(&at(v).f, &u, sizeof u);
        push(v);
        break;
      }
      case 0x8c: text(Kind::Str, le(1)); break;
      case 'X': text(Kind::Str, le(4)); break;
      case 0x8d: text(Kind::Str, le(8)); break;
      case 'U': text(Kind::Str, le(1)); break;
      case 'T': {
        const uint64_t n = le(4);
        if (n & 0x80000000u) fail("BINSTRING of a negative length");
        text(Kind::Str, n);
        break;
      }
      case 'C': text(Kind::Bytes, le(1)); break;
      case 'B': text(Kind::Bytes, le(4)); break;
      case 0x8e:
      case 0x96: text(Kind::Bytes, le(8)); break;
      case ']': push(node(Kind::List)); break;
      case ')': push(node(Kind::Tuple)); break;
      case '}': push(node(Kind::Dict)); break;
      case 0x8f: push(node(Kind::Set)); break;
      case 'l': push(container(Kind::List, since_mark())); break;
      case 't': push(container(Kind::Tuple, since_mark())); break;
      case 0x91: push(container(Kind::Set, since_mark())); break;
      case 'd': {
        std::vector<Index> kv = since_mark();
        if (kv.size() % 2) fail("DICT with a key without its value");
        push(container(Kind::Dict, std::move(kv)));
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {
        const size_t n = op - 0x84u;
        std::vector<Index> items(n);
        for (size_t i = n; i-- > 0;) items[i] = pop();
        push(container(Kind::Tuple, std::move(items)));
        break;
      }
      case 'a': {
        const Index v = pop();
        add_to(Kind::List, top(), {v}, "APPEND");
        break;
      }
      case 'e': {
        std::vector<Index> items = since_mark();
        add_to(Kind::List, top(), items, "APPENDS");
        break;
      }
      case 0x90: {
        std::vector<Index> items = since_mark();
        add_to(Kind::Set, top(), items, "ADDITEMS");
        break;
      }
      case 's': {
        const Index v = pop();
        const Index k = pop();
        add_to(Kind::Dict, top(), {k, v}, "SETITEM");
        break;
      }
      case 'u': {
        std::vector<Index> kv = since_mark();
        if (kv.size() % 2) fail("SETITEMS with a key without its value");
        add_to(Kind::Dict, top(), kv, "SETITEMS");
        break;
      }
      case 'q': memo_put(le(1)); break;
      case 'r': memo_put(le(4)); break;
      case 0x94: memo_put(memo_.size()); break;
      case 'h': memo_get(le(1)); break;
      case 'j': memo_get(le(4)); break;
      default: {
        static const char hex[] = "0123456789abcdef";
        fail(std::string("unknown opcode 0x") + hex[op >> 4] + hex[op & 15]);
      }
    }
  }
}

Unpickled unpickle(std::string_view bytes) {
  if (bytes.empty()) throw PickleError("not a snapshot pickle this reader takes: an empty file");
  return PickleReader(bytes).run();
}

}  // namespace vramtrace::collector
