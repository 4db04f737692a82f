// tools/spattn/timing.hpp - how the tool times a call: warm-up, then the
// median, min and max over enough timed calls.
//
// Warm-up runs the call until kWarmUpSeconds have passed (the first calls of
// a shape are slower: page faults, caches, the backend's workspace; at most
// kMaxWarmUpCalls), or once when a single call is longer. Then at least
// `repeats` calls are timed, and more while their total is under
// kMinTimedSeconds (at most kMaxSamples), all within `budget_s` seconds of
// timed calls (never fewer than one). A warm-up longer than the whole budget
// is itself the one sample.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace spattn::cli {

constexpr double kWarmUpSeconds = 0.05;
constexpr int64_t kMaxWarmUpCalls = 20;
constexpr double kMinTimedSeconds = 0.2;
constexpr int64_t kMaxSamples = 1000;

struct Timing {
  double median_s = 0.0;
  double min_s = 0.0;
  double max_s = 0.0;
  int64_t samples = 0;
};

// Median, min and max of `seconds` (not empty).
Timing timing_of(std::vector<double> seconds);

// Times `fn` as described above. Calls longer than a second are reported on
// stderr (progress.hpp) as they finish.
Timing time_median(const std::function<void()>& fn, int64_t repeats, double budget_s);

class JsonWriter;
// Fields NAME_ms, NAME_min_ms, NAME_max_ms and NAME_samples ("time" gives time_ms, ...).
void write_timing_json(JsonWriter& json, const std::string& name, const Timing& t);
// "0.633-0.822": min and max in milliseconds, for a table column.
std::string format_range_ms(const Timing& t);

}  // namespace spattn::cli
