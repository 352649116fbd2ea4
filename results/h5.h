// Our thin RAII layer over the HDF5 C API (in the manner of HighFive): move-only handles,
// each C call wrapped once, and HDF5's error stack turned into one h5::Error that says
// which file, which object and what failed:
//   "runs/ab12.h5:/train/loss: cannot write dataset: <HDF5's reasons, innermost first>"
// HDF5's automatic printing of its error stack is switched off by the first handle
// that opens a file; we walk the stack ourselves.
//
// All HDF5 calls of a process must come from one thread (libhdf5 here is not built
// thread-safe); every cell owns its file, so there is no parallel HDF5 and no SWMR.
// File locking follows HDF5_USE_FILE_LOCKING (HDF5 >= 1.10.7 reads it itself).
#pragma once

#include <hdf5.h>

#include <concepts>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace attnsweep::h5 {

// Every failure of an HDF5 call, with its context.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Element types we write: float32, float64, int64 (strings have their own calls).
template <class T>
concept Numeric = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, int64_t>;

// What a dataset or attribute holds, as far as a reader of our files cares.
enum class Kind { Float, Integer, String, Other };

// Owns one hid_t and closes it with the matching H5?close. Move-only.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Id() { reset(); }
  Id(Id&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& o) noexcept;
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and returns the closer's status (negative on failure); idempotent.
  herr_t reset() noexcept;

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// One attribute, open.
class Attribute {
 public:
  Kind kind() const;
  std::string read_string() const;  // variable- or fixed-length string
  double read_double() const;       // any numeric scalar, converted by HDF5
  int64_t read_int64() const;       // integer scalar

 private:
  friend class Object;
  Attribute(Id id, std::string file, std::string where)
      : id_(std::move(id)), file_(std::move(file)), where_(std::move(where)) {}
  [[noreturn]] void fail(const std::string& what) const;
  Id id_;
  std::string file_, where_;  // where_ = "object path@name"
};

// Something in a file that carries attributes: the file's root, a group or a dataset.
class Object {
 public:
  Object(Object&&) noexcept = default;
  Object& operator=(Object&&) noexcept = default;

  hid_t id() const { return id_.get(); }
  const std::string& file_name() const { return file_; }
  const std::string& path() const { return path_; }  // absolute, "/" for the root

  bool has_attribute(const std::string& name) const;
  std::vector<std::string> attribute_names() const;    // sorted by name
  Attribute attribute(const std::string& name) const;  // throws when absent
  std::string attribute_string(const std::string& name) const { return attribute(name).read_string(); }
  double attribute_double(const std::string& name) const { return attribute(name).read_double(); }
  int64_t attribute_int64(const std::string& name) const { return attribute(name).read_int64(); }

  // Scalar attributes; strings are variable-length UTF-8 (h5py reads them as str).
  // Separate names rather than overloads: an int literal would be ambiguous.
  void set_attribute_string(const std::string& name, const std::string& value);
  void set_attribute_double(const std::string& name, double value);
  void set_attribute_int64(const std::string& name, int64_t value);

  // Throws h5::Error "FILE:PATH: what: <HDF5 error stack>" (and clears the stack).
  [[noreturn]] void fail(const std::string& what) const;

 protected:
  Object(Id id, std::string file, std::string path)
      : id_(std::move(id)), file_(std::move(file)), path_(std::move(path)) {}
  std::string child_path(const std::string& rel) const;
  Id id_;
  std::string file_, path_;
};

class Dataset : public Object {
 public:
  std::vector<uint64_t> shape() const;
  uint64_t size() const;  // product of the shape (1 for a scalar)
  Kind kind() const;
  // HDF5's class of its datatype, for messages: "integer", "float", "string", "compound", ...
  std::string type_class() const;

  // Whole dataset, converted by HDF5 to the requested type (an int64 dataset reads as
  // double; a float one as int64 is refused by HDF5's conversion only when out of range).
  template <Numeric T>
  std::vector<T> read() const;
  std::vector<std::string> read_strings() const;
  // The block at `offset` with extent `count` (row-major, product(count) elements).
  template <Numeric T>
  std::vector<T> read_block(const std::vector<uint64_t>& offset, const std::vector<uint64_t>& count) const;

  // Reads the block at `offset` with extent `count` of the file into the block at
  // `mem_offset` of `mem`, a row-major array of extent `mem_shape` (same rank): one
  // HDF5 read, no copy, the rest of `mem` untouched (e.g. padding a shorter row).
  template <Numeric T>
  void read_block_into(const std::vector<uint64_t>& offset, const std::vector<uint64_t>& count, std::span<T> mem,
                       const std::vector<uint64_t>& mem_shape, const std::vector<uint64_t>& mem_offset) const;

  // Writes the block at `offset` with extent `count` (row-major data, product(count)).
  template <Numeric T>
  void write_block(const std::vector<uint64_t>& offset, const std::vector<uint64_t>& count, std::span<const T> data);

  // Extensible datasets only (Group::create_extensible): grows the first axis by
  // data.size() / row size rows and writes them. The trainer appends one step at a time.
  template <Numeric T>
  void append_rows(std::span<const T> data);

 private:
  friend class Group;
  Dataset(Id id, std::string file, std::string path) : Object(std::move(id), std::move(file), std::move(path)) {}
};

class Group : public Object {
 public:
  // Opens `path` (relative to this group, or absolute), creating it and any missing
  // intermediate groups.
  Group require_group(const std::string& path);
  Group open_group(const std::string& path) const;
  Dataset open_dataset(const std::string& path) const;
  // The group or dataset at `path`, opened once; monostate when there is none (a
  // missing path, a dangling link, another kind of object, one libhdf5 cannot open).
  // For walking a tree: is_group, is_dataset and open_* would open each object again.
  std::variant<std::monostate, Group, Dataset> open_member(const std::string& path) const;

  // True when every component of `path` exists (no error for a missing parent).
  bool exists(const std::string& path) const;
  bool is_group(const std::string& path) const;
  bool is_dataset(const std::string& path) const;
  std::vector<std::string> children() const;  // link names, sorted by name

  // Fixed-shape dataset written at once, with its `description` attribute. Missing
  // intermediate groups are created. Chunked along the first axis and deflate-
  // compressed (with shuffle); empty or scalar datasets are stored contiguous.
  template <Numeric T>
  Dataset write_dataset(const std::string& path, const std::vector<uint64_t>& shape, std::span<const T> data,
                        const std::string& description);
  // 1-D variable-length UTF-8 strings.
  Dataset write_strings(const std::string& path, const std::vector<std::string>& data, const std::string& description);

  // Fixed-shape chunked, compressed dataset whose unwritten elements read as `fill`;
  // filled later with Dataset::write_block (e.g. NaN-padded [cells, T] trajectories).
  template <Numeric T>
  Dataset create_filled(const std::string& path, const std::vector<uint64_t>& shape, T fill,
                        const std::string& description);

  // Fixed-shape contiguous dataset, no filters: large blocks are written straight to the
  // file in one write each. The fill value `fill` is recorded (h5py's `fillvalue`) but
  // never written: the caller must write every element (aggregate.h5's trajectories).
  template <Numeric T>
  Dataset create_contiguous(const std::string& path, const std::vector<uint64_t>& shape, T fill,
                            const std::string& description);

  // Extensible dataset [0, row_shape...] with an unlimited first axis, chunked
  // (chunk_rows rows per chunk; 0 picks ~64 KiB chunks) and compressed; grow it with
  // Dataset::append_rows. For per-step trajectories.
  template <Numeric T>
  Dataset create_extensible(const std::string& path, const std::vector<uint64_t>& row_shape,
                            const std::string& description, uint64_t chunk_rows = 0);

 protected:
  friend class File;
  Group(Id id, std::string file, std::string path) : Object(std::move(id), std::move(file), std::move(path)) {}
};

// An open HDF5 file; as a Group it is the root "/".
class File : public Group {
 public:
  // Truncates an existing file. `userblock` (0, or a power of two >= 512) bytes at the
  // start of the file are left to the caller (HDF5 ignores them): cell_file.cpp keeps a
  // checksum there.
  static File create(const std::string& path, size_t userblock = 0);
  static File open_read(const std::string& path);  // "not an HDF5 file", "truncated …" named
  // Reads the whole file into memory with one read when opening (HDF5's core driver),
  // so that every later metadata and chunk read is a copy: for many small files.
  static File open_read_in_memory(const std::string& path);
  static File open_rw(const std::string& path);

  File(File&&) noexcept = default;
  File& operator=(File&&) noexcept = default;
  ~File();  // closes without throwing; call close() to see errors

  // Flushes and closes; throws h5::Error on failure. Every Group/Dataset/Attribute of
  // this file must be closed (destroyed) first, or HDF5 keeps the file open.
  void close();

  // Asks the kernel to start writing the file's dirty pages to disk now, without
  // waiting (Linux sync_file_range), so that a large file's final fsync has little
  // left to do. Best effort: does nothing where unsupported.
  void start_writeback() const;

 private:
  File(Id id, std::string path) : Group(std::move(id), path, "/") {}
};

// Turns HDF5's automatic error printing off (idempotent; File does it on every open).
void silence_error_printing();

}  // namespace attnsweep::h5
