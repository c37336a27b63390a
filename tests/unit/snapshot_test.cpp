// Unit tests of the restricted pickle reader (collector/ingest/pickle.h) and of a PyTorch memory
// snapshot read as a run (collector/ingest/torch_snapshot.h): exact values of pickles that
// Python's pickle wrote, the memo's shared values, every code opcode refused, damaged and hostile
// pickles refused with bounded work; a snapshot shaped as PyTorch 2.11 writes it, read to its
// peak, OOM, allocator state and settings, and replayed by what-if to its recorded reserved peak.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "collector/ingest/pickle.h"
#include "collector/ingest/torch_snapshot.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "collector/predict/whatif.h"

using namespace vramtrace::collector;
using Kind = PickleValues::Kind;

namespace {

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// A value for the test's pickler: what PyTorch's snapshot holds. A shared_ptr written twice is
// written once and then named through the memo, as Python's pickle does.
struct Val;
using P = std::shared_ptr<Val>;
struct Val {
  enum class K { None, Bool, Int, Float, Str, List, Tuple, Dict } k = K::None;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<P> items;  // Dict: key, value, key, value...
};
P boolean(bool b) {
  auto v = std::make_shared<Val>();
  v->k = Val::K::Bool;
  v->i = b;
  return v;
}
P num(int64_t i) {
  auto v = std::make_shared<Val>();
  v->k = Val::K::Int;
  v->i = i;
  return v;
}
P real(double f) {
  auto v = std::make_shared<Val>();
  v->k = Val::K::Float;
  v->f = f;
  return v;
}
P str(const std::string& s) {
  auto v = std::make_shared<Val>();
  v->k = Val::K::Str;
  v->s = s;
  return v;
}
P list(std::vector<P> items, Val::K k = Val::K::List) {
  auto v = std::make_shared<Val>();
  v->k = k;
  v->items = std::move(items);
  return v;
}
P dict(std::vector<std::pair<std::string, P>> kv) {
  auto v = std::make_shared<Val>();
  v->k = Val::K::Dict;
  for (auto& [k, x] : kv) {
    v->items.push_back(str(k));
    v->items.push_back(x);
  }
  return v;
}

struct Pickler {
  std::string out = "\x80\x02";
  std::map<const Val*, uint32_t> memo;
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void write(const P& v) {
    if (auto it = memo.find(v.get()); it != memo.end()) {
      out += 'j';
      le(it->second, 4);
      return;
    }
    switch (v->k) {
      case Val::K::None: out += 'N'; return;
      case Val::K::Bool: out += v->i ? '\x88' : '\x89'; return;
      case Val::K::Int:
        out += '\x8a';
        out += '\x08';
        le(static_cast<uint64_t>(v->i), 8);
        return;
      case Val::K::Float: {
        uint64_t u;
        std::memcpy(&u, &v->f, 8);
        out += 'G';
        for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>(u >> (8 * i)));
        return;
      }
      case Val::K::Str:
        out += 'X';
        le(v->s.size(), 4);
        out += v->s;
        return;
      case Val::K::Tuple:
        out += '(';
        for (auto& x : v->items) write(x);
        out += 't';
        return;
      case Val::K::List:
      case Val::K::Dict: {
        out += v->k == Val::K::List ? ']' : '}';
        const uint32_t id = static_cast<uint32_t>(memo.size());
        memo[v.get()] = id;
        out += 'r';
        le(id, 4);
        if (v->items.empty()) return;
        out += '(';
        for (auto& x : v->items) write(x);
        out += v->k == Val::K::List ? 'e' : 'u';
        return;
      }
    }
  }
  std::string done(const P& root) {
    write(root);
    return out + ".";
  }
};

constexpr int64_t MiB = 1 << 20;
constexpr int64_t A = 0x7f0000000000, B = A + 0x10000000;
constexpr int64_t T0 = 1'700'000'000'000'000;

P frame(const std::string& file, int64_t line, const std::string& name) {
  return dict({{"filename", str(file)}, {"line", num(line)}, {"name", str(name)}});
}

// A training step's history, as PyTorch 2.11's _dump_snapshot writes it: a 20 MiB segment
// holding an 8 MiB forward block and, after an 8 MiB backward block came and went, a 12 MiB
// optimizer block; a 2 MiB small segment with a 512 B block; then a request of 32 MiB that ran
// out with 16 MiB free on the device. Reserved peak 22 MiB, allocated peak 20 MiB + 512 B.
std::string training_snapshot(const P& traces_override = nullptr) {
  P fwd = list({frame("??", 0, "c10::cuda::CUDACachingAllocator::malloc"),
                frame("/lib/torch/nn/modules/linear.py", 125, "forward"),
                frame("train.py", 20, "main")});
  P bwd = list({frame("??", 0, "torch::autograd::Engine::evaluate_function"),
                frame("train.py", 21, "main")});
  P step = list({frame("/lib/torch/optim/sgd.py", 80, "step"), frame("train.py", 22, "main")});
  auto entry = [&](const char* action, int64_t addr, int64_t size, int64_t t, P frames) {
    std::vector<std::pair<std::string, P>> kv = {{"action", str(action)}};
    kv.push_back({std::string(action) == "oom" ? "device_free" : "addr", num(addr)});
    kv.insert(kv.end(), {{"size", num(size)},
                         {"stream", num(0)},
                         {"time_us", num(T0 + t)},
                         {"frames", frames},
                         {"compile_context", str("N/A")},
                         {"user_metadata", str("")}});
    return dict(kv);
  };
  P trace = list({entry("segment_alloc", A, 20 * MiB, 0, fwd), entry("alloc", A, 8 * MiB, 1, fwd),
                  entry("alloc", A + 8 * MiB, 8 * MiB, 2, bwd),
                  entry("free_requested", A + 8 * MiB, 8 * MiB, 3, bwd),
                  entry("free_completed", A + 8 * MiB, 8 * MiB, 4, bwd),
                  entry("segment_alloc", B, 2 * MiB, 5, step), entry("alloc", B, 512, 6, step),
                  entry("alloc", A + 8 * MiB, 12 * MiB, 7, step),
                  entry("oom", 16 * MiB, 32 * MiB, 8, fwd)});
  auto block = [](int64_t addr, int64_t size, int64_t asked, const char* state, P frames) {
    return dict({{"address", num(addr)},
                 {"size", num(size)},
                 {"requested_size", num(asked)},
                 {"state", str(state)},
                 {"frames", frames}});
  };
  auto segment = [](int64_t addr, int64_t total, const char* type, P frames, P blocks) {
    return dict({{"device", num(0)},
                 {"address", num(addr)},
                 {"total_size", num(total)},
                 {"allocated_size", num(0)},
                 {"active_size", num(0)},
                 {"requested_size", num(0)},
                 {"stream", num(0)},
                 {"segment_type", str(type)},
                 {"segment_pool_id", list({num(0), num(0)}, Val::K::Tuple)},
                 {"is_expandable", boolean(false)},
                 {"frames", frames},
                 {"blocks", blocks}});
  };
  P segments =
      list({segment(A, 20 * MiB, "large", fwd,
                    list({block(A, 8 * MiB, 8 * MiB, "active_allocated", fwd),
                          block(A + 8 * MiB, 12 * MiB, 12 * MiB, "active_allocated", step)})),
            segment(B, 2 * MiB, "small", step,
                    list({block(B, 512, 500, "active_allocated", step),
                          block(B + 512, 2 * MiB - 512, 0, "inactive", list({}))}))});
  P settings = dict({{"PYTORCH_CUDA_ALLOC_CONF", str("")},
                     {"max_split_size", num(-1)},
                     {"garbage_collection_threshold", real(0.0)},
                     {"expandable_segments", boolean(false)},
                     {"roundup_power2_divisions", dict({{"1", num(0)}})}});
  return Pickler().done(dict({{"segments", segments},
                              {"device_traces", traces_override ? traces_override : list({trace})},
                              {"allocator_settings", settings},
                              {"external_annotations", list({})}}));
}

std::string write_temp(const std::string& bytes) {
  char path[] = "/tmp/vt-snapshot-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  close(fd);
  return path;
}

std::string refusal(const std::string& bytes) {
  try {
    unpickle(bytes);
  } catch (const PickleError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("pickle: the values Python's pickle wrote (protocol 4), exactly") {
  // pickle.dumps({'a': [1, -2, 2**40, -(2**63), 2**64, 1.5, 'é\t', b'x', None, True, False,
  //               (1, 2), (1, 2, 3, 4)]}, protocol=4)
  const Unpickled u = unpickle(unhex(
      "80049557000000000000007d948c0161945d94284b014afeffffff8a060000000000018a0800000000000000"
      "808a09000000000000000001473ff80000000000008c03c3a90994430178944e88894b014b028694284b014b"
      "024b034b04749465732e"));
  const PickleValues& v = u.values;
  CHECK(u.protocol == 4);
  const auto a = v.get(u.root, "a");
  REQUIRE(v.kind(a) == Kind::List);
  const auto& x = v.items(a);
  REQUIRE(x.size() == 13);
  CHECK(v.int_of(x[0]) == 1);
  CHECK(v.int_of(x[1]) == -2);
  CHECK(v.int_of(x[2]) == (int64_t{1} << 40));
  CHECK(v.int_of(x[3]) == INT64_MIN);
  CHECK(v.kind(x[4]) == Kind::BigInt);  // 2**64: past int64, kept unread
  CHECK(v.float_of(x[5]) == 1.5);
  CHECK(v.str_of(x[6]) == "\xc3\xa9\t");
  CHECK(v.kind(x[7]) == Kind::Bytes);
  CHECK(v.str_of(x[7]) == "x");
  CHECK(v.kind(x[8]) == Kind::None);
  CHECK((v.kind(x[9]) == Kind::Bool && v.int_of(x[9]) == 1));
  CHECK((v.kind(x[10]) == Kind::Bool && v.int_of(x[10]) == 0));
  CHECK((v.kind(x[11]) == Kind::Tuple && v.items(x[11]).size() == 2));
  CHECK((v.kind(x[12]) == Kind::Tuple && v.items(x[12]).size() == 4 &&
         v.int_of(v.items(x[12])[3]) == 4));
  CHECK(v.get(u.root, "b") == PickleValues::npos);
}

TEST_CASE("pickle: one list reached twice through the memo is one value (protocol 2)") {
  // s = [7]; pickle.dumps({'x': s, 'y': s}, protocol=2)
  const Unpickled u =
      unpickle(unhex("80027d71002858010000007871015d71024b076158010000007971036802752e"));
  CHECK(u.protocol == 2);
  const auto x = u.values.get(u.root, "x"), y = u.values.get(u.root, "y");
  CHECK(x == y);
  CHECK(u.values.int_of(u.values.items(x)[0]) == 7);
  // A list that holds itself (l = []; l.append(l)) is read, and is no cycle to free.
  const Unpickled self =
      unpickle(unhex("80045d94680061"
                     "2e"));
  CHECK(self.values.items(self.root)[0] == self.root);
}

TEST_CASE("pickle: every opcode that would import or call code is refused by its name") {
  // pickle.dumps of os.system's reference, and of an object with __reduce__, begin so.
  CHECK(refusal(std::string("\x80\x02") + "cos\nsystem\n.") ==
        "not a snapshot pickle this reader takes: opcode GLOBAL refused: a memory snapshot holds "
        "only Python's built-in values, and this would import or call code (at byte 2)");
  const std::pair<const char*, std::string> ops[] = {
      {"STACK_GLOBAL", "\x80\x04\x8c\x02os\x8c\x06system\x93."},
      {"REDUCE", "\x80\x02N)R."},
      {"BUILD", "\x80\x02}}b."},
      {"INST", "\x80\x02(ios\nsystem\n."},
      {"OBJ", "\x80\x02(No."},
      {"NEWOBJ", std::string("\x80\x02N)\x81.", 6)},
      {"NEWOBJ_EX", "\x80\x04N)}\x92."},
      {"PERSID", "\x80\x02Pid\n."},
      {"BINPERSID", "\x80\x02NQ."},
      {"EXT1", std::string("\x80\x02\x82\x01.", 4)},
      {"NEXT_BUFFER", "\x80\x05\x97."},
  };
  for (const auto& [name, bytes] : ops) {
    INFO(name);
    CHECK(refusal(bytes).find(std::string("opcode ") + name + " refused") != std::string::npos);
  }
  CHECK(refusal("\x80\x02I1\n.").find("protocol 0 opcode INT") != std::string::npos);
  CHECK(refusal(std::string("(I1\n.")).find("protocol 0 opcode INT") != std::string::npos);
  CHECK(refusal("\x80\x06N.") ==
        "not a snapshot pickle this reader takes: pickle protocol 6 (2 to 5 are read) (at byte 0)");
}

TEST_CASE("pickle: damaged and hostile pickles are refused, in bounded memory") {
  CHECK(refusal("") == "not a snapshot pickle this reader takes: an empty file");
  // Cut in a string: its length names more bytes than are left.
  CHECK(refusal("\x80\x04\x8c\x05"
                "ab") ==
        "not a snapshot pickle this reader takes: the file ends early (5 bytes wanted, 2 left) "
        "(at byte 2)");
  // A string of 2^63 bytes: refused before anything is allocated.
  CHECK(refusal(std::string("\x80\x04\x8d\x00\x00\x00\x00\x00\x00\x00\x80", 11))
            .find("bytes wanted") != std::string::npos);
  CHECK(refusal("\x80\x04\x5d").find("the file ends early") != std::string::npos);  // no STOP
  CHECK(refusal("\x80\x04.").find("STOP with 0 values") != std::string::npos);
  CHECK(refusal("\x80\x04h\x05.") ==
        "not a snapshot pickle this reader takes: a memo reference to nothing stored (5) (at "
        "byte 2)");
  CHECK(refusal("\x80\x04Na.").find("a value taken from an empty stack") != std::string::npos);
  CHECK(refusal("\x80\x04}K\x01"
                "a.")
            .find("APPEND onto a value of another type") != std::string::npos);
  CHECK(refusal("\x80\x04\xff.") ==
        "not a snapshot pickle this reader takes: unknown opcode 0xff (at byte 2)");
  // A million lists nested in one another: read without recursion (a recursive reader's stack
  // overflows here), one value each.
  const size_t deep = 1'000'000;
  std::string nested = "\x80\x04" + std::string(deep, '(') + "]" + std::string(deep, 'l') + ".";
  Unpickled u = unpickle(nested);
  CHECK(u.values.size() == deep + 1);
  // ... and a snapshot of it is no snapshot: its root is no dict.
  CHECK_THROWS_WITH(torch_snapshot_of(nested, "deep.pickle", 1),
                    "deep.pickle: not a PyTorch memory snapshot (its pickle holds no dict)");
  // A million DUPs of one value cost a stack slot each, not a copy: bounded by the input.
  std::string dups = "\x80\x04(]" + std::string(deep, '2') + "l.";
  CHECK(unpickle(dups).values.items(unpickle(dups).root).size() == deep + 1);
}

TEST_CASE("snapshot: PyTorch 2.11's layout read as a run: peak, OOM, allocator state, settings") {
  const std::string path = write_temp(training_snapshot());
  const Run run = model_of(std::vector<std::string>{path});
  unlink(path.c_str());
  CHECK(run.problems.empty());
  REQUIRE(run.processes.size() == 1);
  const ProcessModel& p = run.processes[0];
  CHECK(p.pid == (1ull << 30));
  REQUIRE(p.cmdline.size() == 1);
  CHECK(p.cmdline[0] ==
        "PyTorch memory snapshot, pickle protocol 2, the layout of PyTorch 2.11 "
        "(allocator_settings, compile_context, user_metadata, external_annotations): 9 trace "
        "entries on 1 device(s), 2 segments at the dump");
  REQUIRE(run.devices.size() == 1);
  // The two segments: 20 MiB + 2 MiB, both live from 5 us on.
  CHECK(run.devices[0].peak_bytes == 22 * MiB);
  REQUIRE(p.ooms.size() == 1);
  CHECK(p.ooms[0].requested_bytes == 32 * MiB);
  CHECK(p.ooms[0].fatal);
  REQUIRE(p.torch_context);
  const TorchContext& ctx = *p.torch_context;
  CHECK(!ctx.alloc_conf);  // PYTORCH_CUDA_ALLOC_CONF empty, every setting PyTorch's default
  REQUIRE(ctx.oom_requests.size() == 1);
  CHECK(ctx.oom_requests[0].device_free == 16 * MiB);
  // Blocks: 8 MiB (live), 8 MiB (freed), 512 B, 12 MiB (live), in the order made.
  REQUIRE(ctx.blocks.size() == 4);
  CHECK(ctx.blocks[1].free_ns != UINT64_MAX);
  CHECK(ctx.blocks[3].bytes == 12 * MiB);
  // What-if under the run's own settings: the recorded reserved peak, and the limit measured at
  // the OOM (16 MiB free + the 22 MiB held).
  const WhatIfResult r = replay_run(p, 0, WhatIfSettings{});
  REQUIRE(r.ok);
  CHECK(r.recorded_reserved_peak_bytes == 22 * MiB);
  CHECK(r.reserved_peak_bytes == 22 * MiB);
  CHECK(r.limit_bytes == 38 * MiB);
  CHECK(!r.fits());
}

TEST_CASE(
    "snapshot: a device trace named many times is read once, and a history that begins late is "
    "said") {
  // One device trace named many times through the memo: past the devices a host has, refused;
  // under it, read once (a reader that followed each name would read it each time).
  P big = list({});
  P shared = list({});
  // A snapshot whose device_traces list is one list repeated: built with the pickler's memo.
  {
    P entry = dict({{"action", str("alloc")},
                    {"addr", num(A)},
                    {"size", num(MiB)},
                    {"stream", num(0)},
                    {"time_us", num(T0)}});
    shared->items.push_back(entry);
    for (int i = 0; i < 5000; ++i) big->items.push_back(shared);
  }
  const std::string bytes = training_snapshot(big);
  CHECK_THROWS_WITH(torch_snapshot_of(bytes, "many.pickle", 7),
                    "many.pickle: not a PyTorch memory snapshot (more devices than a host has)");
  // Under the device bound, the repeated device trace is read once: one alloc, the rest empty.
  P few = list({shared, shared, shared});
  const TorchSnapshot s = torch_snapshot_of(training_snapshot(few), "few.pickle", 7);
  // The one alloc at A, and the state's blocks it did not make (A + 8 MiB, and B): A's is the
  // history's own, live at the dump.
  REQUIRE(s.torch.context.blocks.size() == 3);
  CHECK(s.torch.context.blocks[0].bytes == MiB);
  CHECK(s.torch.context.blocks[1].before_window);
  // The allocator's state holds the 20 MiB and 2 MiB segments that this history never made:
  // the history began late, and what was live before it is the state's.
  CHECK(s.torch.problem.rfind("PyTorch's trace buffer of the snapshot does not reach back", 0) ==
        0);
}
