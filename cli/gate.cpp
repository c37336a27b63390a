// The CI gate shared by `check` and `run --baseline` (cli/gate.h).
#include "cli/gate.h"

#include <algorithm>
#include <iostream>

#include "cli/commands.h"

namespace vramtrace::cli {

// A whole number in decimal digits only, from lo to hi, with CLI::Range's message. CLI11 alone
// reads "0x10" as 16 and "010" as 8 (octal), and takes "-5" for --grace-ms; the value is handed
// on without its leading zeros, so that CLI11 does not read it as octal either.
CLI::Validator decimal_range(long long lo, long long hi) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& v) -> std::string {
        if (!v.empty() && v.size() <= 18 &&
            std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          long long x = std::stoll(v);
          if (x >= lo && x <= hi) {
            v = std::to_string(x);
            return {};
          }
        }
        return "Value " + v + " not in range " + range;
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

CLI::Validator folder_name() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (v.empty() || v[0] == '-')
          return "'" + report::printable(v) + "' is not a folder name: give -o a folder (./" +
                 report::printable(v) + " for one whose name starts with '-')";
        return {};
      },
      "DIR");
}

void add_budget_options(CLI::App* app, CheckOptions& o) {
  app->add_option("--max-increase", o.max_increase,
                  "Allowed growth of the peak over the baseline: 5% or 256MiB; DEVICE:BUDGET "
                  "for one device (default 5%); CATEGORY:BUDGET for one of PyTorch's categories "
                  "at the peak (parameters:0, activations:5%)");
  app->add_option("--max-peak", o.max_peak, "Largest allowed peak, e.g. 40GiB; or DEVICE:SIZE");
  app->add_option("--device", o.device, "Check this device only")
      ->transform(decimal_range(0, 4095));  // a larger ordinal is a corrupt record
  app->add_option("--markdown", o.markdown, "Write a Markdown summary for a CI job page");
  app->add_option("--junit", o.junit, "Write a JUnit XML result");
}

collector::Budgets budgets_of(const CheckOptions& o) {
  collector::Budgets b;
  for (const auto& v : o.max_increase) collector::add_increase_option(b, v);
  for (const auto& v : o.max_peak) collector::add_peak_option(b, v);
  b.only_device = o.device;
  return b;
}

bool ci_files_allowed(const CheckOptions& o, const std::vector<std::string>& inputs,
                      const char* who) {
  if (!o.markdown.empty() && !o.junit.empty() && same_file(o.markdown, o.junit)) {
    if (who)
      std::cerr << who << ": --markdown and --junit name the same file ("
                << report::printable(o.markdown) << "): name two files\n";
    return false;
  }
  for (auto [option, file] : {std::pair{"--markdown", &o.markdown}, std::pair{"--junit", &o.junit}})
    if (!file->empty() && !output_file_allowed(*file, option, o.force, inputs, who)) return false;
  return true;
}

void write_gate_failure(const CheckOptions& o, const std::string& why) {
  const std::string line = report::printable(why);  // it may name a file, as given
  if (!o.markdown.empty()) write_private_file(o.markdown, report::failure_markdown(line));
  if (!o.junit.empty()) write_private_file(o.junit, report::failure_junit(line));
}

void write_gate_failure_of_args(int argc, char** argv, const std::string& why) {
  CheckOptions named;
  std::vector<std::string> others;  // what may be an input: every other word
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool value = false;
    for (auto [flag, file] :
         {std::pair{"--markdown", &named.markdown}, std::pair{"--junit", &named.junit}}) {
      const std::string f = flag;
      if (a == f && i + 1 < argc && argv[i + 1][0] != '-') {
        *file = argv[++i];
        value = true;
      }
      if (a.rfind(f + "=", 0) == 0 && a.size() > f.size() + 1) {
        *file = a.substr(f.size() + 1);
        value = true;
      }
    }
    if (a == "--force") named.force = true;
    if (!value) others.push_back(a);
  }
  // The command line was refused already (said by CLI11): a file that may not be written is
  // left as it is, without a second message.
  if (ci_files_allowed(named, others, nullptr)) write_gate_failure(named, why);
}

int gate(const collector::ReportRead& baseline, const collector::ReportRead& candidate,
         const CheckOptions& o, const char* who) {
  collector::CheckResult r;
  try {
    r = collector::compare(baseline, candidate, budgets_of(o));
  } catch (const collector::CheckError& e) {  // a device neither run has (known only now in `run`)
    std::cerr << who << ": " << report::printable(e.what()) << "\n";
    write_gate_failure(o, e.what());
    return 2;
  }
  std::cout << report::check_text(r) << std::flush;
  // Each CI file is tried (one that cannot be written does not keep the other from the job
  // page), and a failing verdict stays the exit code: the job fails for its regression, and
  // says both.
  bool written = true;
  if (!o.markdown.empty()) written &= write_private_file(o.markdown, report::check_markdown(r));
  if (!o.junit.empty()) written &= write_private_file(o.junit, report::check_junit(r));
  const int verdict = collector::gate_exit_code(r);
  if (written) return verdict;
  if (verdict != 0)
    std::cerr << who << ": exit " << verdict << " for the verdict above; a CI file could not be "
              << "written either (said above)\n";
  return verdict != 0 ? verdict : kExitWriteFailed;
}

}  // namespace vramtrace::cli
