#include "client_cli/process_cpu.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace gemmd {

absl::StatusOr<double> ProcessCpuSeconds(int pid) {
  const std::string path = pid == 0 ? "/proc/self/stat" : absl::StrCat("/proc/", pid, "/stat");
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("no process ", pid, " (", path, ")"));
  std::string line;
  std::getline(file, line);
  // The command name (field 2) may hold spaces; the fields after its ')' are fixed.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return absl::InternalError(absl::StrCat("unreadable ", path));
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  // Fields 3.. follow; utime and stime are fields 14 and 15.
  for (int i = 3; i < 14 && rest >> field; ++i) {
  }
  unsigned long long utime = 0, stime = 0;
  if (!(rest >> utime >> stime)) return absl::InternalError(absl::StrCat("unreadable ", path));
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

absl::StatusOr<double> HostBusyCpuSeconds() {
  std::ifstream file("/proc/stat");
  if (!file) return absl::NotFoundError("no /proc/stat");
  std::string line;
  std::getline(file, line);
  std::istringstream fields(line);
  std::string name;
  // "cpu  user nice system idle iowait irq softirq steal ..." in clock ticks.
  unsigned long long value = 0, busy = 0;
  int column = 0;
  if (!(fields >> name) || name != "cpu") return absl::InternalError("unreadable /proc/stat");
  for (; fields >> value; ++column) {
    if (column == 3 || column == 4 || column == 7) continue;  // idle, iowait, steal
    if (column == 8) break;                                   // guest time is already in user time
    busy += value;
  }
  if (column < 4) return absl::InternalError("unreadable /proc/stat");
  return static_cast<double>(busy) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace gemmd
