#include "tests/testutil/metric_text.h"

#include <sstream>

#include "prometheus/text_serializer.h"

namespace moe::testing {

std::string MetricsText(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

double MetricValue(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0)
      return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

}  // namespace moe::testing
