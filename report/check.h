// The CI gate and the run diff, written: the text of `vramtrace check` and `vramtrace diff`, the
// CI files (Markdown, JUnit) and the HTML diff, from the comparison that
// collector/analysis/compare.h makes (report/ decides nothing here), and the reading of their
// inputs (cli/check_load.h).
//
// `vramtrace check` passes (exit 0) when every device's peak, and every rank's when the run has
// ranks, is within its budget; fails (exit 1) on a regression, naming what grew at the peak;
// and answers bad input (missing, corrupt, wrong schema) with exit 2 and a message.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "collector/analysis/compare.h"

namespace vramtrace::report {

// The comparison's names, as report/ and its callers know them: every figure, budget and
// verdict is decided in collector/analysis/compare.h; report/ only renders its CheckResult.
using collector::add_category_option;
using collector::add_increase_option;
using collector::add_peak_option;
using collector::allowed_by;
using collector::Budget;
using collector::Budgets;
using collector::category_keys;
using collector::CategoryChange;
using collector::CheckError;
using collector::CheckResult;
using collector::compare;
using collector::Comparison;
using collector::gate_exit_code;
using collector::given_once;
using collector::incomplete_reasons;
using collector::kExitIncomplete;
using collector::kExitNotProfiled;
using collector::kExitRegression;
using collector::parse_increase;
using collector::parse_size;
using collector::ReportRead;
using collector::require_profiled_baseline;
using collector::SiteChange;
using collector::unprofiled_processes;

std::string check_text(const CheckResult& r);
std::string check_markdown(const CheckResult& r);
std::string check_junit(const CheckResult& r);
// The CI files when there is nothing to compare (bad input, a command that failed before the
// gate): they say why, and fail.
std::string failure_markdown(const std::string& why);
std::string failure_junit(const std::string& why);
std::string diff_text(const CheckResult& r);
// Both runs in report.html's views, side by side, with what the comparison found.
std::string diff_html(const nlohmann::json& a, const nlohmann::json& b, const CheckResult& r);

// Renderings of a row's PyTorch side and of the run's details, for check_text(), diff_text(),
// check_markdown() and check_junit().
std::string torch_text(const Comparison& c, const char* indent);
std::string details_text(const CheckResult& r, const char* prefix);
std::string torch_markdown(const Comparison& c);
std::string details_markdown(const CheckResult& r);
std::string torch_junit_detail(const Comparison& c);
std::string category_failure(const Comparison& c);  // "activations +2.90 GiB ... over budget"
nlohmann::json torch_html_row(const Comparison& c);

// Shared by check.cpp and check_detail.cpp: "+8.00 MiB", "-1.00 GiB"; cand - base of two
// peaks without a signed overflow; "+12.5%" ("new" from 0).
std::string signed_bytes(int64_t d);
std::string change_bytes(uint64_t base, uint64_t cand);
std::string percent(uint64_t base, uint64_t cand);

// Escaping for the outputs that carry strings from the traced program.
std::string escape_xml(const std::string& s);
// Where a string goes in the Markdown of check --markdown: inside a line of text (after its
// first words), at the start of a line or list item (where "# ", "> ", "- ", "1. " begin
// blocks), or in a table's cell (where "|" ends the cell).
enum class MdPlace { Inline, LineStart, TableCell };
// Escapes only what Markdown would read as syntax there: emphasis, code, links, HTML and
// entities anywhere; block markers at a line's start; "|" in a cell. Line breaks become spaces.
std::string escape_markdown(const std::string& s, MdPlace where = MdPlace::Inline);

}  // namespace vramtrace::report
