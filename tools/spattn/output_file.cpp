// tools/spattn/output_file.cpp - checked, atomic output files (see output_file.hpp).
#include "output_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "spattn/error.hpp"

namespace spattn::cli {
namespace {

namespace fs = std::filesystem;

// The directory a file `path` goes into ("." for a bare name).
fs::path directory_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// Creates "<path>.part-XXXXXX" and returns its descriptor; errno is set on -1.
int make_temp(const std::string& path, std::string& temp) {
  std::vector<char> name(path.begin(), path.end());
  const std::string suffix = ".part-XXXXXX";
  name.insert(name.end(), suffix.begin(), suffix.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  temp = name.data();
  return fd;
}

}  // namespace

void check_output(const std::string& flag, const std::string& path) {
  require(!path.empty(), flag, " needs a file name");
  std::error_code ec;
  require(!fs::is_directory(path, ec), flag, ": '", path, "' is a directory; give a file name");
  const fs::path dir = directory_of(path);
  fs::create_directories(dir, ec);
  require(!ec, flag, ": cannot create directory '", dir.string(), "': ", ec.message());
  require(fs::is_directory(dir, ec), flag, ": '", dir.string(), "' is not a directory");
  std::string temp;
  const int fd = make_temp(path, temp);
  require(fd >= 0, flag, ": cannot write '", path, "': ", std::strerror(errno));
  close(fd);
  std::remove(temp.c_str());
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const int fd = make_temp(path_, temp_);
  require(fd >= 0, "cannot write '", path_, "': ", std::strerror(errno));
  file_ = fdopen(fd, "wb");
  if (!file_) {
    close(fd);
    std::remove(temp_.c_str());
    fail("cannot write '", path_, "': ", std::strerror(errno));
  }
}

AtomicFile::~AtomicFile() {
  if (!file_) return;
  std::fclose(file_);
  std::remove(temp_.c_str());
}

void AtomicFile::commit() {
  const bool flushed = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
  const int flush_errno = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!flushed || !closed || std::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = !flushed ? flush_errno : errno;
    std::remove(temp_.c_str());
    fail("cannot write '", path_, "': ", std::strerror(err));
  }
}

void write_text_file(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  require(std::fwrite(text.data(), 1, text.size(), file.stream()) == text.size(), "cannot write '", path,
          "': ", std::strerror(errno));
  file.commit();
}

}  // namespace spattn::cli
