// The figures each test program is written to produce, read from tests/programs/expected.json
// (which the GPU runner, scripts/gpu/check.py, reads too): require_expected() checks a report
// against a program's entry there, so that a figure is written once for both.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

namespace expected {

using nlohmann::json;

inline const json& all() {
  static const json j = [] {
    std::ifstream in(std::string(VT_SOURCE_DIR) + "/tests/programs/expected.json");
    return json::parse(in);
  }();
  return j;
}

// "13 MiB" -> 13631488 where the report holds a number; any other value as it is.
inline json normalize(const json& want) {
  if (want.is_array()) {
    json out = json::array();
    for (const auto& w : want) out.push_back(normalize(w));
    return out;
  }
  static const std::regex size(R"(^(\d+) (B|KiB|MiB|GiB)$)");
  std::smatch m;
  if (want.is_string()) {
    const std::string s = want.get<std::string>();
    if (std::regex_match(s, m, size)) {
      const int shift = m[2] == "B" ? 0 : m[2] == "KiB" ? 10 : m[2] == "MiB" ? 20 : 30;
      return std::stoull(m[1]) << shift;
    }
  }
  return want;
}

// The values at a JSON pointer whose '*' segments stand for every element of an array.
inline void collect(const json& at, const std::vector<std::string>& path, size_t i, json& out) {
  if (i == path.size()) {
    out.push_back(at);
    return;
  }
  if (path[i] == "*") {
    if (at.is_array())
      for (const auto& e : at) collect(e, path, i + 1, out);
    return;
  }
  const json::json_pointer step("/" + path[i]);
  if (at.contains(step)) collect(at[step], path, i + 1, out);
}

inline void require_figure(const json& report, const std::string& key, const json& want) {
  INFO("expected.json: " << key << " = " << want.dump());
  if (key.find("/*") == std::string::npos) {
    const json::json_pointer ptr(key);
    REQUIRE(report.contains(ptr));
    const json& got = report[ptr];
    INFO("report.json: " << got.dump());
    if (want.is_object()) {
      REQUIRE(got.is_string());
      const std::string s = got.get<std::string>(), starts = want.at("starts"),
                        ends = want.at("ends");
      REQUIRE(s.rfind(starts, 0) == 0);
      REQUIRE(s.size() >= ends.size());
      REQUIRE(s.compare(s.size() - ends.size(), ends.size(), ends) == 0);
    } else {
      REQUIRE(got == normalize(want));
    }
    return;
  }
  std::vector<std::string> path;
  for (size_t b = 1, e; b <= key.size(); b = e + 1) {
    e = key.find('/', b);
    if (e == std::string::npos) e = key.size();
    path.push_back(key.substr(b, e - b));
  }
  json got = json::array();
  collect(report, path, 0, got);
  std::vector<json> g(got.begin(), got.end());
  json w = normalize(want);
  std::vector<json> wv(w.begin(), w.end());
  std::sort(g.begin(), g.end());
  std::sort(wv.begin(), wv.end());
  INFO("report.json: " << json(g).dump());
  REQUIRE(json(g) == json(wv));
}

// Every figure of `program` ("basic") in expected.json; with `standin`, those that hold on
// the stand-in only as well.
inline void require_expected(const json& report, const std::string& program, bool standin = true) {
  const json& e = all().at(program);
  for (const auto& [key, want] : e.at("report").items()) require_figure(report, key, want);
  if (standin && e.contains("standin"))
    for (const auto& [key, want] : e["standin"].items()) require_figure(report, key, want);
}

}  // namespace expected
