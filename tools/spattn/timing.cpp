// tools/spattn/timing.cpp - warm-up and median timing (see timing.hpp).
#include "timing.hpp"

#include <algorithm>
#include <chrono>

#include "json_writer.hpp"
#include "progress.hpp"
#include "spattn/error.hpp"
#include "text_table.hpp"

namespace spattn::cli {
namespace {

constexpr double kReportCallSeconds = 1.0;  // calls at least this long are reported as they end

}  // namespace

Timing timing_of(std::vector<double> seconds) {
  require(!seconds.empty(), "timing_of needs at least one sample");
  std::sort(seconds.begin(), seconds.end());
  const size_t mid = seconds.size() / 2;
  const double median = seconds.size() % 2 ? seconds[mid] : 0.5 * (seconds[mid - 1] + seconds[mid]);
  return Timing{median, seconds.front(), seconds.back(), static_cast<int64_t>(seconds.size())};
}

Timing time_median(const std::function<void()>& fn, int64_t repeats, double budget_s) {
  using Clock = std::chrono::steady_clock;
  const auto seconds_of = [&fn](const char* what, int64_t n, int64_t of) {
    const auto start = Clock::now();
    fn();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (s >= kReportCallSeconds) progress_line(std::string(what) + " " + std::to_string(n) + "/" +
                                               std::to_string(of) + " took " + format_seconds(s));
    return s;
  };
  double last = seconds_of("warm-up call", 1, 1);
  if (last >= budget_s) return Timing{last, last, last, 1};  // too slow to repeat; warm-up effects are noise
  double warm = last;
  for (int64_t calls = 1; warm < kWarmUpSeconds && calls < kMaxWarmUpCalls; ++calls) {
    last = seconds_of("warm-up call", calls + 1, kMaxWarmUpCalls);
    warm += last;
  }
  int64_t wanted = std::max<int64_t>(repeats, 1);
  if (last > 0.0 && last * static_cast<double>(wanted) > budget_s)
    wanted = std::max<int64_t>(1, static_cast<int64_t>(budget_s / last));
  std::vector<double> samples;
  double total = 0.0;
  while (static_cast<int64_t>(samples.size()) < wanted ||
         (total < kMinTimedSeconds && static_cast<int64_t>(samples.size()) < kMaxSamples &&
          total + last <= budget_s)) {
    last = seconds_of("timed call", static_cast<int64_t>(samples.size()) + 1, wanted);
    samples.push_back(last);
    total += last;
  }
  return timing_of(std::move(samples));
}

void write_timing_json(JsonWriter& json, const std::string& name, const Timing& t) {
  json.field(name + "_ms", t.median_s * 1e3);
  json.field(name + "_min_ms", t.min_s * 1e3).field(name + "_max_ms", t.max_s * 1e3);
  json.field(name + "_samples", t.samples);
}

std::string format_range_ms(const Timing& t) { return format_ms(t.min_s) + "-" + format_ms(t.max_s); }

}  // namespace spattn::cli
