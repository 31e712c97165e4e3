// Reading the server's metrics in-process, as a scrape would see them.
#ifndef GEMMD_TESTS_METRICS_UTIL_H_
#define GEMMD_TESTS_METRICS_UTIL_H_

#include <prometheus/metric_family.h>

#include <map>
#include <string>

#include "server/observability/metrics.h"

namespace gemmd::testing {

// The value of the first series of `name` whose labels include `labels` (a histogram's
// sample count); -1 when there is none.
inline double MetricValue(ServerMetrics& metrics, const std::string& name,
                          const std::map<std::string, std::string>& labels) {
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      bool match = true;
      for (const auto& [key, value] : labels) {
        bool found = false;
        for (const prometheus::ClientMetric::Label& l : metric.label) {
          found = found || (l.name == key && l.value == value);
        }
        match = match && found;
      }
      if (!match) continue;
      if (family.type == prometheus::MetricType::Counter) return metric.counter.value;
      if (family.type == prometheus::MetricType::Gauge) return metric.gauge.value;
      if (family.type == prometheus::MetricType::Histogram) {
        return static_cast<double>(metric.histogram.sample_count);
      }
    }
  }
  return -1;
}

// gemm_requests_total for one method and code, summed over precisions (0 when none).
inline double RequestsCounted(ServerMetrics& metrics, const std::string& method,
                              const std::string& code) {
  double total = 0;
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name != "gemm_requests_total") continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      std::map<std::string, std::string> labels;
      for (const auto& l : metric.label) labels[l.name] = l.value;
      if (labels["method"] == method && labels["code"] == code) total += metric.counter.value;
    }
  }
  return total;
}

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_METRICS_UTIL_H_
