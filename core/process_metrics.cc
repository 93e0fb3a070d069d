#include "core/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "prometheus/metric_family.h"

#ifndef MOE_VERSION
#define MOE_VERSION "unknown"
#endif
#ifndef MOE_CUDA_BUILD
#define MOE_CUDA_BUILD 0
#endif
#ifndef MOE_GIT_COMMIT
#define MOE_GIT_COMMIT "unknown"
#endif

namespace moe {
namespace {

prometheus::MetricFamily Gauge(
    const std::string& name, const std::string& help, double value,
    prometheus::MetricType type = prometheus::MetricType::Gauge) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
  return f;
}

int OpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the directory stream's own descriptor
}

class ProcessMetrics : public prometheus::Collectable {
 public:
  explicit ProcessMetrics(const char* component) : component_(component) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    // /proc/self/stat: fields after the parenthesised command name.
    std::ifstream stat("/proc/self/stat");
    std::string line;
    if (std::getline(stat, line)) {
      std::istringstream rest(line.substr(line.rfind(')') + 2));
      std::vector<std::string> f{std::istream_iterator<std::string>(rest),
                                 std::istream_iterator<std::string>()};
      // f[0] is field 3 (state): utime 14, stime 15, starttime 22,
      // vsize 23, rss 24.
      if (f.size() > 21) {
        const double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;
        out.push_back(Gauge("process_cpu_seconds_total",
                            "User and system CPU time spent in seconds", cpu,
                            prometheus::MetricType::Counter));
        out.push_back(Gauge("process_virtual_memory_bytes",
                            "Virtual memory size in bytes", std::stod(f[20])));
        out.push_back(Gauge("process_resident_memory_bytes",
                            "Resident memory size in bytes",
                            std::stod(f[21]) * page));
        out.push_back(Gauge("process_start_time_seconds",
                            "Start time of the process since unix epoch in "
                            "seconds",
                            BootTime() + std::stod(f[19]) / ticks));
      }
    }
    if (const int fds = OpenFds(); fds >= 0) {
      out.push_back(
          Gauge("process_open_fds", "Number of open file descriptors", fds));
    }
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
      out.push_back(Gauge("process_max_fds",
                          "Maximum number of open file descriptors",
                          static_cast<double>(lim.rlim_cur)));
    }
    prometheus::MetricFamily info =
        Gauge("moe_build_info",
              "The build that answers: version, git commit, whether the CUDA "
              "backend is compiled in (always 1)",
              1);
    info.metric[0].label = {{"component", component_},
                            {"version", MOE_VERSION},
                            {"commit", MOE_GIT_COMMIT},
                            {"cuda", MOE_CUDA_BUILD ? "yes" : "no"}};
    out.push_back(std::move(info));
    return out;
  }

 private:
  static double BootTime() {
    std::ifstream s("/proc/stat");
    std::string key;
    double value = 0;
    while (s >> key) {
      if (key == "btime") {
        s >> value;
        return value;
      }
      s.ignore(1 << 20, '\n');
    }
    return 0;
  }

  const std::string component_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> MakeProcessMetrics(
    const char* component) {
  return std::make_shared<ProcessMetrics>(component);
}

}  // namespace moe
