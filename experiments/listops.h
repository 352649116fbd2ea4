// Long Range Arena's ListOps (Nangia & Bowman 2018; Tay et al. 2021), generated here
// with a seed. An expression is an operator applied to 2..arity arguments, each a digit
// or (with probability 1/4, while the nesting allows) another expression:
//   [MAX 2 9 [MIN 4 7 ] 0 ]  = 9
// MAX, MIN, MED (the median; for an even count the mean of the two middle values rounded
// down, as LRA's int(np.median(...))), SM (sum modulo 10). The label (0..9) is the value.
// Tokens, as LRA writes them: the ten digits, "[MAX", "[MIN", "[MED", "[SM" and "]",
// plus a padding token (id 0) after the expression up to the prompt length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnsweep {

constexpr int32_t kListOpsPad = 0;     // padding
constexpr int32_t kListOpsDigit0 = 1;  // digits d -> 1 + d
constexpr int32_t kListOpsMax = 11, kListOpsMin = 12, kListOpsMed = 13, kListOpsSum = 14;
constexpr int32_t kListOpsClose = 15;  // "]"
constexpr int64_t kListOpsVocab = 16;

struct ListOpsSpec {
  int64_t max_length = 128;  // the prompt length: longer expressions are drawn again
  int64_t min_length = 32;   // shorter ones too (LRA: 500..2000)
  int64_t depth = 10;        // most nested operators (1: one flat [OP d d ...])
  int64_t arity = 10;        // most arguments of an operator (at least 2)
  uint64_t data_seed = 0;
};

struct ListOpsSample {
  std::vector<int32_t> tokens;  // the expression, unpadded
  int32_t label = 0;
};

// Sample `index` of split 0 (train) or 1 (test): a pure function of (spec, split, index).
// Throws when no expression of a length in [min_length, max_length] turns up in 10^6 draws.
ListOpsSample listops_sample(const ListOpsSpec& spec, int split, int64_t index);

// The longest expression depth and arity allow (saturating at 2^62).
int64_t listops_longest(int64_t depth, int64_t arity);

// "[MAX", "7", "]", "<pad>": the text of a token id.
std::string listops_token_text(int32_t id);

}  // namespace attnsweep
