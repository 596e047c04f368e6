// Prometheus metrics that the engine loop can update cheaply from any thread: counters,
// gauges and fixed-bucket histograms, grouped in labelled families and rendered by a
// Registry in the text exposition format 0.0.4. An update is a few relaxed atomic
// operations on a metric the caller already holds (no lock, no lookup); only creating a
// labelled child and rendering take a mutex. Metrics live as long as their Registry, and
// pointers to them stay valid for that long.
#ifndef COIL_ENGINE_METRICS_REGISTRY_H_
#define COIL_ENGINE_METRICS_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace coil::metrics {

// A monotonically increasing count (requests, tokens, preemptions).
class Counter {
 public:
  // `amount` must be >= 0; a negative or NaN amount is ignored, so a counter never goes
  // down (Prometheus reads a decrease as a restart).
  void Increment(double amount = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (queue lengths, free pages).
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount) { value_.fetch_add(amount, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted in fixed buckets. Bucket i counts values v with
// bounds[i-1] < v <= bounds[i] (Prometheus' `le`), the last one everything above the
// largest bound (+Inf). Counts are stored per bucket and made cumulative when rendered.
class Histogram {
 public:
  // `bounds`: finite, strictly increasing upper bounds (the +Inf bucket is implicit);
  // validated by HistogramFamily.
  explicit Histogram(const std::vector<double>* bounds);

  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf
    double sum = 0.0;
    uint64_t count = 0;  // equals cumulative_counts.back()
  };
  // Reads the buckets one by one while others may observe: each bucket is exact, and
  // `count` is the sum of the buckets, so `+Inf` and `_count` always agree.
  Snapshot Read() const;

 private:
  const std::vector<double>* bounds_;                 // owned by the family, shared by its children
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_->size() + 1
  std::atomic<double> sum_{0.0};
};

enum class MetricType { kCounter, kGauge, kHistogram };

// The part of a family the Registry renders; one per metric name.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names);
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  virtual MetricType type() const = 0;

  // Appends the HELP and TYPE lines and one block of samples per child, children in
  // lexicographic order of their label values.
  void Render(std::string* out) const;

 protected:
  absl::Status CheckLabelValues(const std::vector<std::string>& values) const;
  // Appends `{a="x",b="y"` (no closing brace: histograms add `le`), or nothing when the
  // family has no labels and `extra_label` is empty.
  void AppendLabels(const std::vector<std::string>& values, const std::string& extra_label,
                    const std::string& extra_value, std::string* out) const;
  // Appends one line `name{labels} value`.
  void AppendSample(const std::vector<std::string>& values, double value, std::string* out) const;

  mutable absl::Mutex mutex_;

 private:
  virtual void RenderChildren(std::string* out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) = 0;

  std::string name_;
  std::string help_;
  std::vector<std::string> label_names_;
};

// A family of metrics of one type sharing a name, one child per set of label values.
template <typename Metric>
class Family : public FamilyBase {
 public:
  using FamilyBase::FamilyBase;

  // The child for `label_values` (one per label name, in order), created on first use.
  // Look a child up once and keep the pointer: this takes a lock.
  absl::StatusOr<Metric*> WithLabels(const std::vector<std::string>& label_values) {
    absl::Status status = CheckLabelValues(label_values);
    if (!status.ok()) return status;
    absl::MutexLock lock(&mutex_);
    std::unique_ptr<Metric>& child = children_[label_values];
    if (child == nullptr) child = NewChild();
    return child.get();
  }

 protected:
  virtual std::unique_ptr<Metric> NewChild() const = 0;

  std::map<std::vector<std::string>, std::unique_ptr<Metric>> children_ ABSL_GUARDED_BY(mutex_);
};

class CounterFamily final : public Family<Counter> {
 public:
  using Family<Counter>::Family;
  MetricType type() const override { return MetricType::kCounter; }

 private:
  std::unique_ptr<Counter> NewChild() const override { return std::make_unique<Counter>(); }
  void RenderChildren(std::string* out) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
};

class GaugeFamily final : public Family<Gauge> {
 public:
  using Family<Gauge>::Family;
  MetricType type() const override { return MetricType::kGauge; }

 private:
  std::unique_ptr<Gauge> NewChild() const override { return std::make_unique<Gauge>(); }
  void RenderChildren(std::string* out) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
};

class HistogramFamily final : public Family<Histogram> {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds);
  MetricType type() const override { return MetricType::kHistogram; }
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::unique_ptr<Histogram> NewChild() const override;
  void RenderChildren(std::string* out) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  std::vector<double> bounds_;
};

// Owns every family; renders them in the order they were added.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Each fails with INVALID_ARGUMENT for a bad metric or label name (histograms also for
  // the reserved label "le" and for bounds that are empty, not finite or not strictly
  // increasing) and with ALREADY_EXISTS for a name already registered.
  absl::StatusOr<CounterFamily*> AddCounter(const std::string& name, const std::string& help,
                                            std::vector<std::string> label_names = {});
  absl::StatusOr<GaugeFamily*> AddGauge(const std::string& name, const std::string& help,
                                        std::vector<std::string> label_names = {});
  absl::StatusOr<HistogramFamily*> AddHistogram(const std::string& name, const std::string& help,
                                                std::vector<double> bounds,
                                                std::vector<std::string> label_names = {});

  // The whole exposition, every line ending in '\n'.
  std::string Render() const;

 private:
  // INVALID_ARGUMENT for bad names, ALREADY_EXISTS for a clash with a registered family.
  absl::Status CheckNew(const std::string& name, const std::vector<std::string>& label_names,
                        MetricType type) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  template <typename F>
  F* Insert(std::unique_ptr<F> family) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable absl::Mutex mutex_;
  std::vector<std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace coil::metrics

#endif  // COIL_ENGINE_METRICS_REGISTRY_H_
