// Reads every tensor reachable from a loaded .pt tree, as consumers do, with an explicit
// work list (the loader has already bounded the tree's paths and depth).
#pragma once

#include <vector>

#include "qrepack/io/torch_pt.h"
#include "qrepack/io/torch_values.h"

namespace qrepack::fuzz {

inline void read_every_tensor(const TorchFile& f) {
  std::vector<const PtValue*> todo{&f.root()};
  while (!todo.empty()) {
    const PtValue* v = todo.back();
    todo.pop_back();
    if (const auto* t = std::get_if<PtTensor>(&v->v)) {
      (void)read_bytes(f, *t);
    } else if (const auto* l = std::get_if<PtList>(&v->v)) {
      for (const auto& x : *l) todo.push_back(x.get());
    } else if (const auto* tu = std::get_if<PtValue::Tuple>(&v->v)) {
      for (const auto& x : tu->items) todo.push_back(x.get());
    } else if (const auto* d = std::get_if<PtDict>(&v->v)) {
      for (const auto& [k, x] : *d) todo.push_back(x.get());
    }
  }
}

}  // namespace qrepack::fuzz
