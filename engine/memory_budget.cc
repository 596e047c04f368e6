#include "engine/memory_budget.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace coil {
namespace {

std::string Size(int64_t bytes) {
  if (bytes < 1024 * 1024) return absl::StrCat(bytes / 1024, " KiB");
  return absl::StrCat(bytes / (1024 * 1024), " MiB");
}

int64_t PagesFor(int64_t tokens, int64_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

// The most rows a derived count takes: every running request's, plus the prefix cache's.
int64_t RowCap(const BudgetRequest& r) {
  return std::min<int64_t>(int64_t{r.max_num_seqs} + std::max<int64_t>(r.spare_rows, 0),
                           INT32_MAX);
}

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(const std::string& text, const std::string& flag) {
  std::string lower = absl::AsciiStrToLower(text);
  struct Suffix {
    const char* name;
    double scale;
  };
  constexpr Suffix kSuffixes[] = {{"gib", 1024.0 * 1024 * 1024},
                                  {"mib", 1024.0 * 1024},
                                  {"kib", 1024.0},
                                  {"gb", 1e9},
                                  {"mb", 1e6},
                                  {"kb", 1e3},
                                  {"g", 1024.0 * 1024 * 1024},
                                  {"m", 1024.0 * 1024},
                                  {"k", 1024.0},
                                  {"b", 1.0}};
  double scale = 1.0;
  for (const Suffix& suffix : kSuffixes) {
    const std::string s = suffix.name;
    if (lower.size() > s.size() && lower.compare(lower.size() - s.size(), s.size(), s) == 0) {
      scale = suffix.scale;
      lower.resize(lower.size() - s.size());
      break;
    }
  }
  double value = 0.0;
  if (!absl::SimpleAtod(lower, &value) || !(value >= 0.0) || value * scale > 9e18) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " is '", text, "'; give a size such as 2GiB, 512MiB or 1000000"));
  }
  return static_cast<int64_t>(value * scale);
}

absl::StatusOr<Budgets> SplitMemoryBudget(const BudgetRequest& r) {
  if (r.state_rows < 0 || r.kv_pages < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        r.state_rows < 0 ? "--state-rows" : "--kv-pages", " is ",
        r.state_rows < 0 ? r.state_rows : r.kv_pages, "; give a positive count or 0 to derive it"));
  }
  if (r.row_bytes <= 0 || r.block_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a state row of ", r.row_bytes,
                                                   " bytes and pages of ", r.block_size,
                                                   " tokens cannot be budgeted"));
  }
  Budgets out;
  const std::string budget = Size(r.budget_bytes);
  if (r.page_bytes == 0) {
    if (r.kv_pages > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv-pages is ", r.kv_pages,
                       " but the model has no attention layers and holds no KV pages; drop "
                       "--kv-pages"));
    }
    if (r.state_rows > 0) {
      out.state_rows = r.state_rows;
    } else {
      const int64_t rows = r.budget_bytes / r.row_bytes;
      if (rows < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--memory-budget ", budget, " holds no state row (one request needs ", r.row_bytes,
            " bytes per rank); raise --memory-budget or set --state-rows"));
      }
      out.state_rows = static_cast<int32_t>(std::min<int64_t>(rows, RowCap(r)));
    }
    out.bytes = int64_t{out.state_rows + 1} * r.row_bytes;
    out.description =
        absl::StrCat(out.state_rows, " state rows x ", Size(r.row_bytes), " = ", Size(out.bytes),
                     " (+1 scratch row)",
                     r.state_rows > 0 ? std::string(", from --state-rows")
                                      : absl::StrCat(", from --memory-budget ", budget),
                     "; no KV pages (no attention layers)");
    return out;
  }

  const int64_t request_pages = PagesFor(r.max_model_len, r.block_size);
  std::string from;
  if (r.state_rows > 0 && r.kv_pages > 0) {
    out.state_rows = r.state_rows;
    out.kv_pages = r.kv_pages;
    from = "from --state-rows and --kv-pages";
  } else if (r.state_rows > 0) {
    out.state_rows = r.state_rows;
    const int64_t pages = (r.budget_bytes - int64_t{r.state_rows} * r.row_bytes) / r.page_bytes;
    if (pages < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory-budget ", budget, " leaves no KV page beside ", r.state_rows,
                       " state rows of ", Size(r.row_bytes),
                       "; raise --memory-budget, lower --state-rows or "
                       "set --kv-pages"));
    }
    out.kv_pages = static_cast<int32_t>(std::min<int64_t>(pages, INT32_MAX));
    from = absl::StrCat("--state-rows, the pages from the rest of --memory-budget ", budget);
  } else if (r.kv_pages > 0) {
    out.kv_pages = r.kv_pages;
    const int64_t rows = (r.budget_bytes - int64_t{r.kv_pages} * r.page_bytes) / r.row_bytes;
    if (rows < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--memory-budget ", budget,
                                                     " leaves no state row beside ", r.kv_pages,
                                                     " KV pages of ", Size(r.page_bytes),
                                                     "; raise --memory-budget, lower --kv-pages or "
                                                     "set --state-rows"));
    }
    out.state_rows = static_cast<int32_t>(std::min<int64_t>(rows, RowCap(r)));
    from = absl::StrCat("--kv-pages, the rows from the rest of --memory-budget ", budget);
  } else {
    const int64_t per_request = r.row_bytes + request_pages * r.page_bytes;
    const int64_t rows = r.budget_bytes / per_request;
    if (rows < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory-budget ", budget, " holds no request of --max-model-len ",
                       r.max_model_len, " tokens (a state row of ", Size(r.row_bytes), " and ",
                       request_pages, " KV pages of ", Size(r.page_bytes),
                       " per rank); raise --memory-budget, lower --max-model-len or set "
                       "--state-rows and --kv-pages"));
    }
    out.state_rows = static_cast<int32_t>(std::min<int64_t>(rows, RowCap(r)));
    const int64_t pages = (r.budget_bytes - int64_t{out.state_rows} * r.row_bytes) / r.page_bytes;
    out.kv_pages = static_cast<int32_t>(std::min<int64_t>(pages, INT32_MAX));
    from = absl::StrCat("--memory-budget ", budget, ": a row per ", request_pages,
                        " pages of a max-model-len request, rows capped at max_num_seqs, the "
                        "rest pages");
  }
  const int64_t rows_bytes = int64_t{out.state_rows + 1} * r.row_bytes;
  const int64_t pages_bytes = int64_t{out.kv_pages + 1} * r.page_bytes;
  out.bytes = rows_bytes + pages_bytes;
  out.description =
      absl::StrCat(out.state_rows, " state rows x ", Size(r.row_bytes), " = ", Size(rows_bytes),
                   " and ", out.kv_pages, " KV pages x ", Size(r.page_bytes), " (", r.block_size,
                   " tokens each: ", int64_t{out.kv_pages} * r.block_size,
                   " tokens) = ", Size(pages_bytes), " (+1 scratch row and page), ", from);
  return out;
}

}  // namespace coil
