#include "base/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace attnsweep {

std::string sha256_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1 || len != 32)
    throw std::runtime_error("sha256_hex: libcrypto's EVP_Digest failed");
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(hex[md[i] >> 4]);
    out.push_back(hex[md[i] & 0xf]);
  }
  return out;
}

}  // namespace attnsweep
