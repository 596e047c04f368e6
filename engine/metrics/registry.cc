#include "engine/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/metrics/exposition.h"

namespace coil::metrics {
namespace {

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// The sample names a family writes: a histogram `x` writes x_bucket, x_sum and x_count.
std::vector<std::string> SampleNames(const std::string& name, MetricType type) {
  if (type != MetricType::kHistogram) return {name};
  return {name + "_bucket", name + "_sum", name + "_count"};
}

}  // namespace

void Counter::Increment(double amount) {
  if (!(amount >= 0.0)) return;  // negative or NaN
  value_.fetch_add(amount, std::memory_order_relaxed);
}

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds->size() + 1)) {}

void Histogram::Observe(double value) {
  // The first bound >= value: `le` is inclusive. NaN compares false everywhere and lands
  // in +Inf, as in Prometheus' own clients.
  const size_t index = std::lower_bound(bounds_->begin(), bounds_->end(), value) - bounds_->begin();
  buckets_[index].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.cumulative_counts.reserve(bounds_->size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    snapshot.cumulative_counts.push_back(running);
  }
  snapshot.count = running;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

FamilyBase::FamilyBase(std::string name, std::string help, std::vector<std::string> label_names)
    : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}

void FamilyBase::Render(std::string* out) const {
  absl::StrAppend(out, "# HELP ", name_, " ");
  AppendEscapedHelp(help_, out);
  absl::StrAppend(out, "\n# TYPE ", name_, " ", TypeName(type()), "\n");
  absl::MutexLock lock(&mutex_);
  RenderChildren(out);
}

absl::Status FamilyBase::CheckLabelValues(const std::vector<std::string>& values) const {
  if (values.size() != label_names_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metric ", name_, " got ", values.size(), " label values for its ", label_names_.size(),
        " labels (", absl::StrJoin(label_names_, ", "), "); pass one value per label, in order"));
  }
  return absl::OkStatus();
}

void FamilyBase::AppendLabels(const std::vector<std::string>& values,
                              const std::string& extra_label, const std::string& extra_value,
                              std::string* out) const {
  if (values.empty() && extra_label.empty()) return;
  out->push_back('{');
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out->push_back(',');
    absl::StrAppend(out, label_names_[i], "=\"");
    AppendEscapedLabelValue(values[i], out);
    out->push_back('"');
  }
  if (!extra_label.empty()) {
    if (!values.empty()) out->push_back(',');
    absl::StrAppend(out, extra_label, "=\"");
    AppendEscapedLabelValue(extra_value, out);
    out->push_back('"');
  }
  out->push_back('}');
}

void FamilyBase::AppendSample(const std::vector<std::string>& values, double value,
                              std::string* out) const {
  out->append(name_);
  AppendLabels(values, "", "", out);
  out->push_back(' ');
  AppendValue(value, out);
  out->push_back('\n');
}

void CounterFamily::RenderChildren(std::string* out) const {
  for (const auto& [values, counter] : children_) AppendSample(values, counter->Value(), out);
}

void GaugeFamily::RenderChildren(std::string* out) const {
  for (const auto& [values, gauge] : children_) AppendSample(values, gauge->Value(), out);
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names, std::vector<double> bounds)
    : Family<Histogram>(std::move(name), std::move(help), std::move(label_names)),
      bounds_(std::move(bounds)) {}

std::unique_ptr<Histogram> HistogramFamily::NewChild() const {
  return std::make_unique<Histogram>(&bounds_);
}

void HistogramFamily::RenderChildren(std::string* out) const {
  std::string le;
  for (const auto& [values, histogram] : children_) {
    const Histogram::Snapshot snapshot = histogram->Read();
    for (size_t i = 0; i < snapshot.cumulative_counts.size(); ++i) {
      le.clear();
      AppendValue(i < bounds_.size() ? bounds_[i] : INFINITY, &le);
      absl::StrAppend(out, name(), "_bucket");
      AppendLabels(values, "le", le, out);
      absl::StrAppend(out, " ", snapshot.cumulative_counts[i], "\n");
    }
    absl::StrAppend(out, name(), "_sum");
    AppendLabels(values, "", "", out);
    out->push_back(' ');
    AppendValue(snapshot.sum, out);
    absl::StrAppend(out, "\n", name(), "_count");
    AppendLabels(values, "", "", out);
    absl::StrAppend(out, " ", snapshot.count, "\n");
  }
}

absl::Status Registry::CheckNew(const std::string& name,
                                const std::vector<std::string>& label_names,
                                MetricType type) const {
  if (absl::Status status = ValidateMetricName(name); !status.ok()) return status;
  for (size_t i = 0; i < label_names.size(); ++i) {
    if (absl::Status status = ValidateLabelName(label_names[i]); !status.ok()) return status;
    for (size_t j = 0; j < i; ++j) {
      if (label_names[i] == label_names[j]) {
        return absl::InvalidArgumentError(
            absl::StrCat("metric ", name, " names label \"", label_names[i], "\" twice"));
      }
    }
  }
  // No sample name of the new family may be one of an existing family's (e.g. a gauge
  // "x_count" next to a histogram "x").
  for (const auto& family : families_) {
    bool clash = name == family->name();
    for (const std::string& sample : SampleNames(name, type)) {
      for (const std::string& existing : SampleNames(family->name(), family->type())) {
        clash = clash || sample == existing;
      }
    }
    if (clash) {
      return absl::AlreadyExistsError(absl::StrCat("metric ", name,
                                                   " clashes with the registered metric ",
                                                   family->name(), "; give it another name"));
    }
  }
  return absl::OkStatus();
}

template <typename F>
F* Registry::Insert(std::unique_ptr<F> family) {
  F* result = family.get();
  families_.push_back(std::move(family));
  return result;
}

absl::StatusOr<CounterFamily*> Registry::AddCounter(const std::string& name,
                                                    const std::string& help,
                                                    std::vector<std::string> label_names) {
  absl::MutexLock lock(&mutex_);
  COIL_RETURN_IF_ERROR(CheckNew(name, label_names, MetricType::kCounter));
  return Insert(std::make_unique<CounterFamily>(name, help, std::move(label_names)));
}

absl::StatusOr<GaugeFamily*> Registry::AddGauge(const std::string& name, const std::string& help,
                                                std::vector<std::string> label_names) {
  absl::MutexLock lock(&mutex_);
  COIL_RETURN_IF_ERROR(CheckNew(name, label_names, MetricType::kGauge));
  return Insert(std::make_unique<GaugeFamily>(name, help, std::move(label_names)));
}

absl::StatusOr<HistogramFamily*> Registry::AddHistogram(const std::string& name,
                                                        const std::string& help,
                                                        std::vector<double> bounds,
                                                        std::vector<std::string> label_names) {
  absl::MutexLock lock(&mutex_);
  COIL_RETURN_IF_ERROR(CheckNew(name, label_names, MetricType::kHistogram));
  for (const std::string& label : label_names) {
    if (label == "le") {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram ", name, " uses the label \"le\", which its buckets need; rename it"));
    }
  }
  if (bounds.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("histogram ", name, " has no bucket bounds; give at least one"));
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram ", name, " bound ", i, " is ", bounds[i],
          "; bounds must be finite and strictly increasing (+Inf is added by itself)"));
    }
  }
  return Insert(
      std::make_unique<HistogramFamily>(name, help, std::move(label_names), std::move(bounds)));
}

std::string Registry::Render() const {
  std::string out;
  absl::MutexLock lock(&mutex_);
  for (const auto& family : families_) family->Render(&out);
  return out;
}

}  // namespace coil::metrics
