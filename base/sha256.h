// SHA-256 of a byte string as 64 lowercase hex digits: cell ids, grid hashes and fusion
// keys (coordinator/grid.h). OpenSSL's libcrypto computes it; the test vectors of FIPS
// 180-4 in tests/unit/test_grid.cpp pin the digest, so ids stay what they were.
#pragma once

#include <string>
#include <string_view>

namespace attnsweep {

std::string sha256_hex(std::string_view data);

}  // namespace attnsweep
