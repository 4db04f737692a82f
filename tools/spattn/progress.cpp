// tools/spattn/progress.cpp - progress lines on stderr (see progress.hpp).
#include "progress.hpp"

#include <unistd.h>

#include <chrono>
#include <iostream>

namespace spattn::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The command's start: the first use of this file (static initialisation).
const Clock::time_point kStart = Clock::now();
bool status_open = false;  // a terminal status line waits for its newline

}  // namespace

void progress_line(const std::string& text, bool now) {
  if (!now && std::chrono::duration<double>(Clock::now() - kStart).count() < kProgressAfterSeconds) return;
  std::cout.flush();
  if (isatty(STDERR_FILENO)) {
    std::cerr << "\r\033[K[" << text << "]" << std::flush;
    status_open = true;
  } else {
    std::cerr << "[" << text << "]" << std::endl;
  }
}

void progress_done() {
  if (!status_open) return;
  std::cerr << "\r\033[K" << std::flush;
  status_open = false;
}

}  // namespace spattn::cli
