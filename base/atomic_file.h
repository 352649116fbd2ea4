// Durable "write to a temporary name, then rename": a reader (or a resumed run) sees
// either no file or a complete one. The one atomic-write helper of result files,
// checkpoints, run-directory files and the attention command's output (in base/, below every layer
// that writes files: worker/, results/, coordinator/ and app/ share it).
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace attnsweep {

// "<path>.tmp.<pid>": same directory, so the rename is atomic.
std::string temp_path_for(const std::string& path);

// fsync(tmp), rename(tmp, path), fsync(directory of path). Throws std::runtime_error
// naming the file and the errno text.
void commit_file(const std::string& tmp, const std::string& path);

// Writes `text` to `path` through a temporary, renamed into place; durable: synced as
// commit_file does (status.json and the children's cell files are not: a crash only
// costs a rewrite). Throws std::runtime_error naming the path.
void atomic_write_text(const std::string& path, std::string_view text, bool durable = true);

// Removes `path` when destroyed unless release()d: the temporary of a failed write.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  ~TempFileGuard();
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void release() { path_.clear(); }

 private:
  std::string path_;
};

}  // namespace attnsweep
