// Unit tests of the event format: varints, bounds-checked reading, headers and frames.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <random>

#include "collector/ingest/trace_reader.h"
#include "common/format.h"
#include "unit/trace_builder.h"

using namespace vramtrace;

TEST_CASE("varints round-trip at their edges") {
  const uint64_t values[] = {0,         1, 127, 128, 16383, 16384, 0xffffffffull, 0x7fffffffffffull,
                             UINT64_MAX};
  const size_t lengths[] = {1, 1, 1, 2, 2, 3, 5, 7, 10};
  for (size_t i = 0; i < 9; ++i) {
    uint8_t buf[16];
    uint8_t* end = format::put_varint(buf, values[i]);
    REQUIRE(static_cast<size_t>(end - buf) == lengths[i]);
    format::ByteReader r(buf, static_cast<size_t>(end - buf));
    REQUIRE(r.varint() == values[i]);
    REQUIRE(r.ok());
    REQUIRE(r.at_end());
  }
}

TEST_CASE("varints read the same with and without bytes after them") {
  // The reader takes a shortcut when the bytes a varint may span are in the buffer (one, two
  // and three bytes, and a word of eight); every length must read as the byte loop reads it.
  for (int bits = 0; bits <= 64; ++bits) {
    for (uint64_t v : {bits == 0 ? 0 : (bits == 64 ? UINT64_MAX : (1ull << bits) - 1),
                       bits == 0 ? 0 : 1ull << (bits - 1)}) {
      uint8_t buf[32];
      std::memset(buf, 0xff, sizeof buf);  // what follows the varint: continuation bits set
      size_t n = static_cast<size_t>(format::put_varint(buf, v) - buf);
      for (size_t size : {n, n + 1, n + 7, n + 10, sizeof buf}) {
        format::ByteReader r(buf, size);
        REQUIRE(r.varint() == v);
        REQUIRE(r.ok());
        REQUIRE(r.remaining() == size - n);
      }
      for (size_t size = 0; size < n; ++size) {  // cut off: fails, whatever the length
        format::ByteReader r(buf, size);
        REQUIRE(r.varint() == 0);
        REQUIRE_FALSE(r.ok());
        REQUIRE(r.at_end());
      }
    }
  }
  // A tenth byte's bits above the 64th are dropped, as they always were.
  uint8_t ten[16] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f, 5};
  format::ByteReader r(ten, sizeof ten);
  REQUIRE(r.varint() == 1ull << 63);
  REQUIRE(r.ok());
  REQUIRE(r.varint() == 5);
}

TEST_CASE("the byte reader fails instead of reading past the end") {
  uint8_t buf[] = {0x80, 0x80};  // a varint that never ends
  format::ByteReader r(buf, sizeof buf);
  REQUIRE(r.varint() == 0);
  REQUIRE_FALSE(r.ok());

  uint8_t str[] = {5, 'a', 'b'};  // claims 5 bytes, holds 2
  format::ByteReader s(str, sizeof str);
  size_t n = 99;
  s.bytes(&n);
  REQUIRE(n == 0);
  REQUIRE_FALSE(s.ok());

  uint8_t eleven[11];
  std::memset(eleven, 0xff, sizeof eleven);
  format::ByteReader t(eleven, sizeof eleven);
  t.varint();
  REQUIRE_FALSE(t.ok());
}

TEST_CASE("api names cover every api id") {
  REQUIRE(std::string(format::api_name(format::Api::cuMemAlloc)) == "cuMemAlloc");
  REQUIRE(std::string(format::api_name(format::Api::cuGraphLaunch)) == "cuGraphLaunch");
  REQUIRE(std::string(format::api_name(static_cast<format::Api>(200))) == "unknown");
  REQUIRE(format::memory_kind(format::Api::cuMemAllocHost) == format::MemoryKind::PinnedHost);
  REQUIRE(format::memory_kind(format::Api::cuMemAllocManaged) == format::MemoryKind::Managed);
}

TEST_CASE("the reader refuses what is not a trace, saying what it found") {
  using collector::TraceError;
  using collector::TraceReader;
  REQUIRE_THROWS_WITH(TraceReader::from_bytes({}), Catch::Contains("empty file"));
  REQUIRE_THROWS_WITH(TraceReader::from_bytes({'h', 'e', 'l', 'l', 'o'}),
                      Catch::Contains("too short"));
  std::vector<uint8_t> junk(64, 'x');
  REQUIRE_THROWS_WITH(TraceReader::from_bytes(junk), Catch::Contains("bad magic"));

  auto bytes = vt_test::TraceBuilder().bytes();
  uint32_t v = 7;
  std::memcpy(bytes.data() + 8, &v, 4);
  REQUIRE_THROWS_WITH(TraceReader::from_bytes(bytes),
                      Catch::Contains("version 7") && Catch::Contains("reads versions 1 to 2"));
}

TEST_CASE("a stream cut inside a frame keeps the frames before it and says it is partial") {
  vt_test::TraceBuilder b;
  b.context(0, 1 << 30).alloc(0x1000, 100).flush().alloc(0x2000, 200).alloc(0x3000, 300);
  auto bytes = b.bytes();
  bytes.resize(bytes.size() - 3);
  auto r = collector::TraceReader::from_bytes(bytes);
  int events = 0;
  while (r->next()) ++events;
  REQUIRE(events == 3);  // Process, ContextCreate, the first Alloc
  REQUIRE(r->partial());
  REQUIRE_THAT(r->problem(), Catch::Contains("ends inside a frame"));
}

TEST_CASE("a corrupt record ends the stream with a message, not a crash") {
  // Version 1, whose frames have no checksum: the record decoder is what meets the damage.
  vt_test::TraceBuilder b;
  b.format_version(1).alloc(0x1000, 100);
  auto bytes = b.bytes();
  // The Alloc's type byte follows the Process record; find it and break it.
  size_t pos = bytes.size() - 1;
  while (bytes[pos] != static_cast<uint8_t>(format::RecordType::Alloc)) --pos;
  bytes[pos] = 0xEE;
  auto r = collector::TraceReader::from_bytes(bytes);
  int events = 0;
  while (r->next()) ++events;
  REQUIRE(events == 1);
  REQUIRE(r->partial());
  REQUIRE_THAT(r->problem(), Catch::Contains("corrupt record"));
}

#include "report/check.h"

TEST_CASE("budgets and sizes parse as CI users write them") {
  using report::parse_increase;
  using report::parse_size;
  REQUIRE(parse_size("256MiB") == 256ull << 20);
  REQUIRE(parse_size("40GiB") == 40ull << 30);
  REQUIRE(parse_size("1.5GiB") == 3ull << 29);
  REQUIRE(parse_size("2GB") == 2000000000ull);
  REQUIRE(parse_size("1048576") == 1048576ull);
  REQUIRE(*parse_increase("5%").percent == 5.0);
  REQUIRE(*parse_increase("256MiB").bytes == 256ull << 20);
  REQUIRE_THROWS_AS(parse_size("lots"), report::CheckError);
  REQUIRE_THROWS_WITH(parse_size("5parsecs"), Catch::Contains("unknown unit 'parsecs'"));
  REQUIRE_THROWS_AS(parse_increase("-3%"), report::CheckError);
  report::Budgets b;
  report::add_increase_option(b, "1:10%");
  report::add_peak_option(b, "0:40GiB");
  REQUIRE(*b.max_increase_by_device.at(1).percent == 10.0);
  REQUIRE(b.max_peak_by_device.at(0) == 40ull << 30);
  REQUIRE(*b.max_increase.percent == 5.0);  // the default
}

// Every value --max-increase may be given: a share ("N%"), a size with its unit, or refused
// with a message that names the spellings that work. A bare number never passes as bytes,
// but zero, which is no growth in every unit.
TEST_CASE("budgets: a bare number is refused, every accepted value says what it is") {
  using report::CheckError;
  using report::parse_increase;
  std::mt19937_64 rng(20261204);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<std::pair<std::string, uint64_t>> units = {
      {"B", 1},     {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},
      {"kb", 1000}, {"MB", 1000000},     {"g", 1ull << 30}};
  const std::vector<std::string> blanks = {"", " ", "  ", "\t"};
  for (int i = 0; i < 20000; ++i) {
    const uint64_t n = rng() % 1000000;
    const std::string num = std::to_string(n);
    const std::string pad = blanks[pick(blanks.size())], pad2 = blanks[pick(blanks.size())];
    switch (pick(3)) {
      case 0: {  // a share
        report::Budget b = parse_increase(pad + num + pad2 + "%" + pad);
        REQUIRE(b.percent == static_cast<double>(n));
        REQUIRE_FALSE(b.bytes);
        break;
      }
      case 1: {  // a size
        const auto& [unit, mult] = units[pick(units.size())];
        report::Budget b = parse_increase(pad + num + pad2 + unit + pad);
        REQUIRE(b.bytes == n * mult);
        REQUIRE_FALSE(b.percent);
        break;
      }
      default: {  // a bare number, whole or not
        const std::string bare = pick(2) ? num : num + "." + std::to_string(pick(100));
        if (std::strtod(bare.c_str(), nullptr) == 0.0) {  // zero is zero in every unit
          report::Budget b = parse_increase(pad + bare + pad);
          REQUIRE(b.bytes == 0u);
          REQUIRE_FALSE(b.percent);
          break;
        }
        REQUIRE_THROWS_WITH(parse_increase(pad + bare + pad),
                            "'" + pad + bare + pad + "' has no unit: write " + bare +
                                "% for a share of the baseline's peak, or " + bare +
                                "MiB for a size");
      }
    }
  }
  // Random bytes from the characters budgets are made of: each is a share, a size with a
  // unit, or a CheckError naming the percentage (or too large); nothing else escapes.
  const std::string alphabet = "0123456789.%:- eEbBkKmMgGiItTx+\t";
  for (int i = 0; i < 50000; ++i) {
    std::string v;
    for (size_t k = pick(9); k > 0; --k) v += alphabet[pick(alphabet.size())];
    try {
      report::Budgets b;
      report::add_increase_option(b, v);
      const std::string rest = v.substr(v.find(':') == std::string::npos ? 0 : v.find(':') + 1);
      const bool share = rest.find('%') != std::string::npos;
      const bool unit = std::any_of(rest.begin(), rest.end(), [](char c) {
        return std::isalpha(static_cast<unsigned char>(c));
      });
      const bool zero = rest.find_first_not_of("0. \t") == std::string::npos &&
                        rest.find('0') != std::string::npos;
      INFO("accepted '" << v << "'");
      REQUIRE((share || unit || zero));
    } catch (const CheckError& e) {
      const std::string what = e.what();
      INFO("refused '" << v << "': " << what);
      REQUIRE(what.find('\n') == std::string::npos);
      REQUIRE((what.find('%') != std::string::npos || what.find("too large") != std::string::npos ||
               what.find("DEVICE:BUDGET") != std::string::npos));
    }
  }
}

TEST_CASE("strings from the traced program are escaped for Markdown and XML") {
  REQUIRE(report::escape_xml("<a href=\"x\">&'") == "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
  using report::MdPlace;
  REQUIRE(report::escape_markdown("a|b<script>`x`\n", MdPlace::TableCell) ==
          "a\\|b\\<script>\\`x\\` ");
}

TEST_CASE("Markdown escapes only what Markdown reads as syntax where the string goes") {
  using report::escape_markdown;
  using report::MdPlace;
  // Figures, options and names read as they are.
  CHECK(escape_markdown("+3.00 GiB (+33.1%)") == "+3.00 GiB (+33.1%)");
  CHECK(escape_markdown("'python train.py --batch 12'") == "'python train.py --batch 12'");
  CHECK(escape_markdown("encoder_layer_10.attn {x} 2 > 1 # ! a * b ~ c") ==
        "encoder_layer_10.attn {x} 2 > 1 # ! a * b ~ c");
  CHECK(escape_markdown("C:\\path\\to a < b & c") == "C:\\path\\to a < b & c");
  // Emphasis, code, links, HTML and entities, anywhere.
  CHECK(escape_markdown("__init__ *p ~~x~~ `c` [l](u) ![i](u) <b> </b> &amp; &#60;") ==
        "\\_\\_init\\_\\_ \\*p \\~\\~x\\~\\~ \\`c\\` \\[l](u) !\\[i](u) \\<b> \\</b> "
        "\\&amp; \\&#60;");
  CHECK(escape_markdown("a\\*b\\") == "a\\\\\\*b\\\\");  // a backslash that would escape
  CHECK(escape_markdown("a|b") == "a|b");
  CHECK(escape_markdown("a|b", MdPlace::TableCell) == "a\\|b");
  CHECK(escape_markdown("line\r\nbreak") == "line  break");
  // Block markers only at the start of a line or list item.
  CHECK(escape_markdown("- x", MdPlace::LineStart) == "\\- x");
  CHECK(escape_markdown("+1.00 GiB", MdPlace::LineStart) == "+1.00 GiB");
  CHECK(escape_markdown("+ x", MdPlace::LineStart) == "\\+ x");
  CHECK(escape_markdown("--batch 12", MdPlace::LineStart) == "--batch 12");
  CHECK(escape_markdown("---", MdPlace::LineStart) == "\\---");
  CHECK(escape_markdown("# x", MdPlace::LineStart) == "\\# x");
  CHECK(escape_markdown("#include x", MdPlace::LineStart) == "#include x");
  CHECK(escape_markdown("> x", MdPlace::LineStart) == "\\> x");
  CHECK(escape_markdown("12. x", MdPlace::LineStart) == "12\\. x");
  CHECK(escape_markdown("3) x", MdPlace::LineStart) == "3\\) x");
  CHECK(escape_markdown("3.5 GiB", MdPlace::LineStart) == "3.5 GiB");
  CHECK(escape_markdown("- x") == "- x");
}
