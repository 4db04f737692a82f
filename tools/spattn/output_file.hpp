// tools/spattn/output_file.hpp - the files the tool writes (--out, pictures).
//
// One rule for every subcommand: before any work starts, check_output makes
// the missing parent directories of each output and proves the directory
// writable by creating and removing a temporary file in it, so a bad --out is
// refused at once rather than after a long run. Files are then written
// atomically: into a temporary file beside the target, renamed over it only
// once complete, so a failed or interrupted run never leaves a half-written
// output (an interrupted one may leave its ".part" temporary beside it).
#pragma once

#include <cstdio>
#include <string>

namespace spattn::cli {

// Throws spattn::Error naming `flag` (e.g. "--out") unless `path` can be
// written: not a directory, its directory existing or creatable, writable.
void check_output(const std::string& flag, const std::string& path);

// A temporary file that becomes `path` on commit(); removed if never committed.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::FILE* stream() const { return file_; }
  // Flushes, closes and renames the temporary onto the path; throws on any failure.
  void commit();

 private:
  std::string path_, temp_;
  std::FILE* file_ = nullptr;
};

// Writes `text` to `path` through an AtomicFile.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace spattn::cli
