// The HDF5 wrapper of results/h5.h: one method per HDF5 call we make, each turning
// HDF5's error stack into one h5::Error. About 730 lines: the one place that talks to
// libhdf5 (files, groups, datasets of every layout, attributes, the userblock).
#include "results/h5.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>

#include <fcntl.h>

namespace attnsweep::h5 {
namespace {

// ---- the error stack -----------------------------------------------------------------

// HDF5's reasons for the last failure, innermost first, and the stack cleared.
std::string take_error_stack() {
  struct Frame {
    std::string desc;
    hid_t minor;
  };
  std::vector<Frame> frames;
  auto visit = [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
    static_cast<std::vector<Frame>*>(data)->push_back({e->desc ? e->desc : "", e->min_num});
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, visit, &frames);  // copy first: H5Eget_msg clears the stack
  H5Eclear2(H5E_DEFAULT);
  std::string out;
  int shown = 0;
  for (const Frame& f : frames) {
    std::string text = f.desc;
    if (text.empty()) {
      char buf[256] = {};
      if (H5Eget_msg(f.minor, nullptr, buf, sizeof buf) > 0) text = buf;
    }
    if (text.empty() || out.find(text) != std::string::npos) continue;
    if (shown++ == 4) break;  // the innermost few say why; the rest is HDF5's call chain
    out += (out.empty() ? "" : "; ") + text;
  }
  return out;
}

[[noreturn]] void throw_error(const std::string& file, const std::string& where, const std::string& what) {
  std::string msg = file;
  if (!where.empty()) msg += ":" + where;
  msg += ": " + what;
  std::string stack = take_error_stack();
  if (!stack.empty()) msg += " (HDF5: " + stack + ")";
  throw Error(msg);
}

// ---- small helpers -------------------------------------------------------------------

template <Numeric T>
hid_t native_type() {
  if constexpr (std::same_as<T, float>) return H5T_NATIVE_FLOAT;
  if constexpr (std::same_as<T, double>) return H5T_NATIVE_DOUBLE;
  if constexpr (std::same_as<T, int64_t>) return H5T_NATIVE_INT64;
}

// Stored little-endian whatever the machine, as h5py and every reader expect.
template <Numeric T>
hid_t file_type() {
  if constexpr (std::same_as<T, float>) return H5T_IEEE_F32LE;
  if constexpr (std::same_as<T, double>) return H5T_IEEE_F64LE;
  if constexpr (std::same_as<T, int64_t>) return H5T_STD_I64LE;
}

std::vector<hsize_t> to_hsize(const std::vector<uint64_t>& v) {
  return {v.begin(), v.end()};
}

uint64_t product(const std::vector<uint64_t>& v) {
  return std::accumulate(v.begin(), v.end(), uint64_t{1}, std::multiplies<>());
}

Kind kind_of_type(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_FLOAT: return Kind::Float;
    case H5T_INTEGER: return Kind::Integer;
    case H5T_STRING: return Kind::String;
    default: return Kind::Other;
  }
}

// Variable-length UTF-8 string type (what h5py writes for str).
Id vlen_string_type() {
  Id t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

// Chunk shape: full trailing axes (capped near 1 MiB), and as many leading-axis rows
// as fit in about 256 KiB, so appending or reading along time touches few chunks.
std::vector<hsize_t> chunk_for(const std::vector<uint64_t>& shape, size_t elem) {
  std::vector<hsize_t> c(shape.begin(), shape.end());
  for (auto& d : c) d = std::max<hsize_t>(d, 1);
  for (size_t i = c.size(); i-- > 1;) {
    hsize_t row = std::accumulate(c.begin() + 1, c.end(), hsize_t{1}, std::multiplies<>()) * elem;
    while (row > (hsize_t{1} << 20) && c[i] > 1) {
      c[i] = (c[i] + 1) / 2;
      row = std::accumulate(c.begin() + 1, c.end(), hsize_t{1}, std::multiplies<>()) * elem;
    }
  }
  hsize_t row = std::accumulate(c.begin() + 1, c.end(), hsize_t{1}, std::multiplies<>()) * elem;
  c[0] = std::clamp<hsize_t>((hsize_t{256} << 10) / row, 1, c[0]);
  return c;
}

Id plist(hid_t cls) {
  return Id(H5Pcreate(cls), H5Pclose);
}

// Link creation list that makes missing intermediate groups.
Id intermediate_lcpl() {
  Id l = plist(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(l.get(), 1);
  return l;
}

void add_compression(hid_t dcpl, const std::vector<hsize_t>& chunk) {
  H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  if (H5Zfilter_avail(H5Z_FILTER_SHUFFLE) > 0) H5Pset_shuffle(dcpl);
  if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) H5Pset_deflate(dcpl, 4);
}

std::string read_string_value(hid_t type, const std::function<herr_t(hid_t, void*)>& read, uint64_t n,
                              std::vector<std::string>& out) {
  out.assign(n, {});
  if (n == 0) return {};
  if (H5Tis_variable_str(type) > 0) {
    Id mem = vlen_string_type();
    H5Tset_cset(mem.get(), H5Tget_cset(type));
    std::vector<char*> buf(n, nullptr);
    if (read(mem.get(), buf.data()) < 0) return "cannot read strings";
    for (uint64_t i = 0; i < n; ++i) {
      if (buf[i]) out[i] = buf[i];
      H5free_memory(buf[i]);
    }
  } else {
    size_t size = H5Tget_size(type);
    Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), size);
    H5Tset_cset(mem.get(), H5Tget_cset(type));
    std::vector<char> buf(n * size);
    if (read(mem.get(), buf.data()) < 0) return "cannot read strings";
    for (uint64_t i = 0; i < n; ++i) {
      const char* p = buf.data() + i * size;
      out[i].assign(p, strnlen(p, size));
      while (!out[i].empty() && out[i].back() == ' ') out[i].pop_back();  // space-padded
    }
  }
  return {};
}

}  // namespace

void silence_error_printing() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

// ---- Id ------------------------------------------------------------------------------

Id& Id::operator=(Id&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

herr_t Id::reset() noexcept {
  herr_t r = 0;
  if (id_ >= 0 && closer_) r = closer_(id_);
  id_ = H5I_INVALID_HID;
  return r;
}

// ---- Attribute -----------------------------------------------------------------------

void Attribute::fail(const std::string& what) const {
  throw_error(file_, where_, what);
}

Kind Attribute::kind() const {
  Id type(H5Aget_type(id_.get()), H5Tclose);
  if (!type.valid()) fail("cannot get the attribute's type");
  return kind_of_type(type.get());
}

std::string Attribute::read_string() const {
  Id type(H5Aget_type(id_.get()), H5Tclose);
  if (!type.valid()) fail("cannot get the attribute's type");
  if (kind_of_type(type.get()) != Kind::String) fail("is not a string");
  Id space(H5Aget_space(id_.get()), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != 1) fail("is not a scalar");
  std::vector<std::string> out;
  std::string err = read_string_value(
      type.get(), [&](hid_t mem, void* buf) { return H5Aread(id_.get(), mem, buf); }, 1, out);
  if (!err.empty()) fail(err);
  return out[0];
}

double Attribute::read_double() const {
  Kind k = kind();
  if (k != Kind::Float && k != Kind::Integer) fail("is not a number");
  Id space(H5Aget_space(id_.get()), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != 1) fail("is not a scalar");
  double v = 0;
  if (H5Aread(id_.get(), H5T_NATIVE_DOUBLE, &v) < 0) fail("cannot read as double");
  return v;
}

int64_t Attribute::read_int64() const {
  if (kind() != Kind::Integer) fail("is not an integer");
  Id space(H5Aget_space(id_.get()), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != 1) fail("is not a scalar");
  int64_t v = 0;
  if (H5Aread(id_.get(), H5T_NATIVE_INT64, &v) < 0) fail("cannot read as int64");
  return v;
}

// ---- Object --------------------------------------------------------------------------

void Object::fail(const std::string& what) const {
  throw_error(file_, path_, what);
}

std::string Object::child_path(const std::string& rel) const {
  if (!rel.empty() && rel[0] == '/') return rel;
  return path_ == "/" ? "/" + rel : path_ + "/" + rel;
}

bool Object::has_attribute(const std::string& name) const {
  htri_t r = H5Aexists(id(), name.c_str());
  if (r < 0) fail("cannot look for attribute " + name);
  return r > 0;
}

std::vector<std::string> Object::attribute_names() const {
  std::vector<std::string> names;
  auto visit = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  hsize_t idx = 0;
  if (H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_INC, &idx, visit, &names) < 0) fail("cannot list attributes");
  return names;
}

Attribute Object::attribute(const std::string& name) const {
  if (!has_attribute(name)) throw Error(file_ + ":" + path_ + ": missing attribute " + name);
  Id a(H5Aopen(id(), name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a.valid()) fail("cannot open attribute " + name);
  return Attribute(std::move(a), file_, path_ + "@" + name);
}

namespace {
// Replaces attribute `name` of `obj` with a scalar of `type` holding *value.
void write_scalar_attribute(const Object& obj, const std::string& name, hid_t type, hid_t mem, const void* value) {
  if (obj.has_attribute(name) && H5Adelete(obj.id(), name.c_str()) < 0) obj.fail("cannot replace attribute " + name);
  Id space(H5Screate(H5S_SCALAR), H5Sclose);
  Id a(H5Acreate2(obj.id(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) obj.fail("cannot create attribute " + name);
  if (H5Awrite(a.get(), mem, value) < 0) obj.fail("cannot write attribute " + name);
  if (a.reset() < 0) obj.fail("cannot close attribute " + name);
}
}  // namespace

void Object::set_attribute_string(const std::string& name, const std::string& value) {
  Id t = vlen_string_type();
  const char* p = value.c_str();
  write_scalar_attribute(*this, name, t.get(), t.get(), &p);
}

void Object::set_attribute_double(const std::string& name, double value) {
  write_scalar_attribute(*this, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void Object::set_attribute_int64(const std::string& name, int64_t value) {
  write_scalar_attribute(*this, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

// ---- Dataset -------------------------------------------------------------------------

std::vector<uint64_t> Dataset::shape() const {
  Id space(H5Dget_space(id()), H5Sclose);
  if (!space.valid()) fail("cannot get the dataspace");
  int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail("cannot get the rank");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) fail("cannot get the shape");
  return {dims.begin(), dims.end()};
}

uint64_t Dataset::size() const {
  return product(shape());
}

Kind Dataset::kind() const {
  Id type(H5Dget_type(id()), H5Tclose);
  if (!type.valid()) fail("cannot get the datatype");
  return kind_of_type(type.get());
}

std::string Dataset::type_class() const {
  Id type(H5Dget_type(id()), H5Tclose);
  if (!type.valid()) fail("cannot get the datatype");
  switch (H5Tget_class(type.get())) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    case H5T_REFERENCE: return "reference";
    default: return "unknown";
  }
}

template <Numeric T>
std::vector<T> Dataset::read() const {
  Kind k = kind();
  if (k != Kind::Float && k != Kind::Integer) fail("does not hold numbers");
  std::vector<T> out(size());
  if (!out.empty() && H5Dread(id(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    fail("cannot read dataset");
  return out;
}

template <Numeric T>
std::vector<T> Dataset::read_block(const std::vector<uint64_t>& offset, const std::vector<uint64_t>& count) const {
  if (offset.size() != count.size()) fail("read_block: offset and count differ in rank");
  Kind k = kind();
  if (k != Kind::Float && k != Kind::Integer) fail("does not hold numbers");
  std::vector<T> out(product(count));
  if (out.empty()) return out;
  Id space(H5Dget_space(id()), H5Sclose);
  if (H5Sget_simple_extent_ndims(space.get()) != static_cast<int>(count.size())) fail("read_block: wrong rank");
  auto start = to_hsize(offset), cnt = to_hsize(count);
  if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, cnt.data(), nullptr) < 0)
    fail("cannot select the block to read");
  Id mem(H5Screate_simple(static_cast<int>(cnt.size()), cnt.data(), nullptr), H5Sclose);
  if (H5Dread(id(), native_type<T>(), mem.get(), space.get(), H5P_DEFAULT, out.data()) < 0) fail("cannot read block");
  return out;
}

std::vector<std::string> Dataset::read_strings() const {
  Id type(H5Dget_type(id()), H5Tclose);
  if (!type.valid()) fail("cannot get the datatype");
  if (kind_of_type(type.get()) != Kind::String) fail("does not hold strings");
  std::vector<std::string> out;
  std::string err = read_string_value(
      type.get(), [&](hid_t mem, void* buf) { return H5Dread(id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf); }, size(),
      out);
  if (!err.empty()) fail(err);
  return out;
}

template <Numeric T>
void Dataset::read_block_into(const std::vector<uint64_t>& offset, const std::vector<uint64_t>& count, std::span<T> mem,
                              const std::vector<uint64_t>& mem_shape, const std::vector<uint64_t>& mem_offset) const {
  if (offset.size() != count.size() || mem_shape.size() != count.size() || mem_offset.size() != count.size())
    fail("read_block_into: offsets, counts and shapes differ in rank");
  if (product(mem_shape) != mem.size()) fail("read_block_into: memory shape does not match the buffer size");
  for (size_t i = 0; i < count.size(); ++i)
    if (mem_offset[i] + count[i] > mem_shape[i]) fail("read_block_into: block does not fit the memory shape");
  if (product(count) == 0) return;
  Kind k = kind();
  if (k != Kind::Float && k != Kind::Integer) fail("does not hold numbers");
  Id space(H5Dget_space(id()), H5Sclose);
  if (H5Sget_simple_extent_ndims(space.get()) != static_cast<int>(count.size())) fail("read_block_into: wrong rank");
  auto start = to_hsize(offset), cnt = to_hsize(count), mdims = to_hsize(mem_shape), mstart = to_hsize(mem_offset);
  if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, cnt.data(), nullptr) < 0)
    fail("cannot select the block to read");
  Id ms(H5Screate_simple(static_cast<int>(mdims.size()), mdims.data(), nullptr), H5Sclose);
  if (H5Sselect_hyperslab(ms.get(), H5S_SELECT_SET, mstart.data(), nullptr, cnt.data(), nullptr) < 0)
    fail("cannot select the memory block");
  // A type conversion (float32 in the file, float64 in memory) goes through a buffer
  // that HDF5 allocates and zeroes on every read, 1 MiB by default: size it to the block.
  Id dxpl = plist(H5P_DATASET_XFER);
  const size_t bytes = std::clamp<size_t>(product(count) * 16, 4096, size_t{1} << 20);
  if (H5Pset_buffer(dxpl.get(), bytes, nullptr, nullptr) < 0) fail("cannot set the transfer buffer");
  if (H5Dread(id(), native_type<T>(), ms.get(), space.get(), dxpl.get(), mem.data()) < 0) fail("cannot read block");
}

template <Numeric T>
void Dataset::write_block(const std::vector<uint64_t>& offset, const std::vector<uint64_t>& count,
                          std::span<const T> data) {
  if (offset.size() != count.size()) fail("write_block: offset and count differ in rank");
  if (product(count) != data.size()) fail("write_block: count does not match the data size");
  if (data.empty()) return;
  Id space(H5Dget_space(id()), H5Sclose);
  if (H5Sget_simple_extent_ndims(space.get()) != static_cast<int>(count.size())) fail("write_block: wrong rank");
  auto start = to_hsize(offset), cnt = to_hsize(count);
  if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, cnt.data(), nullptr) < 0)
    fail("cannot select the block to write");
  Id mem(H5Screate_simple(static_cast<int>(cnt.size()), cnt.data(), nullptr), H5Sclose);
  if (H5Dwrite(id(), native_type<T>(), mem.get(), space.get(), H5P_DEFAULT, data.data()) < 0)
    fail("cannot write block");
}

template <Numeric T>
void Dataset::append_rows(std::span<const T> data) {
  std::vector<uint64_t> dims = shape();
  if (dims.empty()) fail("append_rows: scalar dataset");
  uint64_t row = product(std::vector<uint64_t>(dims.begin() + 1, dims.end()));
  if (row == 0 || data.size() % row != 0) fail("append_rows: data is not a whole number of rows");
  std::vector<uint64_t> offset(dims.size(), 0), count = dims;
  offset[0] = dims[0];
  count[0] = data.size() / row;
  dims[0] += count[0];
  auto new_dims = to_hsize(dims);
  if (H5Dset_extent(id(), new_dims.data()) < 0) fail("cannot extend dataset (is it extensible?)");
  write_block(offset, count, data);
}

// ---- Group ---------------------------------------------------------------------------

bool Group::exists(const std::string& path) const {
  // H5Lexists wants every parent to exist, so walk the path one component at a time.
  const bool absolute = !path.empty() && path[0] == '/';
  std::string prefix;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    if (next > pos && path.compare(pos, next - pos, ".") != 0) {
      prefix = (prefix.empty() ? (absolute ? "/" : "") : prefix + "/") + path.substr(pos, next - pos);
      htri_t r = H5Lexists(id(), prefix.c_str(), H5P_DEFAULT);
      if (r <= 0) {
        H5Eclear2(H5E_DEFAULT);  // a dataset in the middle of the path is an error: just "no"
        return false;
      }
    }
    pos = next + 1;
  }
  return true;
}

namespace {
// The object at `path` under `g` opened once, and its type (H5I_GROUP, H5I_DATASET,
// ...); an invalid Id and H5I_BADID when a component of the path is missing or libhdf5
// cannot open it (errors cleared). What is_group/is_dataset and then H5Gopen2/H5Dopen2
// would find, with one open of the object rather than two: opening a dataset reads its
// layout and filters, most of the cost of walking a small file.
std::pair<Id, H5I_type_t> open_object(const Group& g, const std::string& path) {
  if (!g.exists(path)) return {Id(), H5I_BADID};
  Id o(H5Oopen(g.id(), path.c_str(), H5P_DEFAULT), H5Oclose);
  if (!o.valid()) {
    H5Eclear2(H5E_DEFAULT);
    return {Id(), H5I_BADID};
  }
  const H5I_type_t t = H5Iget_type(o.get());
  return {std::move(o), t};
}
}  // namespace

bool Group::is_group(const std::string& path) const {
  return open_object(*this, path).second == H5I_GROUP;
}

bool Group::is_dataset(const std::string& path) const {
  return open_object(*this, path).second == H5I_DATASET;
}

std::vector<std::string> Group::children() const {
  H5G_info_t info;
  if (H5Gget_info(id(), &info) < 0) fail("cannot get group info");
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t len = H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) fail("cannot list group members");
    std::string name(static_cast<size_t>(len), '\0');
    H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT);
    names.push_back(std::move(name));
  }
  return names;
}

Group Group::open_group(const std::string& path) const {
  std::string full = child_path(path);
  auto [g, type] = open_object(*this, path);
  if (type != H5I_GROUP) throw Error(file_ + ":" + full + ": no such group");
  return Group(std::move(g), file_, full);
}

Group Group::require_group(const std::string& path) {
  if (exists(path)) return open_group(path);
  std::string full = child_path(path);
  Id lcpl = intermediate_lcpl();
  Id g(H5Gcreate2(id(), path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) throw_error(file_, full, "cannot create group");
  return Group(std::move(g), file_, full);
}

Dataset Group::open_dataset(const std::string& path) const {
  std::string full = child_path(path);
  auto [d, type] = open_object(*this, path);
  if (type != H5I_DATASET) throw Error(file_ + ":" + full + ": no such dataset");
  return Dataset(std::move(d), file_, full);
}

std::variant<std::monostate, Group, Dataset> Group::open_member(const std::string& path) const {
  auto [o, type] = open_object(*this, path);
  if (type == H5I_GROUP) return Group(std::move(o), file_, child_path(path));
  if (type == H5I_DATASET) return Dataset(std::move(o), file_, child_path(path));
  return {};
}

namespace {
// Creates dataset `path` under `g` (with intermediate groups) and its description.
Dataset make_dataset(const Group& g, const std::string& path, const std::string& full, hid_t type, hid_t space,
                     hid_t dcpl, const std::function<Dataset(Id)>& wrap) {
  Id lcpl = intermediate_lcpl();
  Id d(H5Dcreate2(g.id(), path.c_str(), type, space, lcpl.get(), dcpl, H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw_error(g.file_name(), full, "cannot create dataset");
  return wrap(std::move(d));
}
}  // namespace

template <Numeric T>
Dataset Group::write_dataset(const std::string& path, const std::vector<uint64_t>& shape, std::span<const T> data,
                             const std::string& description) {
  std::string full = child_path(path);
  if (product(shape) != data.size())
    throw Error(file_ + ":" + full + ": shape holds " + std::to_string(product(shape)) + " values but " +
                std::to_string(data.size()) + " were given");
  auto dims = to_hsize(shape);
  Id space(
      shape.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
      H5Sclose);
  Id dcpl = plist(H5P_DATASET_CREATE);
  if (!shape.empty() && !data.empty()) add_compression(dcpl.get(), chunk_for(shape, sizeof(T)));
  Dataset d = make_dataset(*this, path, full, file_type<T>(), space.get(), dcpl.get(),
                           [&](Id id) { return Dataset(std::move(id), file_, full); });
  if (!data.empty() && H5Dwrite(d.id(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) < 0)
    d.fail("cannot write dataset");
  d.set_attribute_string("description", description);
  return d;
}

Dataset Group::write_strings(const std::string& path, const std::vector<std::string>& data,
                             const std::string& description) {
  std::string full = child_path(path);
  hsize_t n = data.size();
  Id space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Id type = vlen_string_type();
  Id dcpl = plist(H5P_DATASET_CREATE);
  if (n > 0) add_compression(dcpl.get(), chunk_for({n}, 16));
  Dataset d = make_dataset(*this, path, full, type.get(), space.get(), dcpl.get(),
                           [&](Id id) { return Dataset(std::move(id), file_, full); });
  std::vector<const char*> ptrs;
  ptrs.reserve(data.size());
  for (const auto& s : data) ptrs.push_back(s.c_str());
  if (n > 0 && H5Dwrite(d.id(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0)
    d.fail("cannot write strings");
  d.set_attribute_string("description", description);
  return d;
}

template <Numeric T>
Dataset Group::create_filled(const std::string& path, const std::vector<uint64_t>& shape, T fill,
                             const std::string& description) {
  std::string full = child_path(path);
  auto dims = to_hsize(shape);
  Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Id dcpl = plist(H5P_DATASET_CREATE);
  if (product(shape) > 0) add_compression(dcpl.get(), chunk_for(shape, sizeof(T)));
  if (H5Pset_fill_value(dcpl.get(), native_type<T>(), &fill) < 0) throw_error(file_, full, "cannot set fill value");
  Dataset d = make_dataset(*this, path, full, file_type<T>(), space.get(), dcpl.get(),
                           [&](Id id) { return Dataset(std::move(id), file_, full); });
  d.set_attribute_string("description", description);
  return d;
}

template <Numeric T>
Dataset Group::create_contiguous(const std::string& path, const std::vector<uint64_t>& shape, T fill,
                                 const std::string& description) {
  std::string full = child_path(path);
  auto dims = to_hsize(shape);
  Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Id dcpl = plist(H5P_DATASET_CREATE);
  if (H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS) < 0 || H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER) < 0 ||
      H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_LATE) < 0 ||
      H5Pset_fill_value(dcpl.get(), native_type<T>(), &fill) < 0)
    throw_error(file_, full, "cannot set the dataset's layout");
  Dataset d = make_dataset(*this, path, full, file_type<T>(), space.get(), dcpl.get(),
                           [&](Id id) { return Dataset(std::move(id), file_, full); });
  d.set_attribute_string("description", description);
  return d;
}

template <Numeric T>
Dataset Group::create_extensible(const std::string& path, const std::vector<uint64_t>& row_shape,
                                 const std::string& description, uint64_t chunk_rows) {
  std::string full = child_path(path);
  std::vector<uint64_t> shape{0};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  if (product(row_shape) == 0) throw Error(file_ + ":" + full + ": extensible dataset with an empty row shape");
  auto dims = to_hsize(shape), maxdims = dims;
  maxdims[0] = H5S_UNLIMITED;
  Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data()), H5Sclose);
  std::vector<uint64_t> probe = shape;
  probe[0] = UINT64_MAX / 2;  // let chunk_for pick the row count
  auto chunk = chunk_for(probe, sizeof(T));
  if (chunk_rows > 0)
    chunk[0] = chunk_rows;
  else
    chunk[0] =
        std::max<hsize_t>(1, std::min<hsize_t>(chunk[0], (hsize_t{64} << 10) / (product(row_shape) * sizeof(T))));
  Id dcpl = plist(H5P_DATASET_CREATE);
  add_compression(dcpl.get(), chunk);
  Dataset d = make_dataset(*this, path, full, file_type<T>(), space.get(), dcpl.get(),
                           [&](Id id) { return Dataset(std::move(id), file_, full); });
  d.set_attribute_string("description", description);
  return d;
}

// ---- File ----------------------------------------------------------------------------

File File::create(const std::string& path, size_t userblock) {
  silence_error_printing();
  Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  if (!fcpl.valid() || (userblock > 0 && H5Pset_userblock(fcpl.get(), userblock) < 0))
    throw_error(path, "", "cannot set a user block of " + std::to_string(userblock) + " bytes");
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT);
  if (f < 0) throw_error(path, "", "cannot create file");
  return File(Id(f, H5Fclose), path);
}

namespace {
hid_t open_existing(const std::string& path, unsigned flags, hid_t fapl = H5P_DEFAULT) {
  silence_error_printing();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(path + ": no such file");
  if (!std::filesystem::is_regular_file(path, ec)) throw Error(path + ": not a regular file");
  htri_t is = H5Fis_hdf5(path.c_str());
  if (is == 0) {
    H5Eclear2(H5E_DEFAULT);
    throw Error(path + ": not an HDF5 file");
  }
  if (is < 0) throw_error(path, "", "cannot read file");
  hid_t f = H5Fopen(path.c_str(), flags, fapl);
  if (f < 0) {
    std::string stack = take_error_stack();
    // HDF5 says "truncated file: eof = …, stored_eof = …" when the end is missing.
    std::string what = stack.find("truncated") != std::string::npos ? "truncated file" : "cannot open file";
    throw Error(path + ": " + what + (stack.empty() ? "" : " (HDF5: " + stack + ")"));
  }
  return f;
}
}  // namespace

File File::open_read(const std::string& path) {
  return File(Id(open_existing(path, H5F_ACC_RDONLY), H5Fclose), path);
}

File File::open_read_in_memory(const std::string& path) {
  Id fapl = plist(H5P_FILE_ACCESS);
  if (H5Pset_fapl_core(fapl.get(), size_t{1} << 16, 0) < 0) throw_error(path, "", "cannot set the core driver");
  return File(Id(open_existing(path, H5F_ACC_RDONLY, fapl.get()), H5Fclose), path);
}

File File::open_rw(const std::string& path) {
  return File(Id(open_existing(path, H5F_ACC_RDWR), H5Fclose), path);
}

File::~File() {
  if (id_.valid() && id_.reset() < 0) H5Eclear2(H5E_DEFAULT);
}

void File::close() {
  if (!id_.valid()) return;
  if (H5Fflush(id(), H5F_SCOPE_LOCAL) < 0) {
    std::string msg;
    try {
      fail("cannot flush file");
    } catch (const Error& e) {
      msg = e.what();
    }
    id_.reset();
    H5Eclear2(H5E_DEFAULT);
    throw Error(msg);
  }
  if (id_.reset() < 0) throw_error(file_, "", "cannot close file");
}

void File::start_writeback() const {
#ifdef __linux__
  void* handle = nullptr;
  if (H5Fget_vfd_handle(id(), H5P_DEFAULT, &handle) < 0 || handle == nullptr) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  const int fd = *static_cast<int*>(handle);  // the sec2 (default) driver's handle is an int*
  ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
}

// ---- explicit instantiations ---------------------------------------------------------

#define ATTNSWEEP_H5_INSTANTIATE(T)                                                                                   \
  template std::vector<T> Dataset::read<T>() const;                                                                   \
  template std::vector<T> Dataset::read_block<T>(const std::vector<uint64_t>&, const std::vector<uint64_t>&) const;   \
  template void Dataset::read_block_into<T>(const std::vector<uint64_t>&, const std::vector<uint64_t>&, std::span<T>, \
                                            const std::vector<uint64_t>&, const std::vector<uint64_t>&) const;        \
  template void Dataset::write_block<T>(const std::vector<uint64_t>&, const std::vector<uint64_t>&,                   \
                                        std::span<const T>);                                                          \
  template void Dataset::append_rows<T>(std::span<const T>);                                                          \
  template Dataset Group::write_dataset<T>(const std::string&, const std::vector<uint64_t>&, std::span<const T>,      \
                                           const std::string&);                                                       \
  template Dataset Group::create_contiguous<T>(const std::string&, const std::vector<uint64_t>&, T,                   \
                                               const std::string&);                                                   \
  template Dataset Group::create_filled<T>(const std::string&, const std::vector<uint64_t>&, T, const std::string&);  \
  template Dataset Group::create_extensible<T>(const std::string&, const std::vector<uint64_t>&, const std::string&,  \
                                               uint64_t);
ATTNSWEEP_H5_INSTANTIATE(float)
ATTNSWEEP_H5_INSTANTIATE(double)
ATTNSWEEP_H5_INSTANTIATE(int64_t)
#undef ATTNSWEEP_H5_INSTANTIATE

}  // namespace attnsweep::h5
