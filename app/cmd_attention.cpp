// attnsweep attention IN.h5 --out OUT.h5 --activation A [--degree P] [--scale S]
//                    [--causal] [--device cpu|cuda]
// One attention call, forward (+ backward when IN.h5 has `do`), for checking the kernels
// against other implementations (tests/integration/attention_torch.py). contract.md:
// reads q [B,H,Nq,d], k [B,H,Nk,d], v [B,H,Nk,dv], optional do [B,H,Nq,dv] and
// key_mask [B,Nk] (1 = attend, 0 = padding), float32 or float64; writes o, dq, dk, dv
// (with do), attn_fro and jac_fro [B,H], float32. Exit 2 on bad usage or input (nothing
// written), 1 when the output cannot be written.
#include "kernels/attention.h"

#if defined(ATTNSWEEP_HAVE_CUDA) && __has_include("kernels/attention_cuda.h")
#include "kernels/attention_cuda.h"
#define ATTNSWEEP_ATTENTION_CUDA 1
#include <cuda_runtime_api.h>
#endif

#include <hdf5.h>

#include <boost/program_options.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnsweep {
namespace {

namespace po = boost::program_options;

// Bad input: exit 2, nothing written.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An HDF5 identifier closed on scope exit.
class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Handle() {
    if (id_ >= 0) close_(id_);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

std::string dims_str(const std::vector<int64_t>& d) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < d.size(); ++i) o << (i ? "," : "") << d[i];
  o << "]";
  return o.str();
}

struct Array {
  std::vector<int64_t> dims;
  std::vector<float> data;
};

bool has_dataset(hid_t file, const char* name) { return H5Lexists(file, name, H5P_DEFAULT) > 0; }

// Reads a float32/float64 dataset as float32; rejects other types, ranks and non-finite values.
Array read_array(hid_t file, const std::string& path, const char* name, int rank) {
  const std::string where = path + ": /" + name;
  H5Handle ds(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) throw InputError(where + ": cannot open dataset");
  H5Handle type(H5Dget_type(ds.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_FLOAT)
    throw InputError(where + ": expected float32 or float64 data");
  H5Handle space(H5Dget_space(ds.get()), H5Sclose);
  const int r = H5Sget_simple_extent_ndims(space.get());
  if (r != rank) throw InputError(where + ": expected rank " + std::to_string(rank) + ", got " + std::to_string(r));
  std::vector<hsize_t> hd(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), hd.data(), nullptr);
  Array a;
  size_t n = 1;
  for (hsize_t x : hd) {
    a.dims.push_back(static_cast<int64_t>(x));
    n *= static_cast<size_t>(x);
  }
  a.data.resize(n);
  if (n > 0 && H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.data.data()) < 0)
    throw InputError(where + ": cannot read");
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(a.data[i]))
      throw InputError(where + ": non-finite value (NaN or Inf, or beyond float32) at flat index " +
                       std::to_string(i));
  return a;
}

void write_array(hid_t file, const std::string& path, const char* name, const std::vector<int64_t>& dims,
                 const float* data) {
  std::vector<hsize_t> hd(dims.begin(), dims.end());
  H5Handle space(H5Screate_simple(static_cast<int>(hd.size()), hd.data(), nullptr), H5Sclose);
  H5Handle ds(H5Dcreate2(file, name, H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!ds.ok() || H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw std::runtime_error(path + ": cannot write dataset /" + name);
}

ActivationSpec parse_activation(const std::string& act, int degree, const std::string& scale) {
  ActivationSpec a;
  if (act == "softmax") a.activation = Activation::softmax;
  else if (act == "poly") a.activation = Activation::poly;
  else if (act == "relu") a.activation = Activation::relu;
  else if (act == "sigmoid") a.activation = Activation::sigmoid;
  else throw InputError("--activation: expected softmax, poly, relu or sigmoid, got \"" + act + "\"");
  if (degree < 1) throw InputError("--degree: must be >= 1, got " + std::to_string(degree));
  a.degree = degree;
  if (scale == "none") a.scale = ScaleKind::none;
  else if (scale == "inv_sqrt_n") a.scale = ScaleKind::inv_sqrt_n;
  else if (scale == "inv_n") a.scale = ScaleKind::inv_n;
  else {
    char* end = nullptr;
    const double v = std::strtod(scale.c_str(), &end);
    if (scale.empty() || end != scale.c_str() + scale.size() || !std::isfinite(v))
      throw InputError("--scale: expected none, inv_sqrt_n, inv_n or a number, got \"" + scale + "\"");
    a.scale = ScaleKind::value;
    a.scale_value = v;
  }
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
  try {
    float* dQ = up(q.data);
    float* dK = up(k.data);
    float* dV = up(v.data);
    float* dM = mask != nullptr ? up(mask->data) : nullptr;
    float* dO_ = static_cast<float*>(dev(o.size() * sizeof(float)));
    float* dL = static_cast<float*>(dev(static_cast<size_t>(sh.B * sh.H * sh.Nq) * sizeof(float)));
    double* dA = static_cast<double*>(dev(attn.size() * sizeof(double)));
    double* dJ = static_cast<double*>(dev(jac.size() * sizeof(double)));
    attention_forward_cuda(spec, sh, CudaDType::f32, dQ, dK, dV, dM, dO_, dL, dA, dJ, ws, nullptr);
    if (dO != nullptr) {
      float* dGo = up(dO->data);
      float* gq = static_cast<float*>(dev(dq.size() * sizeof(float)));
      float* gk = static_cast<float*>(dev(dk.size() * sizeof(float)));
      float* gv = static_cast<float*>(dev(dv.size() * sizeof(float)));
      attention_backward_cuda(spec, sh, CudaDType::f32, dQ, dK, dV, dM, dO_, dGo, dL, gq, gk, gv, ws, nullptr);
      cuda_check(cudaMemcpy(dq.data(), gq, dq.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
      cuda_check(cudaMemcpy(dk.data(), gk, dk.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
      cuda_check(cudaMemcpy(dv.data(), gv, dv.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    }
    cuda_check(cudaMemcpy(o.data(), dO_, o.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    cuda_check(cudaMemcpy(attn.data(), dA, attn.size() * sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy");
    cuda_check(cudaMemcpy(jac.data(), dJ, jac.size() * sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy");
  } catch (...) {
    for (void* p : allocs) cudaFree(p);
    attention_cuda_workspace_destroy(ws);
    throw;
  }
  for (void* p : allocs) cudaFree(p);
  attention_cuda_workspace_destroy(ws);
}
#endif

int run(int argc, char** argv) {
  std::string in_path, out_path, act, scale, device;
  int degree = 1;
  po::options_description opts("attnsweep attention IN.h5 --out OUT.h5 --activation A [options]");
  opts.add_options()("help,h", "this help")("out", po::value(&out_path), "output HDF5 file (required)")(
      "activation", po::value(&act), "softmax | poly | relu | sigmoid (required)")(
      "degree", po::value(&degree)->default_value(1), "poly degree p >= 1")(
      "scale", po::value(&scale)->default_value("none"), "poly/relu scale: none | inv_sqrt_n | inv_n | a number")(
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
    if (device != "cpu" && device != "cuda") throw InputError("--device: expected cpu or cuda, got \"" + device + "\"");
#ifndef ATTNSWEEP_ATTENTION_CUDA
    if (device == "cuda") throw InputError("--device cuda: this attnsweep was built without the CUDA backend");
#endif

    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // our messages name file and dataset
    Array q, k, v, dO, mask;
    bool have_do = false, have_mask = false;
    {
      if (H5Fis_hdf5(in_path.c_str()) <= 0) throw InputError(in_path + ": not an HDF5 file (or missing)");
      H5Handle f(H5Fopen(in_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
      if (!f.ok()) throw InputError(in_path + ": cannot open");
      for (const char* name : {"q", "k", "v"})
        if (!has_dataset(f.get(), name)) throw InputError(in_path + ": missing dataset /" + name);
      q = read_array(f.get(), in_path, "q", 4);
      k = read_array(f.get(), in_path, "k", 4);
      v = read_array(f.get(), in_path, "v", 4);
      have_do = has_dataset(f.get(), "do");
      have_mask = has_dataset(f.get(), "key_mask");
      if (have_do) dO = read_array(f.get(), in_path, "do", 4);
      if (have_mask) mask = read_array(f.get(), in_path, "key_mask", 2);
    }
    AttentionShape sh;
    sh.B = q.dims[0];
    sh.H = q.dims[1];
    sh.Nq = q.dims[2];
    sh.d = q.dims[3];
    sh.Nk = k.dims[2];
    sh.dv = v.dims[3];
    auto expect = [&](const char* name, const std::vector<int64_t>& got, const std::vector<int64_t>& want,
                      const char* names) {
      if (got != want)
        throw InputError(in_path + ": /" + name + ": shape " + dims_str(got) + ", expected " + dims_str(want) + " " +
                         names + " (from q " + dims_str(q.dims) + ")");
    };
    expect("k", k.dims, {sh.B, sh.H, sh.Nk, sh.d}, "[B,H,Nk,d]");
    expect("v", v.dims, {sh.B, sh.H, sh.Nk, sh.dv}, "[B,H,Nk,dv]");
    if (have_do) expect("do", dO.dims, {sh.B, sh.H, sh.Nq, sh.dv}, "[B,H,Nq,dv]");
    if (have_mask) {
      expect("key_mask", mask.dims, {sh.B, sh.Nk}, "[B,Nk]");
      for (size_t i = 0; i < mask.data.size(); ++i)
        if (mask.data[i] != 0.0f && mask.data[i] != 1.0f)
          throw InputError(in_path + ": /key_mask: values must be 0 or 1, got " + std::to_string(mask.data[i]) +
                           " at flat index " + std::to_string(i));
    }
    if (sh.d == 0) throw InputError(in_path + ": /q: d = 0");

    const int64_t BH = sh.B * sh.H;
    std::vector<float> o(static_cast<size_t>(BH * sh.Nq * sh.dv)), lse(static_cast<size_t>(BH * sh.Nq));
    std::vector<float> dq(have_do ? q.data.size() : 0), dk(have_do ? k.data.size() : 0),
        dv(have_do ? v.data.size() : 0);
    std::vector<double> attn(static_cast<size_t>(BH)), jac(static_cast<size_t>(BH));
    const float* m = have_mask ? mask.data.data() : nullptr;
    if (device == "cpu") {
      attention_forward_cpu(spec, sh, q.data.data(), k.data.data(), v.data.data(), m, o.data(), lse.data(),
                            attn.data(), jac.data());
      if (have_do)
        attention_backward_cpu(spec, sh, q.data.data(), k.data.data(), v.data.data(), m, o.data(), dO.data.data(),
                               lse.data(), dq.data(), dk.data(), dv.data());
    } else {
#ifdef ATTNSWEEP_ATTENTION_CUDA
      run_cuda(spec, sh, q, k, v, have_mask ? &mask : nullptr, have_do ? &dO : nullptr, o, attn, jac, dq, dk, dv);
#endif
    }

    // Written to a temporary name and renamed: OUT.h5 is complete or absent.
    const std::string tmp = out_path + ".tmp";
    {
      H5Handle f(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
      if (!f.ok()) throw std::runtime_error(out_path + ": cannot create " + tmp);
      write_array(f.get(), out_path, "o", {sh.B, sh.H, sh.Nq, sh.dv}, o.data());
      if (have_do) {
        write_array(f.get(), out_path, "dq", q.dims, dq.data());
        write_array(f.get(), out_path, "dk", k.dims, dk.data());
        write_array(f.get(), out_path, "dv", v.dims, dv.data());
      }
      const std::vector<float> af(attn.begin(), attn.end()), jf(jac.begin(), jac.end());
      write_array(f.get(), out_path, "attn_fro", {sh.B, sh.H}, af.data());
      write_array(f.get(), out_path, "jac_fro", {sh.B, sh.H}, jf.data());
    }
    if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
      std::remove(tmp.c_str());
      throw std::runtime_error(out_path + ": cannot rename " + tmp);
    }
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
int cmd_attention(int argc, char** argv) { return attnsweep::run(argc, argv); }
