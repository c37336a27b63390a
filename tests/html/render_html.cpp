// Test tool: renders a report.json (a real one, or a fixture the HTML tests write with the
// shapes of real workloads) into report.html with the same code as `vramtrace report`.
//   vt_render_html REPORT.json OUT.html
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "report/html_report.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: vt_render_html REPORT.json OUT.html\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    std::cerr << "vt_render_html: " << argv[1] << ": " << e.what() << "\n";
    return 2;
  }
  std::ofstream out(argv[2], std::ios::binary);
  out << vramtrace::report::to_html(j);
  return out.good() ? 0 : 2;
}
