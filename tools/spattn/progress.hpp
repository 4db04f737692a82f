// tools/spattn/progress.hpp - progress of long runs, on stderr.
//
// Lines are in brackets (e.g. "[bench 3/18: streaming L=4096]", "[timed call
// 2/5 took 3.5 min]") so they never read as the one-line error message. They
// appear once the command has run for kProgressAfterSeconds (benchmark cases
// at once), so quick runs (and quick failures) print nothing but their result. When stderr is a
// terminal, each line replaces the previous one (a status line), else each is
// a line of its own. stdout is flushed first, so piped tables stay in order.
#pragma once

#include <string>

namespace spattn::cli {

constexpr double kProgressAfterSeconds = 1.0;

// Shows "[text]" on stderr once the command has run kProgressAfterSeconds,
// or at once with `now` (the cases of a benchmark, a long run by nature).
void progress_line(const std::string& text, bool now = false);
// Ends a status line on a terminal, so the next output starts on its own line.
void progress_done();

}  // namespace spattn::cli
