// Unit tests of the Python hook's side channel (common/side_channel.h) and its reader
// (collector/ingest/torch_trace.h): every kind of line the table declares is read, and a line with
// a field missing or a bad one does what its row says; a file fed in pieces, or tailed while it
// grows, reads as the same trace as the whole file; a copy of a trace owns what it holds.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "collector/ingest/torch_trace.h"
#include "collector/ingest/torch_trace_reader.h"
#include "common/record_text.h"
#include "common/side_channel.h"

using namespace vramtrace;
using namespace vramtrace::collector;

namespace {

// Every row of the table, its fields by kind name.
struct Row {
  std::string tag;
  int since;
  side::OnBad on_bad;
  std::string problem;
  std::vector<std::string> kinds;
};
#define VT_ROW_FIELD(kind, name) #kind,
#define VT_ROW_TEXT(name, keep) "Text",
#define VT_ROW(Name, tag, since, on_bad, problem, fields) \
  Row{tag, since, side::OnBad::on_bad, problem, {fields}},
const std::vector<Row> kRows = {VRAMTRACE_SIDE_LINES(VT_ROW, VT_ROW_FIELD, VT_ROW_TEXT)};
#undef VT_ROW
#undef VT_ROW_TEXT
#undef VT_ROW_FIELD

// A value of a field kind that every row's handler takes (a P line's kind must be graph or
// pool; ids count from 1; a mark's kind is below 15).
std::string good(const std::string& kind) {
  if (kind == "Dev") return "0";
  if (kind == "Real") return "0.5";
  if (kind == "MaybeU64" || kind == "Ids" || kind == "Where") return "";
  if (kind == "Text") return "graph";
  return "1";
}

std::string line_of(const Row& row, size_t fields, size_t bad = SIZE_MAX) {
  std::string out = row.tag;
  size_t texts = 0;
  for (size_t i = 0; i < fields; ++i) {
    std::string value = i == bad ? std::string("zz") : good(row.kinds[i]);
    // A predicted request's op and phase are one letter each: a block made in the forward.
    if (row.tag == "R" && row.kinds[i] == "Text" && i != bad) value = texts++ ? "f" : "a";
    out += "\t" + value;
  }
  return out + "\n";
}

TorchTrace read_text(const std::string& text, int version = 2) {
  TorchTraceReader r("test");
  r.feed("vramtrace.torch/" + std::to_string(version) + "\t42\t1000\t10\tv\n");
  r.feed(text);
  return r.finish();
}

// Everything a trace holds, as text: two traces are the same when these are.
std::string dump(const TorchTrace& t) {
  std::ostringstream o;
  o << "pid=" << t.pid << " version=" << t.torch_version << " problem=" << t.problem << "\n";
  for (const auto& e : t.events) o << format::to_text(e.record) << " stream=" << e.stream << "\n";
  const TorchContext& c = t.context;
  o << c.present << " " << c.dropped_marks << " " << c.torch_version << " "
    << (c.alloc_conf ? "conf " + *c.alloc_conf : "no conf") << "\n";
  for (const auto& m : c.modules) o << "M " << m.name << " " << m.type << " " << m.file << m.line;
  for (const auto& s : c.sites) o << "S " << s.file << " " << s.function << " " << s.line;
  for (const auto& k : c.marks)
    o << "K " << k.time_ns << " " << int(k.kind) << " " << k.id << k.autocast << k.untraced
      << int(k.fed_back);
  for (const auto& l : c.labels)
    o << "L " << l.time_ns << " " << l.device << " " << l.ptr << " " << l.bytes << l.kind << l.name
      << l.shape << l.dtype;
  for (const auto& [d, l] : c.limits) o << "Q " << d << " " << l.fraction << " " << l.total_bytes;
  if (c.exception) {
    o << "X " << c.exception->time_ns << c.exception->type << c.exception->message;
    for (const auto& f : c.exception->frames) o << f.file << f.function << f.line;
  }
  for (const auto& [d, x] : c.xla) o << "J " << d << " " << x.in_use << " " << x.limit;
  for (const auto& p : c.pool_segments)
    o << "P " << p.device << " " << p.address << " " << p.pool_id[0] << p.cuda_graph;
  for (const auto& b : c.blocks)
    o << "B " << b.device << " " << b.address << " " << b.bytes << " " << b.alloc_ns << " "
      << b.free_ns << " " << b.stream << b.before_window << b.in_gap << "\n";
  for (const auto& g : c.gaps)
    o << "G " << g.device << " " << g.start_ns << " " << g.end_ns << " " << g.start_peak.value_or(1)
      << " " << g.end_peak.value_or(1) << "\n";
  for (const auto& r : c.reserves) o << "R " << r.address << " " << r.time_ns << " " << r.delta;
  for (const auto& r : c.oom_requests) o << "O " << r.time_ns << " " << r.device_free;
  for (const auto& [d, t] : c.window_start) o << "W " << d << " " << t;
  return o.str();
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The hook's files of the fuzz corpus (one of them has every kind of line, with a wrapped ring).
std::vector<std::string> sample_files() {
  std::vector<std::string> out;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(VT_FUZZ_CORPUS) + "/torch_trace"))
    out.push_back(file_text(e.path().string()));
  REQUIRE(out.size() >= 3);
  return out;
}

}  // namespace

TEST_CASE("side channel: every kind of line the table declares is read as its row says") {
  REQUIRE(kRows.size() == static_cast<size_t>(side::Kind::kCount));
  for (const Row& row : kRows) {
    INFO("line " << row.tag);
    REQUIRE(row.kinds.size() <= side::kMaxFields);
    REQUIRE(side::kind_of(row.tag) != side::Kind::kCount);
    const std::string unknown = "line 2: unknown record '" + row.tag + "'";
    const std::string bad = "line 2: " + row.problem;
    // Whole: read, and nothing stops the reading but END.
    TorchTrace t = read_text(line_of(row, row.kinds.size()) + "END\t0\n");
    REQUIRE(t.problem.rfind("line ", 0) == std::string::npos);
    // An older file: version 2's lines are unknown there.
    if (row.since > 1)
      REQUIRE(read_text(line_of(row, row.kinds.size()) + "END\t0\n", 1).problem == unknown);
    // A field short.
    if (!row.kinds.empty()) {
      const std::string p = read_text(line_of(row, row.kinds.size() - 1) + "END\t0\n").problem;
      switch (row.on_bad) {
        case side::OnBad::Stop: REQUIRE(p == bad); break;
        case side::OnBad::Match:
        case side::OnBad::Skip: REQUIRE(p == unknown); break;
        case side::OnBad::Lax:
        case side::OnBad::Unread: REQUIRE(p.rfind("line ", 0) == std::string::npos); break;
      }
    }
    // Each number bad in turn.
    for (size_t i = 0; i < row.kinds.size(); ++i) {
      if (good(row.kinds[i]) == "" || row.kinds[i] == "Text") continue;
      const std::string p = read_text(line_of(row, row.kinds.size(), i) + "END\t0\n").problem;
      if (row.on_bad == side::OnBad::Stop || row.on_bad == side::OnBad::Match)
        REQUIRE(p == bad);
      else
        REQUIRE(p.rfind("line ", 0) == std::string::npos);
    }
  }
}

TEST_CASE("side channel: a forward's flags and a FedBack mark's count are kept apart from the id") {
  // A forward of module 3 under autocast with its inner calls untraced; module 3's forward
  // that got 2 tensors of its previous forward back; a module call, its id whole.
  TorchTrace t = read_text("K\t2000\t2\t" + std::to_string(3u | 1u << 31 | 1u << 30) +
                           "\nK\t2001\t15\t" + std::to_string(3u | 2u << 24) + "\nK\t2002\t0\t" +
                           std::to_string(3u | 2u << 24) + "\nEND\t0\n");
  REQUIRE(t.problem.empty());
  const auto& m = t.context.marks;
  REQUIRE(m.size() == 3);
  REQUIRE(m[0].kind == MarkKind::Forward);
  REQUIRE(m[0].id == 3);
  REQUIRE((m[0].autocast && m[0].untraced && m[0].fed_back == 0));
  REQUIRE(m[1].kind == MarkKind::FedBack);
  REQUIRE(m[1].id == 3);
  REQUIRE(m[1].fed_back == 2);
  REQUIRE_FALSE((m[1].autocast || m[1].untraced));
  REQUIRE(m[2].kind == MarkKind::Module);
  REQUIRE(m[2].id == (3u | 2u << 24));
  REQUIRE(m[2].fed_back == 0);
}

TEST_CASE("side channel: a file fed in pieces reads as the whole file") {
  std::mt19937 rng(7);
  for (const std::string& text : sample_files()) {
    TorchTraceReader whole("whole");
    whole.feed(text);
    const std::string expected = dump(whole.finish());
    for (size_t most : {1, 2, 7, 64, 4096}) {
      TorchTraceReader r("pieces");
      size_t at = 0;
      while (at < text.size()) {
        const size_t n = std::min(text.size() - at, 1 + rng() % most);
        r.feed(std::string_view(text).substr(at, n));
        at += n;
      }
      REQUIRE(dump(r.finish()) == expected);
    }
    // Line by line, the live view: what was read so far, and at the end the whole.
    TorchTraceReader live("live");
    size_t events = 0;
    for (size_t at = 0; at < text.size();) {
      size_t nl = text.find('\n', at);
      nl = nl == std::string::npos ? text.size() : nl + 1;
      live.feed(std::string_view(text).substr(at, nl - at));
      at = nl;
      REQUIRE(live.events().size() >= events);  // only ever more
      events = live.events().size();
      if (live.header_read()) (void)live.trace();
    }
    if (!text.empty() && text.back() == '\n') REQUIRE(dump(live.trace()) == expected);
    REQUIRE(dump(live.finish()) == expected);
  }
}

TEST_CASE("side channel: a file tailed while it is written, and replaced") {
  const std::string text =
      file_text(std::string(VT_FUZZ_CORPUS) + "/torch_trace/hook-v2-every-line.torch");
  REQUIRE(!text.empty());
  const std::string path = "/tmp/vt-side-" + std::to_string(getpid()) + ".torch";
  std::ofstream(path, std::ios::binary | std::ios::trunc).close();
  TorchTraceReader r(path);
  REQUIRE(r.read_more(path) == TorchTraceReader::Tail::Nothing);
  const size_t half = text.find("E\t0\talloc");
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out << text.substr(0, half + 4);  // ends inside a line
  }
  REQUIRE(r.read_more(path) == TorchTraceReader::Tail::More);
  const size_t before = r.events().size();
  REQUIRE(before > 0);
  REQUIRE(!r.stopped());
  REQUIRE(r.read_more(path) == TorchTraceReader::Tail::Nothing);
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out << text.substr(half + 4);
  }
  REQUIRE(r.read_more(path) == TorchTraceReader::Tail::More);
  REQUIRE(r.events().size() > before);
  REQUIRE(r.stopped());  // END
  REQUIRE(dump(r.trace()) == dump(read_torch_trace(path)));
  // The hook writes a new file at each OOM and renames it into place: read again from its start.
  const std::string next = path + ".tmp";
  std::ofstream(next, std::ios::binary) << text;
  std::filesystem::rename(next, path);
  REQUIRE(r.read_more(path) == TorchTraceReader::Tail::Restarted);
  REQUIRE(dump(r.finish()) == dump(read_torch_trace(path)));
  std::remove(path.c_str());
  REQUIRE_THROWS_WITH(TorchTraceReader(path).read_more(path), Catch::Contains("cannot open"));
}

TEST_CASE("side channel: a trace and its events own what they hold") {
  TorchTrace copy;
  std::vector<TorchEvent> events;
  {
    TorchTrace t = read_text(
        "F\t1\t/w/train.py\t7\tforward\n"
        "E\t0\talloc\t4096\t512\t0\t1000500001\t1\t\n"
        "END\t1\n");
    copy = t;
    events = t.events;
  }  // the trace read is gone: its copies are whole
  for (const auto* list : {&copy.events, &events}) {
    REQUIRE(list->front().record.type == format::RecordType::PyCode);
    REQUIRE(list->front().record.py_code.file == "/w/train.py");
    REQUIRE(list->front().record.py_code.function == "forward");
  }
  TorchTrace again = copy;
  copy = TorchTrace();
  REQUIRE(again.events.front().record.py_code.function == "forward");
}
