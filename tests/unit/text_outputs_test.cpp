// Every text output (the summary, check's and diff's text, the Markdown of a CI job page) keeps
// strings from the traced program away from the terminal and the CI log: a real report whose
// every string carries control characters, a CI workflow command and a bidirectional override
// is rendered, and no output holds a raw control character or a line a CI runner would obey.
#include <catch2/catch.hpp>
#include <functional>
#include <string>

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"
#include "report/check.h"
#include "report/json_report.h"

using namespace vramtrace;
using nlohmann::json;

namespace {

// ESC [31m colours a terminal, BEL rings it, CR rewrites the line, and "::error::" at a line's
// start is a GitHub Actions command; U+202E reverses what follows on screen.
const std::string kHostile = "\x1b[31m\a\r::error::x\n::add-mask::y\xe2\x80\xae";

void poison_strings(json& j) {
  if (j.is_string()) {
    j = j.get<std::string>() + kHostile;
  } else if (j.is_structured()) {
    for (auto& v : j) poison_strings(v);
  }
}

// The first unsafe thing in `text`, or "" when there is none.
std::string unsafe_in(const std::string& text) {
  size_t line_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      line_start = i + 1;
      continue;
    }
    if (c < 0x20 || c == 0x7f)
      return "control character " + std::to_string(c) + " in: " + text.substr(line_start, 80);
    if (text.compare(i, 3, "\xe2\x80\xae") == 0) return "U+202E in: " + text.substr(line_start, 80);
    if (i == line_start) {
      size_t j = i;
      while (j < text.size() && text[j] == ' ') ++j;
      if (text.compare(j, 2, "::") == 0) return "a workflow command: " + text.substr(j, 80);
    }
  }
  return {};
}

}  // namespace

TEST_CASE("no text output lets a string from the program reach a terminal or a CI log raw") {
  // A real run (ResNet-50 dying in its first step on an H200): an OOM with its module and line,
  // categories, remedies, a diagnosis; every one of its strings poisoned.
  const std::string dir = std::string(VT_TEST_DATA) + "/h200/first-step/resnet50-b256/";
  collector::Run run = collector::model_of(
      std::vector<std::string>{dir + "vramtrace.744.vtrace", dir + "vramtrace.744.torch"});
  json clean = report::to_json(collector::analysis_of(run));
  REQUIRE(clean["oom"].size() >= 1);
  REQUIRE(clean["oom"][0]["module"] == "layer3.0.bn1");
  json poisoned = clean;
  poison_strings(poisoned);
  REQUIRE(poisoned["oom"][0]["module"] == "layer3.0.bn1" + kHostile);

  const std::string summary = report::summary_text(poisoned);
  CHECK(unsafe_in(summary).empty());
  INFO(unsafe_in(summary));
  // The OOM's module is still said, escaped.
  const std::string escaped = "\\x1b[31m\\x07\\r::error::x\\n::add-mask::y\\u202e";
  CHECK(summary.find("when: forward" + escaped + " of layer3.0.bn1" + escaped) !=
        std::string::npos);

  report::Budgets budgets;
  report::add_increase_option(budgets, "5%");
  report::CheckResult r = report::compare(clean, poisoned, budgets);
  for (const auto& [name, text] :
       {std::pair{"check", report::check_text(r)}, std::pair{"diff", report::diff_text(r)},
        std::pair{"markdown", report::check_markdown(r)},
        std::pair{"summary of the clean run", report::summary_text(clean)}}) {
    INFO(name << ": " << unsafe_in(text));
    CHECK(unsafe_in(text).empty());
  }
}
