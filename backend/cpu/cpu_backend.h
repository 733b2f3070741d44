// The CPU reference backend: every op, correct first; every other backend is checked against it.
#pragma once
#include "backend/backend.h"

namespace fusec::cpu {

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::vector<UnsupportedNode> unsupported(const Graph& g) const override;
  std::unique_ptr<Executable> compile(const Graph& g) override;
};

}  // namespace fusec::cpu
