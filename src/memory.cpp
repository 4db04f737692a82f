// memory.cpp - memory guards (see spattn/memory.hpp).
//
// The available memory is read on every check (it changes as other programs
// run): MemAvailable is what the kernel can hand out without swapping; an
// address-space limit leaves only limit - VmSize (from /proc/self/statm) to
// this process, whatever the machine has free. One request may take
// kUsablePercent of that: the rest is the margin that keeps the machine (and
// this process's own small allocations) out of the out-of-memory killer.
#include "spattn/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "spattn/error.hpp"

namespace spattn {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// MemAvailable in bytes, or -1 where /proc/meminfo does not say.
int64_t meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return bytes_for(kib, 1024);
  return -1;
}

int64_t sysconf_available() {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? bytes_for(pages, page) : kMax;
}

// This process's mapped address space in bytes (0 where unknown).
int64_t address_space_used() {
  std::ifstream in("/proc/self/statm");
  int64_t pages = 0;
  if (!(in >> pages)) return 0;
  return bytes_for(pages, sysconf(_SC_PAGESIZE));
}

// What the soft limit `resource` still allows, or INT64_MAX when unlimited.
int64_t rlimit_headroom(int resource, int64_t used) {
  rlimit limit{};
  if (getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kMax;
  const auto cur = static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, static_cast<rlim_t>(kMax)));
  return std::max<int64_t>(0, cur - used);
}

}  // namespace

int64_t bytes_for(int64_t count, int64_t element_bytes) {
  if (count <= 0 || element_bytes <= 0) return 0;
  return count > kMax / element_bytes ? kMax : count * element_bytes;
}

int64_t add_bytes(int64_t a, int64_t b) { return a > kMax - b ? kMax : a + b; }

int64_t usable_memory_bytes(int64_t available) { return available / 100 * kUsablePercent; }

int64_t available_memory_bytes() {
  const int64_t meminfo = meminfo_available();
  int64_t available = meminfo >= 0 ? meminfo : sysconf_available();
  const int64_t used = address_space_used();
  available = std::min(available, rlimit_headroom(RLIMIT_AS, used));
  available = std::min(available, rlimit_headroom(RLIMIT_DATA, used));
  return available;
}

std::string format_bytes(int64_t bytes) {
  if (bytes == kMax) return "more than 8 EiB";
  static const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double x = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (x >= 1024.0 && unit < 5) {
    x /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, x >= 100.0 ? "%.0f %s" : x >= 10.0 ? "%.1f %s" : "%.2f %s", x, units[unit]);
  return buf;
}

MemoryEstimate& MemoryEstimate::add(const std::string& item, int64_t bytes) {
  items_.emplace_back(item, bytes);
  total_ = add_bytes(total_, std::max<int64_t>(bytes, 0));
  return *this;
}

void MemoryEstimate::check() const { check(available_memory_bytes(), "memory"); }

void MemoryEstimate::check(int64_t available, const std::string& memory) const {
  if (total_ <= usable_memory_bytes(available)) return;
  std::ostringstream parts;
  for (const auto& [item, bytes] : items_)
    if (bytes > 0) parts << (parts.tellp() > 0 ? ", " : "") << item << " " << format_bytes(bytes);
  fail(request_, " needs ", total_ == kMax ? "more than 2^63" : std::to_string(total_), " bytes (",
       format_bytes(total_), ": ", parts.str(), ") but only ", available, " bytes (", format_bytes(available),
       ") of ", memory, " are available, of which one request may take ", kUsablePercent, "%");
}

}  // namespace spattn
