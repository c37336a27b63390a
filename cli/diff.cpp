// `vramtrace diff A B`: two runs side by side, the peaks and what was live at them, in the
// terminal and optionally as an HTML file.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "cli/check_load.h"
#include "cli/commands.h"
#include "report/check.h"

namespace vramtrace::cli {
namespace {

int diff_command(const std::string& a, const std::string& b, const std::string& html, bool force) {
  if (!html.empty() && !output_file_allowed(html, "--html", force, {a, b}, "vramtrace diff"))
    return 2;
  if (!input_is_one_run(a, "vramtrace diff") || !input_is_one_run(b, "vramtrace diff")) return 2;
  try {
    collector::ReportRead ja = load_report(a, "A");
    collector::ReportRead jb = load_report(b, "B");
    collector::Budgets none;
    none.max_increase = collector::Budget{0.0, std::nullopt};
    collector::CheckResult r = collector::compare(ja, jb, none);
    std::cout << report::diff_text(r) << std::flush;
    if (!html.empty() && !write_private_file(html, report::diff_html(ja.document, jb.document, r)))
      return kExitWriteFailed;
    return 0;
  } catch (const collector::CheckError& e) {
    std::cerr << "vramtrace diff: " << report::printable(e.what()) << "\n";
    return 2;
  }
}

struct DiffArgs {
  std::string a, b, html;
  bool force = false;
};

}  // namespace

Command add_diff_command(CLI::App& app) {
  auto args = std::make_shared<DiffArgs>();
  auto* dif = app.add_subcommand("diff", "Compare two runs: peaks and what was live at them");
  dif->add_option("a", args->a, "The earlier run (report.json, trace or run directory)")
      ->required();
  dif->add_option("b", args->b, "The later run")->required();
  dif->add_option("--html", args->html, "Also write the comparison as an HTML file");
  dif->add_flag("--force", args->force,
                "Replace an existing --html file (never one of the inputs)");
  return {dif, [args] { return diff_command(args->a, args->b, args->html, args->force); }, {}};
}

}  // namespace vramtrace::cli
