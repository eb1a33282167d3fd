#include "qrepack/io/torch_pt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "io/json_strict.h"
#include "qrepack/core/checked.h"

namespace qrepack {
namespace {

using V = PtValue;
using Ptr = std::shared_ptr<PtValue>;

Ptr make(auto x) {
  auto p = std::make_shared<PtValue>();
  p->v = std::move(x);
  return p;
}

Error bad(const std::string& what, std::uint64_t at) {
  return Error(ErrorKind::kPickleInvalid, what).with_rule("pickle.structure").at_offset(at);
}
// A list or dict inside itself, directly or through other containers: Python can build one, but
// no state dict or Omega pack holds one, and its nesting has no end, so it falls under the
// depth cap's rule wherever it is found.
Error cycle(const std::string& what) {
  return Error(ErrorKind::kLimitExceeded, what + ": a cycle, nesting without end")
      .with_rule("pickle.max_depth");
}
const char* container_name(const PtValue& v) { return v.is_dict() ? "dict" : "list"; }
Error forbidden(const std::string& what, std::uint64_t at) {
  return Error(ErrorKind::kPickleForbidden, what).with_rule("pickle.weights_only").at_offset(at);
}

bool allowed_global(const std::string& m, const std::string& n) {
  if (m == "collections" && n == "OrderedDict") return true;
  if (m == "torch._utils" && (n == "_rebuild_tensor_v2" || n == "_rebuild_parameter")) return true;
  return m == "torch" && dtype_from_torch_storage(n).has_value();
}

const char* opcode_name(std::uint8_t op) {
  switch (op) {
    case 'c':
      return "GLOBAL";
    case 'R':
      return "REDUCE";
    case 'b':
      return "BUILD";
    case 0x93:
      return "STACK_GLOBAL";
    case 0x8c:
      return "SHORT_BINUNICODE";
    case 0x94:
      return "MEMOIZE";
    case 0x95:
      return "FRAME";
    case 'i':
      return "INST";
    case 'o':
      return "OBJ";
    case 0x81:
      return "NEWOBJ";
    case 'd':
      return "DICT";
    case 'l':
      return "LIST";
    default:
      return "an opcode outside the weights_only set";
  }
}

class Unpickler {
 public:
  explicit Unpickler(std::span<const std::uint8_t> b) : b_(b) {}

  Result<Ptr> run() {
    while (true) {
      if (pos_ >= b_.size()) return bad("pickle ends without STOP", pos_);
      const std::uint64_t at = pos_;
      const std::uint8_t op = b_[pos_++];
      if (stack_.size() > kMaxPickleStack) return bad("pickle stack too deep", at);
      switch (op) {
        case 0x80:
          QR_TRY(need(1, at));
          ++pos_;
          break;  // PROTO
        case '.': {
          QR_ASSIGN_OR_RETURN(v, pop(at));
          return v;
        }
        case 'c': {
          QR_ASSIGN_OR_RETURN(m, line(at));
          QR_ASSIGN_OR_RETURN(n, line(at));
          if (!allowed_global(m, n)) {
            return forbidden(fmt::format("global '{}.{}' is not allowed (weights_only loads only "
                                         "tensors, containers and scalars)",
                                         m, n),
                             at);
          }
          stack_.push_back(make(V::Global{m, n}));
          break;
        }
        case '(':
          marks_.push_back(stack_.size());
          break;
        case ')':
          stack_.push_back(make(V::Tuple{}));
          break;
        case 't': {
          QR_ASSIGN_OR_RETURN(items, pop_mark(at));
          stack_.push_back(make(V::Tuple{std::move(items)}));
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {
          const std::size_t n = op - 0x84u;
          if (stack_.size() - floor() < n) {
            return bad("TUPLE1/2/3 takes more items than lie above the last MARK", at);
          }
          PtList items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          stack_.push_back(make(V::Tuple{std::move(items)}));
          break;
        }
        case ']':
          stack_.push_back(container(PtList{}));
          break;
        case '}':
          stack_.push_back(container(PtDict{}));
          break;
        case 'a': {
          QR_ASSIGN_OR_RETURN(v, pop(at));
          QR_ASSIGN_OR_RETURN(l, top_as<PtList>(at, "APPEND"));
          QR_TRY(not_into_itself(std::span(&v, 1), stack_.back().get(), "APPEND", at));
          l->push_back(std::move(v));
          break;
        }
        case 'e': {
          QR_ASSIGN_OR_RETURN(items, above_mark(at));
          QR_ASSIGN_OR_RETURN(l, below_mark_as<PtList>(at, "APPENDS"));
          QR_TRY(not_into_itself(items, below_mark(), "APPENDS", at));
          l->insert(l->end(), std::make_move_iterator(items.begin()),
                    std::make_move_iterator(items.end()));
          drop_mark();
          break;
        }
        case 's': {
          QR_ASSIGN_OR_RETURN(v, pop(at));
          QR_ASSIGN_OR_RETURN(k, pop(at));
          QR_ASSIGN_OR_RETURN(d, top_as<PtDict>(at, "SETITEM"));
          const Ptr kv[] = {k, v};
          QR_TRY(not_into_itself(kv, stack_.back().get(), "SETITEM", at));
          if (!d->add(std::move(k), std::move(v))) return duplicate_key(at);
          break;
        }
        case 'u': {
          QR_ASSIGN_OR_RETURN(items, above_mark(at));
          if (items.size() % 2) return bad("SETITEMS with an odd number of items", at);
          QR_ASSIGN_OR_RETURN(d, below_mark_as<PtDict>(at, "SETITEMS"));
          QR_TRY(not_into_itself(items, below_mark(), "SETITEMS", at));
          for (std::size_t i = 0; i < items.size(); i += 2) {
            if (!d->add(std::move(items[i]), std::move(items[i + 1]))) return duplicate_key(at);
          }
          drop_mark();
          break;
        }
        case 'N':
          stack_.push_back(make(V::None{}));
          break;
        case 0x88:
          stack_.push_back(make(true));
          break;
        case 0x89:
          stack_.push_back(make(false));
          break;
        case 'J': {
          QR_TRY(need(4, at));
          stack_.push_back(make(static_cast<std::int64_t>(static_cast<std::int32_t>(le(4)))));
          break;
        }
        case 'K': {
          QR_TRY(need(1, at));
          stack_.push_back(make(static_cast<std::int64_t>(le(1))));
          break;
        }
        case 'M': {
          QR_TRY(need(2, at));
          stack_.push_back(make(static_cast<std::int64_t>(le(2))));
          break;
        }
        case 0x8a: {  // LONG1
          QR_TRY(need(1, at));
          const std::size_t n = b_[pos_++];
          if (n > 8) return bad("LONG1 wider than 64 bits", at);
          QR_TRY(need(n, at));
          std::uint64_t u = le(n);
          if (n > 0 && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~std::uint64_t{0} << (8 * n);
          stack_.push_back(make(static_cast<std::int64_t>(u)));
          break;
        }
        case 'X': {
          QR_TRY(need(4, at));
          const std::uint64_t n = le(4);
          QR_TRY(need(n, at));
          const auto bytes = b_.subspan(pos_, n);
          if (first_invalid_utf8(bytes)) return bad("BINUNICODE is not valid UTF-8", at);
          stack_.push_back(make(std::string(reinterpret_cast<const char*>(bytes.data()), n)));
          pos_ += n;
          break;
        }
        case 'U': {
          QR_TRY(need(1, at));
          const std::uint64_t n = b_[pos_++];
          QR_TRY(need(n, at));
          stack_.push_back(make(std::string(reinterpret_cast<const char*>(b_.data() + pos_), n)));
          pos_ += n;
          break;
        }
        case 'G': {
          QR_TRY(need(8, at));
          std::uint64_t u = 0;
          for (int i = 0; i < 8; ++i) u = (u << 8) | b_[pos_ + i];  // big-endian
          pos_ += 8;
          double d;
          std::memcpy(&d, &u, 8);
          stack_.push_back(make(d));
          break;
        }
        case 'q':
        case 'r': {
          const int n = op == 'q' ? 1 : 4;
          QR_TRY(need(n, at));
          const auto idx = static_cast<std::uint32_t>(le(n));
          if (stack_.empty()) return bad("BINPUT on an empty stack", at);
          if (memo_.size() > kMaxPickleStack) return bad("memo too large", at);
          memo_[idx] = stack_.back();
          break;
        }
        case 'h':
        case 'j': {
          const int n = op == 'h' ? 1 : 4;
          QR_TRY(need(n, at));
          const auto it = memo_.find(static_cast<std::uint32_t>(le(n)));
          if (it == memo_.end()) return bad("BINGET of an unknown memo slot", at);
          stack_.push_back(it->second);
          break;
        }
        case 'Q': {
          QR_ASSIGN_OR_RETURN(pid, pop(at));
          QR_ASSIGN_OR_RETURN(st, storage_from_pid(*pid, at));
          stack_.push_back(make(std::move(st)));
          break;
        }
        case 'R': {
          QR_ASSIGN_OR_RETURN(args, pop(at));
          QR_ASSIGN_OR_RETURN(fn, pop(at));
          QR_ASSIGN_OR_RETURN(v, reduce(*fn, *args, at));
          stack_.push_back(v);
          break;
        }
        case 'b': {
          QR_ASSIGN_OR_RETURN(state, pop(at));
          if (stack_.empty() || !(stack_.back()->is_dict() || stack_.back()->is_tensor())) {
            return forbidden("BUILD on something other than an OrderedDict or a tensor", at);
          }
          (void)state;  // torch bookkeeping (state_dict _metadata); holds no tensor data
          break;
        }
        default:
          return forbidden(fmt::format("opcode 0x{:02x} ({}) is not allowed", op, opcode_name(op)),
                           at);
      }
    }
  }

 private:
  Status need(std::uint64_t n, std::uint64_t at) const {
    if (pos_ + n > b_.size()) return bad("pickle truncated", at);
    return ok_status();
  }
  std::uint64_t le(std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | b_[pos_ + i];
    pos_ += n;
    return v;
  }
  Result<std::string> line(std::uint64_t at) {
    const std::uint64_t start = pos_;
    while (pos_ < b_.size() && b_[pos_] != '\n') {
      if (pos_ - start > 256) return bad("GLOBAL name too long", at);
      ++pos_;
    }
    if (pos_ >= b_.size()) return bad("GLOBAL without newline", at);
    std::string s(reinterpret_cast<const char*>(b_.data() + start), pos_ - start);
    ++pos_;
    return s;
  }
  // Lists and dicts are the only values a pickle can mutate after creating them, so the only
  // ones that can end up containing themselves; they are remembered to break such cycles.
  Ptr container(auto x) {
    Ptr p = make(std::move(x));
    containers_.push_back(p);
    return p;
  }
  // Stack items at and above this index belong to the innermost MARK.
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  static Error duplicate_key(std::uint64_t at) {
    return Error(ErrorKind::kPickleInvalid, "a dict key is set twice")
        .with_rule("pickle.duplicate_key")
        .at_offset(at);
  }
  Result<Ptr> pop(std::uint64_t at) {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) {
      return bad("pop from an empty stack", at);
    }
    Ptr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Result<PtList> pop_mark(std::uint64_t at) {
    if (marks_.empty()) return bad("no MARK", at);
    const std::size_t m = marks_.back();
    marks_.pop_back();
    PtList items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  // APPENDS and SETITEMS store the items above the last MARK into the list or dict just below
  // it. The items stay on the stack until drop_mark(), so a batch is checked and moved, never
  // copied.
  Result<std::span<Ptr>> above_mark(std::uint64_t at) {
    if (marks_.empty()) return bad("no MARK", at);
    return std::span<Ptr>(stack_).subspan(marks_.back());
  }
  template <typename T>
  Result<T*> below_mark_as(std::uint64_t at, const char* op) {
    const std::size_t m = marks_.back();
    if (m == 0 || !std::holds_alternative<T>(stack_[m - 1]->v)) {
      return forbidden(fmt::format("{} on a value of the wrong type", op), at);
    }
    return &std::get<T>(stack_[m - 1]->v);
  }
  void drop_mark() {
    stack_.resize(marks_.back());
    marks_.pop_back();
  }
  const PtValue* below_mark() const { return stack_[marks_.back() - 1].get(); }
  // A list or dict put inside itself (`self`) is a cycle: nesting without end, which the depth
  // cap would refuse only when the finished tree is walked. Refused as the opcode runs instead,
  // so a flood of such appends (one memoized list appended to itself millions of times through
  // BINGET) costs a few bytes of work, not a list of millions of references.
  Status not_into_itself(std::span<const Ptr> items, const PtValue* self, const char* op,
                         std::uint64_t at) const {
    for (const Ptr& x : items) {
      if (x.get() == self) {
        return cycle(fmt::format("{} puts a {} inside itself", op, container_name(*self)))
            .at_offset(at);
      }
    }
    return ok_status();
  }
  template <typename T>
  Result<T*> top_as(std::uint64_t at, const char* op) {
    if (stack_.empty() || !std::holds_alternative<T>(stack_.back()->v)) {
      return forbidden(fmt::format("{} on a value of the wrong type", op), at);
    }
    return &std::get<T>(stack_.back()->v);
  }
  static const PtList* tuple_items(const PtValue& v) {
    const auto* t = std::get_if<V::Tuple>(&v.v);
    return t ? &t->items : nullptr;
  }
  static std::optional<std::int64_t> as_int(const Ptr& p) {
    const auto* i = std::get_if<std::int64_t>(&p->v);
    return i ? std::optional(*i) : std::nullopt;
  }
  Result<V::Storage> storage_from_pid(const PtValue& pid, std::uint64_t at) {
    const PtList* t = tuple_items(pid);
    if (!t || t->size() != 5)
      return forbidden("persistent id is not a 5-tuple ('storage', ...)", at);
    const auto* tag = std::get_if<std::string>(&(*t)[0]->v);
    const auto* cls = std::get_if<V::Global>(&(*t)[1]->v);
    const auto* key = std::get_if<std::string>(&(*t)[2]->v);
    const auto numel = as_int((*t)[4]);
    if (!tag || *tag != "storage" || !cls || !key || !numel || *numel < 0) {
      return forbidden("persistent id is not ('storage', <Storage class>, key, location, numel)",
                       at);
    }
    const auto dt = dtype_from_torch_storage(cls->name);
    if (cls->module != "torch" || !dt) {
      return forbidden(fmt::format("storage class '{}.{}' is not allowed", cls->module, cls->name),
                       at);
    }
    return V::Storage{*dt, *key, static_cast<std::uint64_t>(*numel)};
  }
  static Result<std::vector<std::uint64_t>> int_tuple(const Ptr& p, const char* what,
                                                      std::uint64_t at) {
    const PtList* t = tuple_items(*p);
    if (!t) return bad(fmt::format("tensor {} is not a tuple", what), at);
    std::vector<std::uint64_t> out;
    for (const Ptr& x : *t) {
      const auto i = as_int(x);
      if (!i || *i < 0) return bad(fmt::format("tensor {} holds a non-negative-integer", what), at);
      out.push_back(static_cast<std::uint64_t>(*i));
    }
    return out;
  }
  Result<Ptr> reduce(const PtValue& fn, const PtValue& args, std::uint64_t at) {
    const auto* g = std::get_if<V::Global>(&fn.v);
    const PtList* a = tuple_items(args);
    if (!g || !a) return forbidden("REDUCE of something other than an allowed global", at);
    if (g->module == "collections") {
      if (!a->empty()) return forbidden("OrderedDict called with arguments", at);
      return container(PtDict{});
    }
    if (g->name == "_rebuild_parameter") {
      if (a->size() != 3 || !(*a)[0]->is_tensor())
        return bad("bad _rebuild_parameter arguments", at);
      return (*a)[0];
    }
    if (g->name == "_rebuild_tensor_v2") {
      if (a->size() != 6 && a->size() != 7)
        return bad("_rebuild_tensor_v2 takes 6 or 7 arguments", at);
      const auto* st = std::get_if<V::Storage>(&(*a)[0]->v);
      const auto off = as_int((*a)[1]);
      if (!st || !off || *off < 0) return bad("_rebuild_tensor_v2: bad storage or offset", at);
      QR_ASSIGN_OR_RETURN(shape, int_tuple((*a)[2], "size", at));
      QR_ASSIGN_OR_RETURN(stride, int_tuple((*a)[3], "stride", at));
      if (shape.size() != stride.size()) return bad("size and stride differ in length", at);
      if (shape.size() > kMaxPtDims) {
        return Error(ErrorKind::kLimitExceeded,
                     fmt::format("tensor of {} dimensions (cap {})", shape.size(), kMaxPtDims))
            .with_rule("pt.max_dims")
            .at_offset(at);
      }
      PtTensor t;
      t.dtype = st->dtype;
      t.storage_key = st->key;
      t.storage_offset = static_cast<std::uint64_t>(*off);
      t.shape = std::move(shape);
      t.stride = std::move(stride);
      auto p = make(std::move(t));
      storage_numel_.emplace_back(p, st->numel);  // keeps the tensor alive even if discarded
      return p;
    }
    return forbidden(fmt::format("calling '{}.{}' is not allowed", g->module, g->name), at);
  }

  std::span<const std::uint8_t> b_;
  std::uint64_t pos_ = 0;
  PtList stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint32_t, Ptr> memo_;
  std::vector<std::weak_ptr<PtValue>> containers_;

 public:
  /// Empties every list and dict this run created: a refused pickle may hold a cycle (a list
  /// appended to itself through the memo), which reference counting alone would never free.
  /// A tree that passed check_tree is acyclic (it refuses a container on its own path).
  void release_all() {
    std::vector<Ptr> children;
    for (const auto& w : containers_) {
      if (Ptr p = w.lock()) p->take_children(children);
    }
    stack_.clear();
    memo_.clear();
    storage_numel_.clear();
  }

  std::vector<std::pair<Ptr, std::uint64_t>> storage_numel_;
  /// Every list and dict the run created (for release_unreachable).
  const std::vector<std::weak_ptr<PtValue>>& containers() const { return containers_; }
};

// Child `i` of a list, tuple or dict (a dict's items as key, value, key, ...), or null past the
// last one or for a scalar.
const PtValue* child_at(const PtValue& v, std::size_t i) {
  if (const auto* l = std::get_if<PtList>(&v.v)) return i < l->size() ? (*l)[i].get() : nullptr;
  if (const auto* t = std::get_if<V::Tuple>(&v.v)) {
    return i < t->items.size() ? t->items[i].get() : nullptr;
  }
  if (const auto* d = std::get_if<PtDict>(&v.v)) {
    if (i / 2 >= d->size()) return nullptr;
    const auto& [k, x] = *(d->begin() + static_cast<std::ptrdiff_t>(i / 2));
    return (i % 2 ? x : k).get();
  }
  return nullptr;
}

// After a pickle passed check_tree: empties the lists and dicts its root does not reach. What
// the root reaches is acyclic, but a pickle may also build a cycle it then drops (two lists
// appended to each other, neither returned), which reference counting would never free. Each
// value is visited once (a set of the reached), so the walk is bounded by the values made.
void release_unreachable(const PtValue& root, const std::vector<std::weak_ptr<PtValue>>& made) {
  std::unordered_set<const PtValue*> reached;
  std::vector<const PtValue*> todo{&root};
  while (!todo.empty()) {
    const PtValue* v = todo.back();
    todo.pop_back();
    if (!reached.insert(v).second) continue;
    for (std::size_t k = 0; const PtValue* c = child_at(*v, k); ++k) todo.push_back(c);
  }
  std::vector<Ptr> dropped;
  for (const auto& w : made) {
    if (Ptr p = w.lock(); p && !reached.contains(p.get())) p->take_children(dropped);
  }
}

// No GLOBAL or storage may survive into the loaded tree (e.g. a pickled class reference), and
// the tree, walked once per path from the root as every consumer walks it, stays within the
// depth, node and tensor-byte caps. Depth first, holding only the containers on the path to the
// current node (at most kMaxPickleDepth + 1, however wide the tree) and counting every node as
// it is entered, so its memory is fixed and its time bounded by the node cap, which scales with
// the pickle's size, even where memo sharing makes the paths exponential. (A walk that queued
// every child before counting it held width x depth entries: gigabytes for a 20 MB pickle whose
// list of ten million items sits in a cycle.)
Status check_tree(const PtValue& root, std::uint64_t file_size, std::uint64_t pickle_size) {
  const std::uint64_t max_view_bytes = kMaxPtViewBytesPerFileByte * file_size;
  const std::uint64_t max_visits =
      std::min(kMaxPickleTreeNodes, kPickleTreeNodesFloor + kPickleTreeNodesPerByte * pickle_size);
  std::uint64_t visits = 0, view_bytes = 0;
  struct Frame {
    const PtValue* node;
    std::size_t next_child;
  };
  std::vector<Frame> path;  // the containers from the root down to the node being entered
  auto enter = [&](const PtValue& v) -> Status {
    if (path.size() > static_cast<std::size_t>(kMaxPickleDepth)) {
      return Error(ErrorKind::kLimitExceeded,
                   fmt::format("nesting deeper than {}", kMaxPickleDepth))
          .with_rule("pickle.max_depth");
    }
    if (++visits > max_visits) {
      return Error(ErrorKind::kLimitExceeded,
                   fmt::format("the data tree, counted once per path from the root, has more "
                               "than {} nodes for a {}-byte pickle (shared memo references "
                               "multiply it)",
                               max_visits, pickle_size))
          .with_rule("pickle.max_tree_nodes");
    }
    if (const auto* g = std::get_if<V::Global>(&v.v)) {
      return Error(ErrorKind::kPickleForbidden,
                   fmt::format("a bare global '{}.{}' in the data", g->module, g->name));
    }
    if (std::holds_alternative<V::Storage>(v.v)) {
      return Error(ErrorKind::kPickleForbidden, "a bare storage in the data");
    }
    if (const auto* t = std::get_if<PtTensor>(&v.v)) {
      view_bytes += t->numel() * (dtype_info(t->dtype).bits / 8);  // each <= the file size
      if (view_bytes > max_view_bytes) {
        return Error(ErrorKind::kLimitExceeded,
                     fmt::format("tensors reachable from the root, counted once per path, hold "
                                 "more than {} x the file's {} bytes",
                                 kMaxPtViewBytesPerFileByte, file_size))
            .with_rule("pt.max_view_bytes");
      }
    } else if (std::holds_alternative<PtList>(v.v) || v.is_dict()) {
      // Every cycle runs through a list or dict (a tuple cannot change after it is made), so
      // looking for these on the path finds a cycle within one turn of it.
      for (const Frame& f : path) {
        if (f.node == &v) return cycle(fmt::format("a {} contains itself", container_name(v)));
      }
      path.push_back({&v, 0});
    } else if (std::holds_alternative<V::Tuple>(v.v)) {
      path.push_back({&v, 0});
    }
    return ok_status();
  };
  QR_TRY(enter(root));
  while (!path.empty()) {
    const PtValue* child = child_at(*path.back().node, path.back().next_child++);
    if (child) {
      QR_TRY(enter(*child));
    } else {
      path.pop_back();
    }
  }
  return ok_status();
}

// Every tensor's storage record exists, holds exactly what the persistent id declares, keeps
// one dtype, and contains the tensor's view without repeating elements. Sets each tensor's
// storage_data_offset.
Status check_storages(const ZipReader& zip, const std::string& root,
                      const std::vector<std::pair<Ptr, std::uint64_t>>& storage_numel) {
  std::unordered_map<std::string, Dtype> key_dtype;
  for (const auto& [tensor_value, numel] : storage_numel) {
    PtTensor* t = &std::get<PtTensor>(tensor_value->v);
    const std::string rec = root + "data/" + t->storage_key;
    const ZipEntry* e = zip.find(rec);
    if (!e) {
      return Error(ErrorKind::kPtRecordMissing, fmt::format("storage record '{}' is missing", rec))
          .with_rule("pt.storage_record");
    }
    const auto [it, inserted] = key_dtype.emplace(t->storage_key, t->dtype);
    if (!inserted && it->second != t->dtype) {
      return Error(ErrorKind::kPtStorageConflict,
                   fmt::format("storage '{}' is used as {} and as {}", t->storage_key,
                               dtype_info(it->second).name, dtype_info(t->dtype).name))
          .with_rule("pt.storage_dtype");
    }
    const std::uint64_t item = dtype_info(t->dtype).bits / 8;
    const auto want = checked_mul(numel, item);
    if (!want || *want != e->size) {
      return Error(ErrorKind::kPtStorageSize,
                   fmt::format("storage '{}' declares {} elements of {} bytes but its record holds "
                               "{} bytes",
                               t->storage_key, numel, item, e->size))
          .with_rule("pt.storage_size");
    }
    // Highest element the view touches must lie inside the storage.
    bool empty = false;
    std::optional<std::uint64_t> last = t->storage_offset;
    for (std::size_t i = 0; i < t->shape.size(); ++i) {
      if (t->shape[i] == 0) empty = true;
      const auto span = checked_mul(t->shape[i] ? t->shape[i] - 1 : 0, t->stride[i]);
      last = (last && span) ? checked_add(*last, *span) : std::nullopt;
    }
    if (!checked_numel(t->shape)) {
      return Error(ErrorKind::kSizeOverflow,
                   fmt::format("tensor shape over storage '{}' overflows 64 bits", t->storage_key))
          .with_rule("pt.view_size");
    }
    if (t->numel() > numel) {
      return Error(ErrorKind::kPtOutOfBounds,
                   fmt::format("view of {} elements over storage '{}' of {}: it repeats "
                               "elements (zero or overlapping strides), and reading it would "
                               "take more memory than the file holds",
                               t->numel(), t->storage_key, numel))
          .with_rule("pt.view_size");
    }
    if (!empty && (!last || *last >= numel)) {
      return Error(ErrorKind::kPtOutOfBounds,
                   fmt::format("view (offset {}, shape/stride) reaches past the {} elements of "
                               "storage '{}'",
                               t->storage_offset, numel, t->storage_key))
          .with_rule("pt.view_in_bounds");
    }
    t->storage_data_offset = e->data_offset;
  }
  return ok_status();
}

}  // namespace

bool PtTensor::contiguous() const {
  std::uint64_t expect = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && stride[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

std::uint64_t PtTensor::numel() const { return checked_numel(shape).value_or(0); }

bool PtDict::add(std::shared_ptr<PtValue> key, std::shared_ptr<PtValue> value) {
  if (const auto* s = std::get_if<std::string>(&key->v)) {
    if (!by_string_.emplace(*s, items_.size()).second) return false;
  } else if (const auto* i = std::get_if<std::int64_t>(&key->v)) {
    if (!int_keys_.insert(*i).second) return false;
  }
  items_.emplace_back(std::move(key), std::move(value));
  return true;
}

const PtValue* PtDict::find(std::string_view key) const {
  const auto it = by_string_.find(std::string(key));
  return it == by_string_.end() ? nullptr : items_[it->second].second.get();
}

void PtDict::take_all(std::vector<std::shared_ptr<PtValue>>& out) {
  for (auto& [k, x] : items_) {
    out.push_back(std::move(k));
    out.push_back(std::move(x));
  }
  items_.clear();
  by_string_.clear();
  int_keys_.clear();
}

void PtValue::take_children(std::vector<std::shared_ptr<PtValue>>& out) {
  auto take = [&](PtList& l) {
    for (auto& x : l) out.push_back(std::move(x));
    l.clear();
  };
  if (auto* l = std::get_if<PtList>(&v)) take(*l);
  if (auto* t = std::get_if<Tuple>(&v)) take(t->items);
  if (auto* d = std::get_if<PtDict>(&v)) d->take_all(out);
}

PtValue::~PtValue() {
  std::vector<std::shared_ptr<PtValue>> pending;
  take_children(pending);
  while (!pending.empty()) {
    std::shared_ptr<PtValue> p = std::move(pending.back());
    pending.pop_back();
    // Sole owner: empty it first, so freeing it frees no subtree. A shared node is only
    // released here; its last owner empties it the same way.
    if (p && p.use_count() == 1) p->take_children(pending);
  }
}

const PtValue* PtValue::get(std::string_view key) const {
  const auto* d = std::get_if<PtDict>(&v);
  return d ? d->find(key) : nullptr;
}

Result<TorchFile> TorchFile::open(const std::string& path) {
  QR_ASSIGN_OR_RETURN(src, FileSource::open(path));
  return from_source(std::shared_ptr<const ByteSource>(std::move(src)));
}

Result<TorchFile> TorchFile::from_source(std::shared_ptr<const ByteSource> source) {
  const std::string name = source->name();
  QR_ASSIGN_OR_RETURN(zip, ZipReader::open(source));
  if (zip.entries().empty()) return Error(ErrorKind::kZipInvalid, "empty archive").in_file(name);
  const std::string& first = zip.entries()[0].name;
  const auto slash = first.find('/');
  if (slash == std::string::npos) {
    return Error(ErrorKind::kZipInvalid, "records are not inside one top folder")
        .in_file(name)
        .with_rule("pt.root_folder");
  }
  const std::string root = first.substr(0, slash + 1);
  for (const auto& e : zip.entries()) {
    if (e.name.rfind(root, 0) != 0) {
      return Error(ErrorKind::kZipInvalid,
                   fmt::format("record '{}' is outside the top folder '{}'", e.name, root))
          .in_file(name)
          .with_rule("pt.root_folder");
    }
  }
  if (zip.find(root + "constants.pkl")) {
    return Error(ErrorKind::kZipUnsupported,
                 "a TorchScript archive (constants.pkl), not a torch.save file")
        .in_file(name);
  }
  if (!zip.find(root + "version") && !zip.find(root + ".data/version")) {
    return Error(ErrorKind::kPtRecordMissing, "no version record")
        .in_file(name)
        .with_rule("pt.records");
  }
  const ZipEntry* pkl = zip.find(root + "data.pkl");
  if (!pkl)
    return Error(ErrorKind::kPtRecordMissing, "no data.pkl record")
        .in_file(name)
        .with_rule("pt.records");
  auto bytes = zip.read_checked(*pkl, kMaxPickleBytes);
  if (!bytes.ok()) return std::move(bytes.error().in_file(name));
  Unpickler u(*bytes);
  auto rootv = u.run();
  if (!rootv.ok()) {
    u.release_all();
    return std::move(rootv.error().in_file(name).in_tensor("data.pkl"));
  }
  if (Status st = check_storages(zip, root, u.storage_numel_); !st.ok()) {
    u.release_all();
    return std::move(st.error().in_file(name));
  }
  if (Status st = check_tree(**rootv, source->size(), bytes->size()); !st.ok()) {
    u.release_all();
    return std::move(st.error().in_file(name).in_tensor("data.pkl"));
  }
  release_unreachable(**rootv, u.containers());
  return TorchFile(std::move(zip), std::move(rootv).value());
}

Status TorchFile::read(const PtTensor& t, std::span<std::uint8_t> out) const {
  const std::uint64_t item = dtype_info(t.dtype).bits / 8;
  const std::uint64_t n = t.numel();
  if (out.size() != n * item)
    return Error(ErrorKind::kIoRead, "read buffer size mismatch").in_file(path());
  if (n == 0) return ok_status();
  const std::uint64_t base = t.storage_data_offset + t.storage_offset * item;
  if (t.contiguous()) return zip_.source().read_at(base, out);
  // Non-contiguous: read the spanned storage range once, then gather in row-major order.
  std::uint64_t last = 0;
  for (std::size_t i = 0; i < t.shape.size(); ++i) last += (t.shape[i] - 1) * t.stride[i];
  std::vector<std::uint8_t> span((last + 1) * item);
  QR_TRY(zip_.source().read_at(base, span));
  std::vector<std::uint64_t> idx(t.shape.size(), 0);
  for (std::uint64_t k = 0; k < n; ++k) {
    std::uint64_t src = 0;
    for (std::size_t i = 0; i < idx.size(); ++i) src += idx[i] * t.stride[i];
    std::memcpy(out.data() + k * item, span.data() + src * item, item);
    for (std::size_t i = idx.size(); i-- > 0;) {
      if (++idx[i] < t.shape[i]) break;
      idx[i] = 0;
    }
  }
  return ok_status();
}

Status TorchFile::read_elements(const PtTensor& t, std::uint64_t first, std::uint64_t count,
                                std::span<std::uint8_t> out) const {
  const std::uint64_t item = dtype_info(t.dtype).bits / 8;
  if (!t.contiguous() || first + count > t.numel() || out.size() != count * item) {
    return Error(ErrorKind::kIoRead,
                 "element range read of a non-contiguous tensor or out of range")
        .in_file(path());
  }
  if (count == 0) return ok_status();
  return zip_.source().read_at(t.storage_data_offset + (t.storage_offset + first) * item, out);
}

}  // namespace qrepack
