// attnsweep attention IN.h5 --out OUT.h5 --activation A [--degree P] [--scale S]
//                    [--causal] [--device cpu|cuda]
// One attention call, forward (+ backward when IN.h5 has `do`), for checking the kernels
// against other implementations (tests/integration/attention_torch.py). docs/command-line.md:
// reads q [B,H,Nq,d], k [B,H,Nk,d], v [B,H,Nk,dv], optional do [B,H,Nq,dv] and
// key_mask [B,Nk] (1 = attend, 0 = padding), float32 or float64; writes o, dq, dk, dv
// (with do), attn_fro and jac_fro [B,H], float32. Exit 2 on bad usage or input (nothing
// written), 1 when the output cannot be written.
#include "base/atomic_file.h"
#include "kernels/attention.h"
#include "results/h5.h"

#if defined(ATTNSWEEP_HAVE_CUDA) && __has_include("kernels/attention_cuda.h")
#include "kernels/attention_cuda.h"
#define ATTNSWEEP_ATTENTION_CUDA 1
#include <cuda_runtime_api.h>
#endif

#include <boost/program_options.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace attnsweep {
namespace {

namespace po = boost::program_options;

// Bad input: exit 2, nothing written.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string dims_str(const std::vector<int64_t>& d) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < d.size(); ++i) o << (i ? "," : "") << d[i];
  o << "]";
  return o.str();
}

std::string format_float(float x) {
  std::ostringstream o;
  o << x;
  return o.str();
}

struct Array {
  std::vector<int64_t> dims;
  std::vector<float> data;
};

// Most elements read from one dataset: 2^31 - 1 (8 GiB of float32). Checked before
// allocating, so that a dataset declared huge (chunked, never written: a few bytes on
// disk) is an input error, not an allocation failure.
constexpr uint64_t kMaxElements = (uint64_t{1} << 31) - 1;

// Reads a float32/float64 dataset as float32; rejects other types, ranks and non-finite
// values. `layout` names the expected axes, e.g. "[B,H,Nq,d]".
Array read_array(const h5::File& file, const std::string& path, const char* name, const char* layout) {
  const std::string where = path + ": /" + name;
  const int rank = static_cast<int>(std::count(layout, layout + std::strlen(layout), ',')) + 1;
  auto member = file.open_member(name);
  if (std::holds_alternative<h5::Group>(member)) throw InputError(where + ": expected a dataset, got a group");
  if (!std::holds_alternative<h5::Dataset>(member))
    throw InputError(where + ": expected a dataset, got an object HDF5 cannot open as one");
  const h5::Dataset& ds = std::get<h5::Dataset>(member);
  if (ds.kind() != h5::Kind::Float)
    throw InputError(where + ": expected float32 or float64 data, got " + ds.type_class());
  Array a;
  for (uint64_t x : ds.shape()) a.dims.push_back(static_cast<int64_t>(x));
  const int r = static_cast<int>(a.dims.size());
  if (r != rank)
    throw InputError(where + ": expected rank " + std::to_string(rank) + " " + layout + ", got rank " +
                     std::to_string(r) + (r > 0 ? " " + dims_str(a.dims) : ""));
  uint64_t n = 1;
  for (int64_t x : a.dims)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(x), &n)) n = UINT64_MAX;
  if (n > kMaxElements)
    throw InputError(where + ": shape " + dims_str(a.dims) + " " + layout + " is too large: at most " +
                     std::to_string(kMaxElements) + " elements per dataset");
  try {
    a.data = ds.read<float>();  // float64 converted by HDF5; beyond float32 becomes Inf
  } catch (const h5::Error& e) {
    throw InputError(e.what());
  }
  for (size_t i = 0; i < a.data.size(); ++i)
    if (!std::isfinite(a.data[i]))
      throw InputError(where + ": non-finite value (NaN or Inf, or beyond float32) at flat index " + std::to_string(i));
  return a;
}

void write_array(h5::File& file, const char* name, const std::vector<int64_t>& dims, const float* data,
                 const char* description) {
  const std::vector<uint64_t> shape(dims.begin(), dims.end());
  uint64_t n = 1;
  for (uint64_t x : shape) n *= x;
  file.write_dataset<float>(name, shape, std::span<const float>(data, n), description);
}

// A file cut short (a copy or a download that stopped) is caught before HDF5 parses it:
// the superblock at offset 0 records the end-of-file address, which must lie within
// the file (HDF5 File Format Specification, "Superblock", versions 0 to 3). Files with
// a user block (superblock further in) are left to HDF5.
void check_not_truncated(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> b(128);
  in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()));
  const size_t got = static_cast<size_t>(in.gcount());
  static constexpr unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (got < 8 || std::memcmp(b.data(), kSignature, 8) != 0) return;
  const std::string cut = path + ": truncated HDF5 file: ";
  if (got < 16) throw InputError(cut + std::to_string(got) + " bytes, shorter than its superblock");
  const unsigned version = b[8];
  // Byte offsets of "size of offsets" and of the base address; the end-of-file address
  // is the third address after the base address (v0, v1) or the second (v2, v3).
  size_t size_at = 0, base_at = 0, eof_index = 0;
  if (version == 0 || version == 1)
    size_at = 13, base_at = version == 0 ? 24 : 28, eof_index = 2;
  else if (version == 2 || version == 3)
    size_at = 9, base_at = 12, eof_index = 2;
  else
    return;
  const size_t w = b[size_at];
  if (w != 2 && w != 4 && w != 8) return;  // not a size HDF5 writes: let HDF5 report it
  const size_t need = base_at + (eof_index + 1) * w;
  if (got < need) throw InputError(cut + std::to_string(got) + " bytes, shorter than its superblock");
  auto address = [&](size_t i) {
    uint64_t a = 0;
    for (size_t k = 0; k < w; ++k) a |= static_cast<uint64_t>(b[base_at + i * w + k]) << (8 * k);
    return a;
  };
  const uint64_t base = address(0), eof = address(eof_index);
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (!ec && eof != UINT64_MAX && base <= UINT64_MAX - eof && size < base + eof)
    throw InputError(cut + std::to_string(size) + " bytes, its superblock says " + std::to_string(base + eof));
}

// IN.h5 must be a readable regular file with HDF5's signature: checked before HDF5
// opens it, so that a missing file or a folder gets a plain message.
void check_input_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  char c;
  if (f == nullptr || (std::fread(&c, 1, 1, f) == 0 && std::ferror(f) != 0)) {
    const int err = errno;
    if (f != nullptr) std::fclose(f);
    throw InputError(path + ": cannot read file (" + std::strerror(err) + ")");
  }
  std::fclose(f);
  check_not_truncated(path);
}

// OUT.h5 (and OUT.h5.tmp, written first) must be creatable as a file, and must not be
// IN.h5: checked before any work, so that bad usage exits 2 with nothing written.
void check_output_path(const std::string& out, const std::string& in) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(out);
  if (fs::is_directory(p, ec)) throw InputError("--out " + out + ": is a directory, expected an HDF5 file name");
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (!fs::is_directory(dir, ec))
    throw InputError("--out " + out + ": no directory " + dir.string() + " to write it in");
  if (fs::exists(p, ec) && fs::equivalent(p, fs::path(in), ec))
    throw InputError("--out " + out + ": is the input file; the output would replace it");
}

// "a, b or c"
std::string join(const std::vector<std::string>& v, const char* sep, const char* last_sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i == 0 ? "" : i + 1 == v.size() ? last_sep : sep) + v[i];
  return out;
}

ActivationSpec parse_activation(const std::string& act, int degree, const std::string& scale) {
  ActivationSpec a;
  if (const std::string problem = parse_activation_spec(act, degree, scale, &a); !problem.empty())
    throw InputError("--" + problem);
  return a;
}

#ifdef ATTNSWEEP_ATTENTION_CUDA
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// Copies the inputs to the GPU, runs the fused float32 path, copies the results back.
void run_cuda(const AttentionSpec& spec, const AttentionShape& sh, const Array& q, const Array& k, const Array& v,
              const Array* mask, const Array* dO, std::vector<float>& o, std::vector<double>& attn,
              std::vector<double>& jac, std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv) {
  std::vector<void*> allocs;
  auto dev = [&](size_t bytes) {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    allocs.push_back(p);
    return p;
  };
  auto up = [&](const std::vector<float>& x) {
    void* p = dev(x.size() * sizeof(float));
    cuda_check(cudaMemcpy(p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    return static_cast<float*>(p);
  };
  AttentionCudaWorkspace* ws = attention_cuda_workspace_create();
  auto down = [](auto& host, const void* src) {
    cuda_check(cudaMemcpy(host.data(), src, host.size() * sizeof(host[0]), cudaMemcpyDeviceToHost), "cudaMemcpy");
  };
  try {
    // g_* live on the GPU
    float* g_q = up(q.data);
    float* g_k = up(k.data);
    float* g_v = up(v.data);
    float* g_mask = mask != nullptr ? up(mask->data) : nullptr;
    float* g_o = static_cast<float*>(dev(o.size() * sizeof(float)));
    float* g_lse = static_cast<float*>(dev(static_cast<size_t>(sh.B * sh.H * sh.Nq) * sizeof(float)));
    double* g_attn = static_cast<double*>(dev(attn.size() * sizeof(double)));
    double* g_jac = static_cast<double*>(dev(jac.size() * sizeof(double)));
    attention_forward_cuda(spec, sh, CudaDType::f32, g_q, g_k, g_v, g_mask, g_o, g_lse, g_attn, g_jac, ws, nullptr);
    if (dO != nullptr) {
      float* g_do = up(dO->data);
      float* g_dq = static_cast<float*>(dev(dq.size() * sizeof(float)));
      float* g_dk = static_cast<float*>(dev(dk.size() * sizeof(float)));
      float* g_dv = static_cast<float*>(dev(dv.size() * sizeof(float)));
      attention_backward_cuda(spec, sh, CudaDType::f32, g_q, g_k, g_v, g_mask, g_o, g_do, g_lse, g_dq, g_dk, g_dv, ws,
                              nullptr);
      down(dq, g_dq);
      down(dk, g_dk);
      down(dv, g_dv);
    }
    down(o, g_o);
    down(attn, g_attn);
    down(jac, g_jac);
  } catch (...) {
    for (void* p : allocs) cudaFree(p);
    attention_cuda_workspace_destroy(ws);
    throw;
  }
  for (void* p : allocs) cudaFree(p);
  attention_cuda_workspace_destroy(ws);
}
#endif

// IN.h5's arrays, their shapes checked against q's.
struct Inputs {
  Array q, k, v, dO, mask;
  bool have_do = false, have_mask = false;
  AttentionShape sh;
};

Inputs read_inputs(const std::string& in_path) {
  Inputs in;
  check_input_file(in_path);
  {
    // A file HDF5 cannot open (a truncation the superblock check missed) fails here,
    // with HDF5's reason: an input error.
    std::optional<h5::File> opened;
    try {
      opened.emplace(h5::File::open_read(in_path));
    } catch (const h5::Error& e) {
      throw InputError(e.what());
    }
    const h5::File& f = *opened;
    for (const char* name : {"q", "k", "v"})
      if (!f.exists(name)) throw InputError(in_path + ": missing dataset /" + name);
    in.q = read_array(f, in_path, "q", "[B,H,Nq,d]");
    in.k = read_array(f, in_path, "k", "[B,H,Nk,d]");
    in.v = read_array(f, in_path, "v", "[B,H,Nk,dv]");
    in.have_do = f.exists("do");
    in.have_mask = f.exists("key_mask");
    if (in.have_do) in.dO = read_array(f, in_path, "do", "[B,H,Nq,dv]");
    if (in.have_mask) in.mask = read_array(f, in_path, "key_mask", "[B,Nk]");
  }
  AttentionShape& sh = in.sh;
  sh.B = in.q.dims[0];
  sh.H = in.q.dims[1];
  sh.Nq = in.q.dims[2];
  sh.d = in.q.dims[3];
  sh.Nk = in.k.dims[2];
  sh.dv = in.v.dims[3];
  auto expect = [&](const char* name, const std::vector<int64_t>& got, const std::vector<int64_t>& want,
                    const char* names) {
    if (got != want)
      throw InputError(in_path + ": /" + name + ": shape " + dims_str(got) + ", expected " + dims_str(want) + " " +
                       names + " (from q " + dims_str(in.q.dims) + ")");
  };
  expect("k", in.k.dims, {sh.B, sh.H, sh.Nk, sh.d}, "[B,H,Nk,d]");
  expect("v", in.v.dims, {sh.B, sh.H, sh.Nk, sh.dv}, "[B,H,Nk,dv]");
  if (in.have_do) expect("do", in.dO.dims, {sh.B, sh.H, sh.Nq, sh.dv}, "[B,H,Nq,dv]");
  if (in.have_mask) {
    expect("key_mask", in.mask.dims, {sh.B, sh.Nk}, "[B,Nk]");
    for (size_t i = 0; i < in.mask.data.size(); ++i)
      if (in.mask.data[i] != 0.0f && in.mask.data[i] != 1.0f)
        throw InputError(in_path + ": /key_mask: values must be 0 or 1, got " + format_float(in.mask.data[i]) +
                         " at flat index " + std::to_string(i));
  }
  if (sh.d == 0) throw InputError(in_path + ": /q: d = 0");
  return in;
}

// What OUT.h5 holds: o, the norms, and with do the gradients.
struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
  std::vector<double> attn, jac;
};

Outputs compute(const AttentionSpec& spec, const Inputs& in, const std::string& device) {
  const AttentionShape& sh = in.sh;
  const int64_t BH = sh.B * sh.H;
  Outputs r;
  r.o.resize(static_cast<size_t>(BH * sh.Nq * sh.dv));
  r.lse.resize(static_cast<size_t>(BH * sh.Nq));
  if (in.have_do) r.dq.resize(in.q.data.size()), r.dk.resize(in.k.data.size()), r.dv.resize(in.v.data.size());
  r.attn.resize(static_cast<size_t>(BH));
  r.jac.resize(static_cast<size_t>(BH));
  const float* m = in.have_mask ? in.mask.data.data() : nullptr;
  if (device == "cpu") {
    attention_forward_cpu(spec, sh, in.q.data.data(), in.k.data.data(), in.v.data.data(), m, r.o.data(), r.lse.data(),
                          r.attn.data(), r.jac.data());
    if (in.have_do)
      attention_backward_cpu(spec, sh, in.q.data.data(), in.k.data.data(), in.v.data.data(), m, r.o.data(),
                             in.dO.data.data(), r.lse.data(), r.dq.data(), r.dk.data(), r.dv.data());
  } else {
#ifdef ATTNSWEEP_ATTENTION_CUDA
    run_cuda(spec, sh, in.q, in.k, in.v, in.have_mask ? &in.mask : nullptr, in.have_do ? &in.dO : nullptr, r.o, r.attn,
             r.jac, r.dq, r.dk, r.dv);
#endif
  }
  return r;
}

// Written to a temporary name, synced and renamed (base/atomic_file.h): OUT.h5 is
// complete or absent, and a failed write leaves no temporary behind.
void write_outputs(const std::string& out_path, const Inputs& in, const Outputs& r) {
  const AttentionShape& sh = in.sh;
  const std::string tmp = temp_path_for(out_path);
  TempFileGuard guard(tmp);
  {
    h5::File f = h5::File::create(tmp);
    write_array(f, "o", {sh.B, sh.H, sh.Nq, sh.dv}, r.o.data(), "attention output [B,H,Nq,dv]");
    if (in.have_do) {
      write_array(f, "dq", in.q.dims, r.dq.data(), "gradient of the loss sum(o * do) by q [B,H,Nq,d]");
      write_array(f, "dk", in.k.dims, r.dk.data(), "gradient by k [B,H,Nk,d]");
      write_array(f, "dv", in.v.dims, r.dv.data(), "gradient by v [B,H,Nk,dv]");
    }
    const std::vector<float> af(r.attn.begin(), r.attn.end()), jf(r.jac.begin(), r.jac.end());
    write_array(f, "attn_fro", {sh.B, sh.H}, af.data(), "||phi(S)||_F per batch and head [B,H]");
    write_array(f, "jac_fro", {sh.B, sh.H}, jf.data(), "||d phi(S) / dS||_F per batch and head [B,H]");
    f.close();
  }
  commit_file(tmp, out_path);
  guard.release();
}

int run(int argc, char** argv) {
  std::string in_path, out_path, act, scale, device;
  int degree = 1;
  const std::string act_help = join(activation_names(), " | ", " | ") + " (required)";
  std::vector<std::string> with_degree, with_scale;
  for (const ActivationInfo& i : kActivations) {
    if (i.takes_degree) with_degree.emplace_back(i.name);
    if (i.takes_scale) with_scale.emplace_back(i.name);
  }
  const std::string degree_help =
      join(with_degree, "/", "/") + " degree p in " + std::to_string(kMinDegree) + ".." + std::to_string(kMaxDegree);
  const std::string scale_help =
      join(with_scale, "/", "/") + " scale: " + join(scale_names(), " | ", " | ") + " | a number";
  po::options_description opts("attnsweep attention IN.h5 --out OUT.h5 --activation A [options]");
  opts.add_options()("help,h", "this help")("out", po::value(&out_path), "output HDF5 file (required)")(
      "activation", po::value(&act), act_help.c_str())("degree", po::value(&degree)->default_value(1),
                                                       degree_help.c_str())(
      "scale", po::value(&scale)->default_value("none"), scale_help.c_str())(
      "causal", "causal mask: query i attends keys j <= i + Nk - Nq")(
      "device", po::value(&device)->default_value("cpu"), "cpu | cuda");
  po::options_description hidden;
  hidden.add_options()("input", po::value(&in_path));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("input", 1);
  po::variables_map vm;  // argv[0] ("attention") plays the program name
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "attnsweep attention: " << e.what() << "\n" << opts;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts
              << "Reads q [B,H,Nq,d], k [B,H,Nk,d], v [B,H,Nk,dv], optional do [B,H,Nq,dv] and key_mask [B,Nk]\n"
                 "from IN.h5; writes o, dq, dk, dv (with do), attn_fro and jac_fro [B,H] (float32) to OUT.h5.\n";
    return 0;
  }
  try {
    if (in_path.empty()) throw InputError("missing input file IN.h5");
    if (out_path.empty()) throw InputError("missing --out OUT.h5");
    if (act.empty()) throw InputError("missing --activation");
    AttentionSpec spec;
    spec.act = parse_activation(act, degree, scale);
    spec.causal = vm.count("causal") > 0;
    spec.collect_norms = true;
    check_output_path(out_path, in_path);
    if (device != "cpu" && device != "cuda") throw InputError("--device: expected cpu or cuda, got \"" + device + "\"");
#ifndef ATTNSWEEP_ATTENTION_CUDA
    if (device == "cuda") throw InputError("--device cuda: this attnsweep was built without the CUDA backend");
#endif
    const Inputs in = read_inputs(in_path);
    write_outputs(out_path, in, compute(spec, in, device));
    return 0;
  } catch (const InputError& e) {
    std::cerr << "attnsweep attention: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "attnsweep attention: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace
}  // namespace attnsweep

// argv[0] is "attention"; called by app/main.cpp.
int cmd_attention(int argc, char** argv) {
  return attnsweep::run(argc, argv);
}
