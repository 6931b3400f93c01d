#include "tensor/ops.hpp"

namespace shardsync {

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::kNarrow: return "narrow";
    case OpKind::kSelect: return "select";
    case OpKind::kView: return "view";
    case OpKind::kReshape: return "reshape";
    case OpKind::kTranspose: return "transpose";
    case OpKind::kPermute: return "permute";
    case OpKind::kFlatten: return "flatten";
    case OpKind::kUnsqueeze: return "unsqueeze";
    case OpKind::kSqueeze: return "squeeze";
    case OpKind::kChunk: return "chunk";
    case OpKind::kSplit: return "split";
    case OpKind::kContiguous: return "contiguous";
    case OpKind::kIndexRange: return "index_select";
  }
  return "?";
}

std::string recordable_ops() {
  std::string s;
  for (uint8_t k = 1; k <= kMaxOpKind; ++k) s += (s.empty() ? "" : ", ") + std::string(op_name(OpKind(k)));
  return s + ", copy_ (sink), zero_ (padding)";
}

std::string format_op(const Op& op) {
  std::string s = std::string(op_name(op.kind)) + "(";
  for (size_t i = 0; i < op.args.size(); ++i) s += (i ? ", " : "") + std::to_string(op.args[i]);
  return s + ")";
}

namespace {

// Piece `index` of pieces of `step` elements along a dimension of n (the last may be short,
// those past the end are empty), without overflow for any index a plan file may hold.
void piece_bounds(int64_t n, int64_t step, int64_t index, int64_t* start, int64_t* length) {
  if (index < 0) throw ViewError("piece index " + std::to_string(index) + " is negative");
  int64_t at = 0;
  *start = __builtin_mul_overflow(index, step, &at) || at > n ? n : at;
  *length = std::min(step, n - *start);
}

}  // namespace

void chunk_bounds(int64_t n, int64_t chunks, int64_t index, int64_t* start, int64_t* length) {
  if (chunks <= 0) throw ViewError("chunk count must be positive");
  int64_t step = n / chunks + (n % chunks != 0);  // torch.chunk: ceil(n / chunks) per piece
  piece_bounds(n, step, index, start, length);
}

void split_bounds(int64_t n, int64_t split_size, int64_t index, int64_t* start, int64_t* length) {
  if (split_size <= 0) throw ViewError("split size must be positive");
  piece_bounds(n, split_size, index, start, length);
}

namespace {

void need_args(const Op& op, size_t n) {
  if (op.args.size() != n)
    throw ViewError(std::string(op_name(op.kind)) + " takes " + std::to_string(n) + " arguments, got " +
                    std::to_string(op.args.size()));
}

}  // namespace

void apply_op(SubView& v, const Op& op) {
  const auto& a = op.args;
  switch (op.kind) {
    case OpKind::kNarrow:
    case OpKind::kIndexRange:
      need_args(op, 3);
      v.narrow(int(a[0]), a[1], a[2]);
      return;
    case OpKind::kSelect:
      need_args(op, 2);
      v.select(int(a[0]), a[1]);
      return;
    case OpKind::kView:
    case OpKind::kReshape:
      v.reshape(a);
      return;
    case OpKind::kTranspose:
      need_args(op, 2);
      v.transpose(int(a[0]), int(a[1]));
      return;
    case OpKind::kPermute:
      v.permute(a);
      return;
    case OpKind::kFlatten: {
      need_args(op, 2);
      int s = v.normalize_dim(int(a[0])), e = v.normalize_dim(int(a[1]));
      if (s > e) throw ViewError("flatten start after end");
      std::vector<int64_t> shape = v.shape(), out;
      int64_t n = 1;
      for (int i = 0; i < int(shape.size()); ++i) {
        if (i < s || i > e) out.push_back(shape[size_t(i)]);
        else n *= shape[size_t(i)];
        if (i == e) out.push_back(n);
      }
      v.reshape(out);
      return;
    }
    case OpKind::kUnsqueeze:
      need_args(op, 1);
      v.unsqueeze(int(a[0]));
      return;
    case OpKind::kSqueeze:
      need_args(op, 1);
      v.squeeze(int(a[0]));
      return;
    case OpKind::kChunk:
    case OpKind::kSplit: {
      need_args(op, 3);
      int d = v.normalize_dim(int(a[1]));
      int64_t start = 0, len = 0;
      if (op.kind == OpKind::kChunk) chunk_bounds(v.size(d), a[0], a[2], &start, &len);
      else split_bounds(v.size(d), a[0], a[2], &start, &len);
      v.narrow(d, start, len);
      return;
    }
    case OpKind::kContiguous:
      return;
  }
  throw ViewError("unknown op kind " + std::to_string(int(op.kind)));
}

}  // namespace shardsync
