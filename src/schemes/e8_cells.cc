#include "schemes/e8_cells.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <vector>

#include "schemes/e8_grid.h"

namespace qrepack::e8 {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Box {
  std::array<double, 4> lo, hi;
};

// The q-range of level l widened by kCellSlack: [0, 4], [4, 8], ..., [24, 28.5], [28.5, inf).
Box cell_box(int cell) {
  Box b;
  for (int k = 0; k < 4; ++k) {
    const int l = (cell >> (3 * k)) & 7;
    const double lo = l == 7 ? 28.5 : 4.0 * l;
    const double hi = l == 7 ? kInf : l == 6 ? 28.5 : 4.0 * l + 4.0;
    b.lo[static_cast<std::size_t>(k)] = std::max(0.0, lo - kCellSlack);
    b.hi[static_cast<std::size_t>(k)] = hi + kCellSlack;
  }
  return b;
}

using Entries = std::array<std::array<double, 4>, kGridSize>;

Entries entries() {
  Entries e{};
  for (int j = 0; j < kGridSize; ++j) {
    for (int k = 0; k < 4; ++k)
      e[static_cast<std::size_t>(j)][static_cast<std::size_t>(k)] = level_value(grid_level(j, k));
  }
  return e;
}

double norm2(const std::array<double, 4>& g) {
  return g[0] * g[0] + g[1] * g[1] + g[2] * g[2] + g[3] * g[3];
}

// min over the box of |q - a|^2 - |q - b|^2 = |a|^2 - |b|^2 - 2 q.(a - b): linear in q, so
// each coordinate takes its least at an end (minus infinity at an open end).
double least_gap(const Box& box, const std::array<double, 4>& a, const std::array<double, 4>& b) {
  double v = norm2(a) - norm2(b);
  for (std::size_t k = 0; k < 4; ++k) {
    const double coef = -2.0 * (a[k] - b[k]);
    if (coef > 0) v += coef * box.lo[k];
    if (coef < 0) v += std::isinf(box.hi[k]) ? -kInf : coef * box.hi[k];
  }
  return v;
}

// The entries no other one beats by more than the margin everywhere in the box, ascending.
// Challengers are tried nearest to the box's middle first, so most entries fall at once.
std::vector<int> undominated(const Box& box, const Entries& e) {
  std::array<double, 4> mid;
  for (std::size_t k = 0; k < 4; ++k) {
    mid[k] = std::isinf(box.hi[k]) ? box.lo[k] + 2.0 : (box.lo[k] + box.hi[k]) / 2;
  }
  std::array<int, kGridSize> order;
  std::iota(order.begin(), order.end(), 0);
  std::array<double, kGridSize> dist;
  for (std::size_t j = 0; j < dist.size(); ++j) {
    std::array<double, 4> d;
    for (std::size_t k = 0; k < 4; ++k) d[k] = mid[k] - e[j][k];
    dist[j] = norm2(d);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return dist[static_cast<std::size_t>(a)] < dist[static_cast<std::size_t>(b)];
  });
  std::vector<int> out;
  for (int j = 0; j < kGridSize; ++j) {
    bool beaten = false;
    for (int c : order) {
      if (c != j && least_gap(box, e[static_cast<std::size_t>(j)], e[static_cast<std::size_t>(c)]) >
                        kDominanceMargin) {
        beaten = true;
        break;
      }
    }
    if (!beaten) out.push_back(j);
  }
  return out;
}

constexpr std::size_t kRoom = std::size_t{kCells} * (kGridSize / kChunk);

std::mutex& build_lock() {
  static std::mutex m;
  return m;
}

const Entries& grid_entries() {
  static const Entries e = entries();
  return e;
}

}  // namespace

// Lists are laid out one after another in the order they are first used (the cells a weight
// matrix touches stay close together); the room is never freed (one per process) and only
// the pages of lists built are touched.
CellLists::CellLists() : chunks_(new Chunk[kRoom]) {
  for (auto& c : count_) c.store(0, std::memory_order_relaxed);
}

std::uint32_t CellLists::build(int cell) const {
  const std::lock_guard<std::mutex> lock(build_lock());
  auto& count = count_[static_cast<std::size_t>(cell)];
  if (const std::uint32_t built = count.load(std::memory_order_acquire); built != 0) return built;
  const Entries& e = grid_entries();
  std::vector<int> list = undominated(cell_box(cell), e);
  while (list.size() < kMinChunks * kChunk || list.size() % kChunk != 0) {
    list.push_back(list.back());
  }
  Chunk* out = chunks_ + used_;
  first_[static_cast<std::size_t>(cell)] = static_cast<std::uint32_t>(used_);
  used_ += list.size() / kChunk;
  for (std::size_t i = 0; i < list.size(); ++i) {
    Chunk& c = out[i / kChunk];
    const std::size_t lane = i % kChunk;
    const auto& g = e[static_cast<std::size_t>(list[i])];
    c.index[lane] = static_cast<std::uint8_t>(list[i]);
    for (std::size_t k = 0; k < 4; ++k) c.g[k][lane] = static_cast<std::int8_t>(g[k]);
    c.g2[lane] = static_cast<float>(norm2(g));
  }
  const auto n = static_cast<std::uint32_t>(list.size() / kChunk);
  count.store(n, std::memory_order_release);
  return n;
}

const CellLists& cell_lists() {
  static const CellLists* lists = new CellLists();  // never destroyed: workers may outlive main
  return *lists;
}

}  // namespace qrepack::e8
