#include "plan/store.hpp"

#include <hdf5.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "common/hash.hpp"
#include "plan/loaders.hpp"

namespace shardsync {

namespace {

constexpr int kMaxDims = 4;
// The HDF5 user block carries a text header with the length and hash of the rest of the
// file, checked before HDF5 parses anything: the HDF5 library is not hardened against
// corrupted files, so a flipped byte must never reach it.
constexpr hsize_t kUserBlock = hsize_t(kPlanHeaderBytes);
constexpr const char* kMagic = "shardsync-plan";
constexpr size_t kNameBytes = 128;

// On-disk records (compound types; fields are matched by name when reading).
struct H5Param {
  char name[kNameBytes];
  uint8_t dtype, loader, slot, disable_tp;
  int32_t layer, group, ndim;
  int64_t shape[kMaxDims];
  int64_t output_sizes[2];
};
struct H5Entry {
  int32_t hf_param, engine_param;
  int64_t op_begin;
  int32_t op_count, ndim;
  int64_t dst_offset;
  int64_t dst_shape[kMaxDims];
  int64_t dst_strides[kMaxDims];
};
struct H5Op {
  uint8_t kind, nargs;
  int64_t args[kMaxOpArgs];
};

// Owns an HDF5 identifier.
class H5Id {
 public:
  H5Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  H5Id(H5Id&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  ~H5Id() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

H5Id array_type(hid_t base, hsize_t n) { return H5Id(H5Tarray_create2(base, 1, &n), H5Tclose); }

H5Id param_type() {
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(H5Param)), H5Tclose);
  H5Id str(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(str.get(), kNameBytes);
  H5Tset_strpad(str.get(), H5T_STR_NULLTERM);
  H5Id shape = array_type(H5T_NATIVE_INT64, kMaxDims), outs = array_type(H5T_NATIVE_INT64, 2);
  H5Tinsert(t.get(), "name", HOFFSET(H5Param, name), str.get());
  H5Tinsert(t.get(), "dtype", HOFFSET(H5Param, dtype), H5T_NATIVE_UINT8);
  H5Tinsert(t.get(), "loader", HOFFSET(H5Param, loader), H5T_NATIVE_UINT8);
  H5Tinsert(t.get(), "slot", HOFFSET(H5Param, slot), H5T_NATIVE_UINT8);
  H5Tinsert(t.get(), "disable_tp", HOFFSET(H5Param, disable_tp), H5T_NATIVE_UINT8);
  H5Tinsert(t.get(), "layer", HOFFSET(H5Param, layer), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "group", HOFFSET(H5Param, group), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "ndim", HOFFSET(H5Param, ndim), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "shape", HOFFSET(H5Param, shape), shape.get());
  H5Tinsert(t.get(), "output_sizes", HOFFSET(H5Param, output_sizes), outs.get());
  return t;
}

H5Id entry_type() {
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(H5Entry)), H5Tclose);
  H5Id dims = array_type(H5T_NATIVE_INT64, kMaxDims);
  H5Tinsert(t.get(), "hf_tensor", HOFFSET(H5Entry, hf_param), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "engine_param", HOFFSET(H5Entry, engine_param), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "op_begin", HOFFSET(H5Entry, op_begin), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "op_count", HOFFSET(H5Entry, op_count), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "ndim", HOFFSET(H5Entry, ndim), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "dst_offset", HOFFSET(H5Entry, dst_offset), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "dst_shape", HOFFSET(H5Entry, dst_shape), dims.get());
  H5Tinsert(t.get(), "dst_strides", HOFFSET(H5Entry, dst_strides), dims.get());
  return t;
}

H5Id op_type() {
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(H5Op)), H5Tclose);
  H5Id args = array_type(H5T_NATIVE_INT64, kMaxOpArgs);
  H5Tinsert(t.get(), "kind", HOFFSET(H5Op, kind), H5T_NATIVE_UINT8);
  H5Tinsert(t.get(), "nargs", HOFFSET(H5Op, nargs), H5T_NATIVE_UINT8);
  H5Tinsert(t.get(), "args", HOFFSET(H5Op, args), args.get());
  return t;
}

std::string inference_spec(const InferenceLayout& l) {
  std::string s = "tp" + std::to_string(l.tp) + ",dp" + std::to_string(l.dp) + ",pp" + std::to_string(l.pp);
  if (l.enable_ep) s += ",ep" + std::to_string(l.tp * l.dp);
  return s;
}

struct RankRecords {
  std::vector<H5Param> params;
  std::vector<H5Entry> entries;
  std::vector<H5Op> ops;
};

std::string content_hash(const RankRecords& r) {
  Fnv1a h;
  h.bytes(r.params.data(), r.params.size() * sizeof(H5Param));
  h.bytes(r.entries.data(), r.entries.size() * sizeof(H5Entry));
  h.bytes(r.ops.data(), r.ops.size() * sizeof(H5Op));
  return h.hex();
}

RankRecords to_records(const RankPlan& plan) {
  RankRecords r;
  for (const auto& p : plan.params) {
    H5Param x;
    std::memset(&x, 0, sizeof x);
    if (p.name.size() >= kNameBytes || p.shape.size() > size_t(kMaxDims) || p.output_sizes.size() > 2)
      throw Error("plan store: parameter " + p.name + " exceeds the format's name or rank limits");
    std::memcpy(x.name, p.name.data(), p.name.size());
    x.dtype = uint8_t(p.dtype);
    x.loader = uint8_t(p.loader);
    x.slot = uint8_t(p.slot);
    x.disable_tp = p.disable_tp;
    x.layer = p.layer;
    x.group = p.group;
    x.ndim = int32_t(p.shape.size());
    for (size_t i = 0; i < p.shape.size(); ++i) x.shape[i] = p.shape[i];
    for (size_t i = 0; i < p.output_sizes.size(); ++i) x.output_sizes[i] = p.output_sizes[i];
    r.params.push_back(x);
  }
  for (const auto& e : plan.entries) {
    H5Entry x;
    std::memset(&x, 0, sizeof x);
    if (e.dst_shape.size() > size_t(kMaxDims)) throw Error("plan store: destination rank exceeds the format");
    x.hf_param = e.hf_param;
    x.engine_param = e.engine_param;
    x.op_begin = int64_t(r.ops.size());
    x.op_count = int32_t(e.ops.size());
    x.ndim = int32_t(e.dst_shape.size());
    x.dst_offset = e.dst_offset;
    for (size_t i = 0; i < e.dst_shape.size(); ++i) {
      x.dst_shape[i] = e.dst_shape[i];
      x.dst_strides[i] = e.dst_strides[i];
    }
    for (const auto& op : e.ops) {
      H5Op o;
      std::memset(&o, 0, sizeof o);
      if (op.args.size() > size_t(kMaxOpArgs)) throw Error("plan store: op with more than 8 arguments");
      o.kind = uint8_t(op.kind);
      o.nargs = uint8_t(op.args.size());
      for (size_t i = 0; i < op.args.size(); ++i) o.args[i] = op.args[i];
      r.ops.push_back(o);
    }
    r.entries.push_back(x);
  }
  return r;
}

// ---- writing ------------------------------------------------------------------------------

[[noreturn]] void write_fail(const std::string& path, const std::string& what) {
  throw InputError(path, "(output)", "cannot write plan file: " + what);
}

void write_string_attr(hid_t obj, const char* name, const std::string& value, const std::string& path) {
  H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<size_t>(1, value.size()));
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.ok() || H5Awrite(attr.get(), type.get(), value.empty() ? "" : value.c_str()) < 0)
    write_fail(path, std::string("attribute ") + name);
}

void write_int_attr(hid_t obj, const char* name, int64_t value, const std::string& path) {
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id attr(H5Acreate2(obj, name, H5T_NATIVE_INT64, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.ok() || H5Awrite(attr.get(), H5T_NATIVE_INT64, &value) < 0) write_fail(path, std::string("attribute ") + name);
}

template <class R>
void write_table(hid_t group, const char* name, hid_t type, const std::vector<R>& rows, hid_t dcpl,
                 const std::string& path) {
  hsize_t n = rows.size();
  H5Id space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  H5Id ds(H5Dcreate2(group, name, type, space.get(), H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) write_fail(path, std::string("dataset ") + name);
  if (n > 0 && H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0)
    write_fail(path, std::string("dataset ") + name);
}

// Writes the user-block header: magic, format version, length and hash of the HDF5 part.
void seal_file(const std::string& tmp, const std::string& path) {
  std::fstream f(tmp, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) write_fail(path, "cannot reopen " + tmp);
  f.seekg(0, std::ios::end);
  int64_t size = int64_t(f.tellg());
  f.seekg(std::streamoff(kUserBlock));
  Fnv1a h;
  std::vector<char> buf(1 << 20);
  int64_t left = size - int64_t(kUserBlock);
  while (left > 0) {
    f.read(buf.data(), std::streamsize(std::min<int64_t>(left, int64_t(buf.size()))));
    std::streamsize got = f.gcount();
    if (got <= 0) write_fail(path, "short read while sealing");
    h.bytes(buf.data(), size_t(got));
    left -= got;
  }
  std::string header = std::string(kMagic) + "\nformat_version " + std::to_string(kPlanFormatVersion) + "\nbytes " +
                       std::to_string(size - int64_t(kUserBlock)) + "\nfnv1a " + h.hex() + "\n";
  header.resize(kUserBlock, ' ');
  f.clear();
  f.seekp(0);
  f.write(header.data(), std::streamsize(header.size()));
  if (!f) write_fail(path, "cannot write the header");
}

// ---- reading ------------------------------------------------------------------------------

[[noreturn]] void read_fail(const std::string& path, const std::string& object, const std::string& what);

void check_seal(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) read_fail(path, "(file)", "cannot open for reading");
  f.seekg(0, std::ios::end);
  int64_t size = int64_t(f.tellg());
  if (size < int64_t(kUserBlock)) read_fail(path, "(file)", "not a shardsync plan file: only " + std::to_string(size) + " bytes (truncated?)");
  f.seekg(0);
  std::string header(kUserBlock, '\0');
  f.read(header.data(), std::streamsize(kUserBlock));
  std::istringstream in(header);
  std::string magic, k1, k2, k3, hash;
  int64_t version = 0, bytes = -1;
  in >> magic >> k1 >> version >> k2 >> bytes >> k3 >> hash;
  if (magic != kMagic || k1 != "format_version" || k2 != "bytes" || k3 != "fnv1a")
    read_fail(path, "(header)", "not a shardsync plan file (no shardsync-plan header in the HDF5 user block)");
  if (version != kPlanFormatVersion)
    read_fail(path, "(header) format_version", "is " + std::to_string(version) + ", this build reads version " +
                                                   std::to_string(kPlanFormatVersion) + "; record the plans again");
  if (bytes != size - int64_t(kUserBlock))
    read_fail(path, "(header) bytes", "says " + std::to_string(bytes) + " bytes of HDF5 data but the file has " +
                                          std::to_string(size - int64_t(kUserBlock)) + " (truncated or appended to)");
  Fnv1a h;
  std::vector<char> buf(1 << 20);
  int64_t left = bytes;
  while (left > 0) {
    f.read(buf.data(), std::streamsize(std::min<int64_t>(left, int64_t(buf.size()))));
    std::streamsize got = f.gcount();
    if (got <= 0) read_fail(path, "(file)", "short read");
    h.bytes(buf.data(), size_t(got));
    left -= got;
  }
  if (h.hex() != hash) read_fail(path, "(header) fnv1a", "checksum mismatch: the file was modified or corrupted");
}

[[noreturn]] void read_fail(const std::string& path, const std::string& object, const std::string& what) {
  throw InputError(path, object, what);
}

std::string read_string_attr(hid_t obj, const char* name, const std::string& path) {
  if (H5Aexists(obj, name) <= 0) read_fail(path, std::string("attribute '") + name + "'", "missing (not a shardsync plan file?)");
  H5Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  H5Id type(H5Aget_type(attr.get()), H5Tclose);
  if (!attr.ok() || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0)
    read_fail(path, std::string("attribute '") + name + "'", "expected a fixed-length string");
  size_t n = H5Tget_size(type.get());
  if (n > (1u << 20)) read_fail(path, std::string("attribute '") + name + "'", "implausible length");
  std::string s(n, '\0');
  H5Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mem.get(), n);
  if (H5Aread(attr.get(), mem.get(), s.data()) < 0) read_fail(path, std::string("attribute '") + name + "'", "unreadable");
  s.resize(strnlen(s.c_str(), n));
  return s;
}

int64_t read_int_attr(hid_t obj, const char* name, const std::string& path) {
  if (H5Aexists(obj, name) <= 0) read_fail(path, std::string("attribute '") + name + "'", "missing");
  H5Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  int64_t v = 0;
  if (!attr.ok() || H5Aread(attr.get(), H5T_NATIVE_INT64, &v) < 0)
    read_fail(path, std::string("attribute '") + name + "'", "expected an integer");
  return v;
}

template <class R>
std::vector<R> read_table(hid_t group, const std::string& gname, const char* name, hid_t type, const std::string& path,
                          hsize_t limit) {
  std::string obj = "/" + gname + "/" + name;
  if (H5Lexists(group, name, H5P_DEFAULT) <= 0) read_fail(path, obj, "dataset missing");
  H5Id ds(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose);
  H5Id space(H5Dget_space(ds.get()), H5Sclose);
  if (!ds.ok() || !space.ok() || H5Sget_simple_extent_ndims(space.get()) != 1) read_fail(path, obj, "expected a 1-d table");
  H5Id file_type(H5Dget_type(ds.get()), H5Tclose);
  if (!file_type.ok() || H5Tequal(file_type.get(), type) <= 0)
    read_fail(path, obj, "record type differs from this build's format (another version?)");
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  if (n > limit) read_fail(path, obj, std::to_string(n) + " rows exceed the plausible " + std::to_string(limit));
  // The rows must be stored before they are allocated: a dataspace that claims more rows than
  // the file holds is refused without allocating them.
  const hsize_t stored = H5Dget_storage_size(ds.get()), row_bytes = H5Tget_size(file_type.get());
  if (n > 0 && (row_bytes == 0 || stored / row_bytes < n))
    read_fail(path, obj, std::to_string(n) + " rows of " + std::to_string(row_bytes) + " bytes, but " +
                             std::to_string(stored) + " bytes stored (truncated or corrupt file)");
  std::vector<R> rows(n);
  if (n > 0 && H5Dread(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0)
    read_fail(path, obj, "unreadable (truncated or corrupt file, or fields of another format)");
  return rows;
}

}  // namespace

PlanIdentity plan_identity(const ModelSpec& model, const InferencePlacement& inf) {
  PlanIdentity id;
  id.model_name = model.name();
  Fnv1a h;
  h.str(model.config().architecture);
  for (const auto& p : model.params()) {
    h.str(p.name);
    h.pod(uint8_t(p.dtype));
    for (int64_t s : p.shape) h.pod(s);
  }
  id.model_hash = h.hex();
  id.layout = inference_spec(inf.layout());
  Fnv1a lh;
  lh.str(id.layout);
  id.layout_hash = lh.hex();
  id.ranks_per_replica = inf.layout().ranks_per_replica();
  id.vllm = vllm_rules(model.config(), inf.layout());
  return id;
}

void write_plans(const std::string& path, const ModelSpec& model, const InferencePlacement& inf,
                 const std::vector<RankPlan>& plans) {
  quiet_hdf5();
  PlanIdentity id = plan_identity(model, inf);
  std::string tmp = path + ".tmp";
  {
    H5Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
    H5Pset_userblock(fcpl.get(), kUserBlock);
    H5Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT), H5Fclose);
    if (!file.ok()) write_fail(path, "cannot create " + tmp + " (directory missing or not writable?)");
    // No timestamps: the same inputs give the same bytes.
    H5Id gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
    H5Pset_obj_track_times(gcpl.get(), false);
    H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_obj_track_times(dcpl.get(), false);
    hid_t root = file.get();
    write_string_attr(root, "format", "shardsync-plan", path);
    write_int_attr(root, "format_version", kPlanFormatVersion, path);
    write_string_attr(root, "model_name", id.model_name, path);
    write_string_attr(root, "model_hash", id.model_hash, path);
    write_int_attr(root, "model_num_tensors", int64_t(model.params().size()), path);
    write_string_attr(root, "inference_layout", id.layout, path);
    write_string_attr(root, "layout_hash", id.layout_hash, path);
    write_string_attr(root, "vllm", id.vllm, path);
    write_int_attr(root, "ranks_per_replica", id.ranks_per_replica, path);
    H5Id pt = param_type(), et = entry_type(), ot = op_type();
    for (const RankPlan& plan : plans) {
      std::string gname = "rank_" + std::to_string(plan.local_rank);
      H5Id g(H5Gcreate2(root, gname.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
      if (!g.ok()) write_fail(path, "group " + gname);
      RankRecords rec = to_records(plan);
      write_int_attr(g.get(), "local_rank", plan.local_rank, path);
      write_int_attr(g.get(), "tp_rank", plan.coord.tp_rank, path);
      write_int_attr(g.get(), "pp_rank", plan.coord.pp_rank, path);
      write_int_attr(g.get(), "dp_rank", plan.coord.dp_rank, path);
      write_int_attr(g.get(), "moe_rank", plan.coord.moe_rank, path);
      write_int_attr(g.get(), "copy_bytes", plan.copy_bytes(model), path);
      write_string_attr(g.get(), "content_hash", content_hash(rec), path);
      write_table(g.get(), "params", pt.get(), rec.params, dcpl.get(), path);
      write_table(g.get(), "entries", et.get(), rec.entries, dcpl.get(), path);
      write_table(g.get(), "ops", ot.get(), rec.ops, dcpl.get(), path);
    }
    if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) write_fail(path, "flush failed (disk full?)");
  }
  seal_file(tmp, path);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    write_fail(path, "rename from " + tmp + " failed");
  }
}

PlanIdentity read_plan_identity(const std::string& path) {
  quiet_hdf5();
  if (!std::filesystem::exists(path)) read_fail(path, "(file)", "does not exist");
  check_seal(path);
  if (H5Fis_hdf5(path.c_str()) <= 0) read_fail(path, "(file)", "not an HDF5 file (truncated or corrupt?)");
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) read_fail(path, "(file)", "cannot open as HDF5 (truncated or corrupt?)");
  hid_t root = file.get();
  if (read_string_attr(root, "format", path) != "shardsync-plan")
    read_fail(path, "attribute 'format'", "expected \"shardsync-plan\"");
  int64_t version = read_int_attr(root, "format_version", path);
  if (version != kPlanFormatVersion)
    read_fail(path, "attribute 'format_version'", "is " + std::to_string(version) + ", this build reads version " +
                                                      std::to_string(kPlanFormatVersion) + "; record the plans again");
  PlanIdentity id;
  id.model_name = read_string_attr(root, "model_name", path);
  id.model_hash = read_string_attr(root, "model_hash", path);
  id.layout = read_string_attr(root, "inference_layout", path);
  id.layout_hash = read_string_attr(root, "layout_hash", path);
  id.vllm = read_string_attr(root, "vllm", path);
  int64_t rpr = read_int_attr(root, "ranks_per_replica", path);
  if (rpr < 1 || rpr > (1 << 20)) read_fail(path, "attribute 'ranks_per_replica'", "implausible value " + std::to_string(rpr));
  id.ranks_per_replica = int(rpr);
  return id;
}

PlanFile read_plans(const std::string& path, const ModelSpec& model, const InferencePlacement& inf) {
  PlanFile out;
  out.identity = read_plan_identity(path);
  out.format_version = kPlanFormatVersion;
  PlanIdentity want = plan_identity(model, inf);
  const PlanIdentity& got = out.identity;
  if (got.model_hash != want.model_hash)
    read_fail(path, "attribute 'model_hash'",
              "recorded for model " + got.model_name + " (tensor-list hash " + got.model_hash + "), but this run uses model " +
                  want.model_name + " (hash " + want.model_hash + "); record the plans again for this model");
  if (got.layout != want.layout || got.layout_hash != want.layout_hash)
    read_fail(path, "attribute 'inference_layout'",
              "recorded for inference layout " + got.layout + ", but this run uses " + want.layout);
  if (got.vllm != want.vllm)
    read_fail(path, "attribute 'vllm'", "recorded following " + got.vllm + ", but this run follows " + want.vllm +
                                            "; record the plans again");
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) read_fail(path, "(file)", "cannot open as HDF5");
  H5Id pt = param_type(), et = entry_type(), ot = op_type();
  const int32_t num_hf = int32_t(model.params().size());
  for (int r = 0; r < got.ranks_per_replica; ++r) {
    std::string gname = "rank_" + std::to_string(r);
    if (H5Lexists(file.get(), gname.c_str(), H5P_DEFAULT) <= 0) read_fail(path, "/" + gname, "group missing");
    H5Id g(H5Gopen2(file.get(), gname.c_str(), H5P_DEFAULT), H5Gclose);
    if (!g.ok()) read_fail(path, "/" + gname, "unreadable group");
    RankRecords rec;
    rec.params = read_table<H5Param>(g.get(), gname, "params", pt.get(), path, 1u << 24);
    rec.entries = read_table<H5Entry>(g.get(), gname, "entries", et.get(), path, 1u << 28);
    rec.ops = read_table<H5Op>(g.get(), gname, "ops", ot.get(), path, 1u << 30);
    if (read_string_attr(g.get(), "content_hash", path) != content_hash(rec))
      read_fail(path, "/" + gname, "content hash mismatch: the plan data were modified or corrupted");

    // The engine parameters must be the ones this model and layout create on that rank.
    EngineParams expect(model, inf, r);
    if (rec.params.size() != expect.params().size())
      read_fail(path, "/" + gname + "/params", std::to_string(rec.params.size()) + " parameters, expected " +
                                                   std::to_string(expect.params().size()));
    RankPlan plan;
    plan.local_rank = r;
    plan.coord = inf.coord(r);
    plan.params = expect.params();
    for (size_t i = 0; i < rec.params.size(); ++i) {
      const H5Param& x = rec.params[i];
      const EngineParam& e = plan.params[i];
      std::string name(x.name, strnlen(x.name, kNameBytes));
      bool same = name == e.name && x.ndim == int32_t(e.shape.size()) && x.dtype == uint8_t(e.dtype);
      for (size_t d = 0; same && d < e.shape.size(); ++d) same = x.shape[d] == e.shape[d];
      if (!same) read_fail(path, "/" + gname + "/params[" + std::to_string(i) + "]", "is " + name + ", expected " + e.name +
                                                                                    " with this model and layout");
    }
    std::vector<int64_t> filled(plan.params.size(), 0);
    for (size_t i = 0; i < rec.entries.size(); ++i) {
      const H5Entry& x = rec.entries[i];
      std::string obj = "/" + gname + "/entries[" + std::to_string(i) + "]";
      if (x.hf_param < -1 || x.hf_param >= num_hf) read_fail(path, obj, "hf_tensor index out of range");
      if (x.engine_param < 0 || x.engine_param >= int32_t(plan.params.size())) read_fail(path, obj, "engine_param out of range");
      if (x.ndim < 0 || x.ndim > kMaxDims || x.op_count < 0 || x.op_begin < 0 ||
          x.op_begin + x.op_count > int64_t(rec.ops.size()))
        read_fail(path, obj, "ndim or op range out of bounds");
      PlanEntry e;
      e.hf_param = x.hf_param;
      e.engine_param = x.engine_param;
      e.dst_offset = x.dst_offset;
      e.dst_shape.assign(x.dst_shape, x.dst_shape + x.ndim);
      e.dst_strides.assign(x.dst_strides, x.dst_strides + x.ndim);
      for (int64_t k = x.op_begin; k < x.op_begin + x.op_count; ++k) {
        const H5Op& o = rec.ops[size_t(k)];
        if (o.kind < 1 || o.kind > kMaxOpKind || o.nargs > kMaxOpArgs) read_fail(path, obj, "invalid op record");
        e.ops.push_back(Op{OpKind(o.kind), std::vector<int64_t>(o.args, o.args + o.nargs)});
      }
      const EngineParam& ep = plan.params[size_t(e.engine_param)];
      if (!e.is_fill() && model.param(e.hf_param).dtype != ep.dtype)
        read_fail(path, obj, "dtype of " + model.param(e.hf_param).name + " differs from " + ep.name);
      try {
        e.copy = compile_entry(e, e.is_fill() ? std::vector<int64_t>{} : model.param(e.hf_param).shape, ep.shape);
      } catch (const ViewError& err) {
        read_fail(path, obj, std::string("ops do not describe a valid copy: ") + err.what());
      }
      filled[size_t(e.engine_param)] += e.numel();
      plan.entries.push_back(std::move(e));
    }
    for (size_t p = 0; p < plan.params.size(); ++p)
      if (filled[p] != plan.params[p].numel())
        read_fail(path, "/" + gname, "entries write " + std::to_string(filled[p]) + " elements of " + plan.params[p].name +
                                         ", which has " + std::to_string(plan.params[p].numel()));
    out.plans.push_back(std::move(plan));
  }
  return out;
}

void reseal_plan_file(const std::string& path) {
  quiet_hdf5();
  // Each rank's content hash over its tables as they now are, where they can be read: a rank
  // whose tables cannot is left as it is, and the reader refuses it.
  {
    H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    H5Id pt = param_type(), et = entry_type(), ot = op_type();
    for (int r = 0; file.ok(); ++r) {
      std::string gname = "rank_" + std::to_string(r);
      if (H5Lexists(file.get(), gname.c_str(), H5P_DEFAULT) <= 0) break;
      H5Id g(H5Gopen2(file.get(), gname.c_str(), H5P_DEFAULT), H5Gclose);
      if (!g.ok()) break;
      try {
        RankRecords rec;
        rec.params = read_table<H5Param>(g.get(), gname, "params", pt.get(), path, 1u << 24);
        rec.entries = read_table<H5Entry>(g.get(), gname, "entries", et.get(), path, 1u << 28);
        rec.ops = read_table<H5Op>(g.get(), gname, "ops", ot.get(), path, 1u << 30);
        if (H5Aexists(g.get(), "content_hash") > 0 && H5Adelete(g.get(), "content_hash") < 0) continue;
        write_string_attr(g.get(), "content_hash", content_hash(rec), path);
      } catch (const InputError&) {
      }
    }
  }
  seal_file(path, path);
}

}  // namespace shardsync
