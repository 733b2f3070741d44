// Einsum equation parsing, shared by the schema (shape inference, cost) and the CPU kernel.
//
//   "bij,bjk->bik"   explicit output        "ij,jk"   implicit: labels seen once, sorted
//   "...ij,...jk"    ellipsis: the leading dims, broadcast across operands and placed first
//   "ii->i"          a label repeated in one operand takes the diagonal
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "ir/op_schema.h"

namespace fusec {

struct EinsumSpec {
  /// Per operand, the label of each of its dims (ellipsis dims expanded). Letters a-z are labels
  /// 0-25, A-Z 26-51; ellipsis dim i (of the widest ellipsis, right-aligned) is 52 + i.
  std::vector<std::vector<int>> inputs;
  std::vector<int> output;
  int ellipsis_rank = 0;
};

inline int einsum_letter(char ch) {
  if (ch >= 'a' && ch <= 'z') return ch - 'a';
  if (ch >= 'A' && ch <= 'Z') return 26 + (ch - 'A');
  return -1;
}

/// Parses `equation` for operands of the given ranks; fails (naming the node) on a malformed
/// equation or a rank that does not fit its term.
inline EinsumSpec parse_einsum(std::string equation, const std::vector<size_t>& ranks, const NodeAttrs& where) {
  equation.erase(std::remove(equation.begin(), equation.end(), ' '), equation.end());
  std::string lhs = equation, rhs;
  bool explicit_out = false;
  if (auto arrow = equation.find("->"); arrow != std::string::npos) {
    lhs = equation.substr(0, arrow);
    rhs = equation.substr(arrow + 2);
    explicit_out = true;
  }
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ranks.size())
    where.fail("equation '" + equation + "' has " + std::to_string(terms.size()) + " operands but the node has " +
               std::to_string(ranks.size()) + " inputs");

  // Letters of a term, with -2 marking where its ellipsis is.
  auto scan = [&](const std::string& term) {
    std::vector<int> out;
    bool seen_ellipsis = false;
    for (size_t i = 0; i < term.size(); ++i) {
      if (term.compare(i, 3, "...") == 0) {
        if (seen_ellipsis) where.fail("equation '" + equation + "' has two ellipses in one term");
        seen_ellipsis = true;
        out.push_back(-2);
        i += 2;
        continue;
      }
      int l = einsum_letter(term[i]);
      if (l < 0) where.fail("equation '" + equation + "' has an invalid character '" + term[i] + "'");
      out.push_back(l);
    }
    return out;
  };

  EinsumSpec spec;
  std::vector<std::vector<int>> scanned;
  for (size_t k = 0; k < terms.size(); ++k) {
    scanned.push_back(scan(terms[k]));
    const auto& s = scanned.back();
    const bool has_ell = std::find(s.begin(), s.end(), -2) != s.end();
    const int letters = static_cast<int>(s.size()) - (has_ell ? 1 : 0);
    const int ell = static_cast<int>(ranks[k]) - letters;
    if (ell < 0 || (!has_ell && ell != 0))
      where.fail("equation term '" + terms[k] + "' does not fit input " + std::to_string(k) + " of rank " +
                 std::to_string(ranks[k]));
    spec.ellipsis_rank = std::max(spec.ellipsis_rank, ell);
  }
  for (size_t k = 0; k < terms.size(); ++k) {
    std::vector<int> labels;
    const int ell = static_cast<int>(ranks[k]) - static_cast<int>(scanned[k].size()) +
                    (std::find(scanned[k].begin(), scanned[k].end(), -2) != scanned[k].end() ? 1 : 0);
    for (int l : scanned[k]) {
      if (l != -2) {
        labels.push_back(l);
        continue;
      }
      for (int i = 0; i < ell; ++i) labels.push_back(52 + spec.ellipsis_rank - ell + i);
    }
    spec.inputs.push_back(std::move(labels));
  }

  std::vector<int> count(52, 0);
  for (const auto& s : scanned)
    for (int l : s)
      if (l >= 0) ++count[l];
  if (explicit_out) {
    for (int l : scan(rhs)) {
      if (l == -2) {
        for (int i = 0; i < spec.ellipsis_rank; ++i) spec.output.push_back(52 + i);
        continue;
      }
      if (count[l] == 0) where.fail("equation '" + equation + "': output label '" + rhs + "' is not in any input");
      if (std::find(spec.output.begin(), spec.output.end(), l) != spec.output.end())
        where.fail("equation '" + equation + "' repeats a label in its output");
      spec.output.push_back(l);
    }
  } else {
    for (int i = 0; i < spec.ellipsis_rank; ++i) spec.output.push_back(52 + i);
    // Labels seen exactly once, in ASCII order (upper case sorts before lower case).
    for (char ch = 'A'; ch <= 'Z'; ++ch)
      if (count[einsum_letter(ch)] == 1) spec.output.push_back(einsum_letter(ch));
    for (char ch = 'a'; ch <= 'z'; ++ch)
      if (count[einsum_letter(ch)] == 1) spec.output.push_back(einsum_letter(ch));
  }
  return spec;
}

}  // namespace fusec
