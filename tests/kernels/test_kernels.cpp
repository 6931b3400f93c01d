// GPU kernels against their CPU twins (copy: execute_copy; synth and verify: cpu_synth,
// cpu_verify) on random jobs. Skips, visibly, where no GPU is visible; fails where the driver
// lists a GPU that CUDA cannot use (a broken setup is a defect, not a missing feature).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "device/device.hpp"
#include "device/delta.hpp"
#include "device/fp8.hpp"
#include "common/error.hpp"
#include "engine/synthetic.hpp"
#include "tensor/ops.hpp"

namespace shardsync {
namespace {

#define REQUIRE_GPU()                                                                               \
  do {                                                                                              \
    if (!cuda_built()) GTEST_SKIP() << "built without CUDA (SHARDSYNC_CUDA=OFF or no nvcc)";        \
    if (const std::string broken = broken_gpu_setup(); !broken.empty()) FAIL() << broken;            \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible on this machine (" << cuda_error() << ")"; \
  } while (0)

// A random view of a tensor made of narrow/transpose/reshape steps, packed.
CopyDesc random_desc(std::mt19937_64& rng, std::vector<int64_t>* shape_out) {
  std::vector<int64_t> shape = {int64_t(2 + rng() % 40), int64_t(2 + rng() % 300), int64_t(1 + rng() % 8)};
  SubView v = SubView::contiguous(shape);
  for (int s = 0; s < 3; ++s) {
    switch (rng() % 3) {
      case 0: {
        int d = int(rng() % uint64_t(v.ndim()));
        int64_t n = v.size(d), start = int64_t(rng() % uint64_t(n)), len = 1 + int64_t(rng() % uint64_t(n - start));
        v.narrow(d, start, len);
        break;
      }
      case 1:
        if (v.ndim() >= 2) v.transpose(0, v.ndim() - 1);
        break;
      default:
        break;
    }
  }
  *shape_out = shape;
  return make_pack_desc(v, int64_t(rng() % 64));
}

TEST(Kernels, BatchedCopyMatchesCpuTwin) {
  REQUIRE_GPU();
  auto gpu = make_cuda_device(0);
  std::mt19937_64 rng(7);
  for (int32_t eb : {2, 4, 1}) {
    std::vector<CopyJob> cpu_jobs, gpu_jobs;
    std::vector<std::vector<uint8_t>> src_host, dst_cpu;
    std::vector<DeviceBuffer> src_dev, dst_dev;
    for (int j = 0; j < 40; ++j) {
      std::vector<int64_t> shape;
      CopyDesc d = random_desc(rng, &shape);
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      int64_t lo = 0, hi = 0;
      dest_range(d, &lo, &hi);
      src_host.emplace_back(size_t(n * eb));
      for (auto& b : src_host.back()) b = uint8_t(rng());
      dst_cpu.emplace_back(size_t(hi * eb), 0xEE);
      src_dev.emplace_back(gpu.get(), n * eb);
      dst_dev.emplace_back(gpu.get(), hi * eb);
      gpu->from_host(src_dev.back().data(), src_host.back().data(), n * eb);
      gpu->from_host(dst_dev.back().data(), dst_cpu.back().data(), hi * eb);
      cpu_jobs.push_back(CopyJob{src_host.back().data(), dst_cpu.back().data(), d, eb});
      gpu_jobs.push_back(CopyJob{src_dev.back().data(), dst_dev.back().data(), d, eb});
    }
    for (const auto& j : cpu_jobs) execute_copy(j.desc, j.src, j.dst, j.elem_bytes);
    gpu->copy(gpu_jobs);  // one launch for all 40 jobs
    gpu->synchronize();
    for (size_t j = 0; j < gpu_jobs.size(); ++j) {
      std::vector<uint8_t> got(dst_cpu[j].size());
      gpu->to_host(got.data(), dst_dev[j].data(), int64_t(got.size()));
      ASSERT_EQ(got, dst_cpu[j]) << "job " << j << " elem_bytes " << eb;
    }
  }
}

TEST(Kernels, WideAccessesOnAlignedRuns) {
  REQUIRE_GPU();
  auto gpu = make_cuda_device(0);
  // A large contiguous job and a row-slice job (runs of 256 bf16 = 512 B): both must be exact.
  const int64_t rows = 4096, cols = 2048;
  std::vector<uint8_t> host(size_t(rows * cols * 2));
  for (size_t i = 0; i < host.size(); ++i) host[i] = uint8_t(i * 131 + 7);
  DeviceBuffer src(gpu.get(), int64_t(host.size())), dst(gpu.get(), int64_t(host.size()));
  gpu->from_host(src.data(), host.data(), int64_t(host.size()));
  SubView slice = SubView::contiguous({rows, cols});
  slice.narrow(1, 512, 256);
  CopyDesc whole = make_pack_desc(SubView::contiguous({rows, cols}), 0);
  CopyDesc cols_desc = make_pack_desc(slice, 0);
  for (const CopyDesc& d : {whole, cols_desc}) {
    gpu->copy({CopyJob{src.data(), dst.data(), d, 2}});
    gpu->synchronize();
    std::vector<uint8_t> got(size_t(d.numel * 2)), want(size_t(d.numel * 2));
    gpu->to_host(got.data(), dst.data(), d.numel * 2);
    execute_copy(d, host.data(), want.data(), 2);
    ASSERT_EQ(got, want);
  }
}

// Copies of rows (several runs, one outer loop) go to their own kernel (copy_rows): runs
// longer than a block (tiles starting mid-run), exactly a block, odd lengths in element
// units; two outer loops take the generic path. Every vector width, in one copy() beside a
// one-run job, each exact against the CPU twin.
TEST(Kernels, StridedCopiesMatchCpuTwin) {
  REQUIRE_GPU();
  auto gpu = make_cuda_device(0);
  struct Case {
    std::vector<int64_t> shape;
    int dim;
    int64_t start, len;  // narrow(dim, start, len); dim 1 of 3-d also narrows dim 2 to len2
    int64_t len2;
  };
  const std::vector<Case> cases = {
      {{96, 12288}, 1, 6144, 6144, 0},  // a down_proj column half: runs of 768 16-byte units
      {{64, 4096}, 1, 2048, 2048, 0},   // an o_proj half: runs of exactly 256 units (a block)
      {{77, 5000}, 1, 4, 2100, 0},      // 2100 elements: 8-byte units, 525 a run
      {{70, 3000}, 1, 1, 2999, 0},      // odd start and length: element units
      {{6, 64, 4096}, 1, 8, 40, 2048},  // two outer loops (the generic path), runs of a block
      {{5, 33, 2000}, 1, 3, 29, 800},   // two outer loops, runs shorter than a block
  };
  for (int32_t eb : {2, 4}) {
    std::vector<std::vector<uint8_t>> host, want;
    std::vector<DeviceBuffer> src, dst;
    std::vector<CopyJob> jobs;
    std::mt19937_64 rng(11 + eb);
    for (const Case& c : cases) {
      SubView v = SubView::contiguous(c.shape);
      v.narrow(c.dim, c.start, c.len);
      if (c.shape.size() == 3) v.narrow(2, 0, c.len2);
      CopyDesc d = make_pack_desc(v, 0);
      int64_t n = 1;
      for (int64_t s : c.shape) n *= s;
      host.emplace_back(size_t(n * eb));
      for (auto& b : host.back()) b = uint8_t(rng());
      want.emplace_back(size_t(d.numel * eb), 0xEE);
      execute_copy(d, host.back().data(), want.back().data(), eb);
      src.emplace_back(gpu.get(), n * eb);
      dst.emplace_back(gpu.get(), d.numel * eb);
      gpu->from_host(src.back().data(), host.back().data(), n * eb);
      gpu->from_host(dst.back().data(), std::vector<uint8_t>(size_t(d.numel * eb), 0xEE).data(), d.numel * eb);
      jobs.push_back(CopyJob{src.back().data(), dst.back().data(), d, eb});
    }
    // A one-run job in the same copy(): the other kernel, launched beside.
    CopyDesc whole = make_pack_desc(SubView::contiguous(cases[0].shape), 0);
    jobs.push_back(CopyJob{src[0].data(), dst[0].data(), whole, eb});
    want.push_back(host[0]);
    DeviceBuffer whole_dst(gpu.get(), whole.numel * eb);
    jobs.back().dst = whole_dst.data();
    gpu->copy(jobs);
    gpu->synchronize();
    for (size_t i = 0; i < jobs.size(); ++i) {
      std::vector<uint8_t> got(want[i].size());
      gpu->to_host(got.data(), jobs[i].dst, int64_t(got.size()));
      ASSERT_EQ(got, want[i]) << "case " << i << " elem_bytes " << eb;
    }
  }
}

// Transposing copies take the tiled kernels: a Llama-4 gate_up piece read from the HF tensor
// (rows 32 KiB apart) and from a chunk in source order (the engines' unpack), every expert at
// once (an outer loop; two outer loops in a 4-d case), and ragged shapes of every element
// size; 16-bit pairs where the offsets are even. Each exact, in one copy() with a
// non-transposing job, the destination's untouched elements left alone.
TEST(Kernels, TransposesMatchCpuTwin) {
  REQUIRE_GPU();
  auto gpu = make_cuda_device(0);
  struct Case {
    std::vector<int64_t> shape;  // source tensor
    int dim, start, len;         // narrow(dim, start, len) after transpose(last two)
    int32_t eb;
    int64_t at;                  // packed at this element: even offsets let 16-bit jobs go in pairs
  };
  const Case cases[] = {{{640, 16384}, 0, 2048, 384, 2, 0}, {{3, 300, 520}, 1, 100, 260, 2, 4},
                        {{3, 300, 520}, 1, 100, 260, 2, 3}, {{70, 45}, 0, 3, 40, 1, 3},
                        {{33, 100}, 1, 1, 31, 4, 3},       {{2, 37, 65}, 2, 0, 37, 8, 3},
                        {{2, 4, 70, 130}, 1, 1, 2, 2, 2}};
  for (const Case& c : cases) {
    SubView v = SubView::contiguous(c.shape);
    const int nd = int(c.shape.size());
    v.transpose(nd - 2, nd - 1);
    v.narrow(c.dim, c.start, c.len);
    const CopyDesc pack = make_pack_desc(v, c.at);  // source -> packed, transposing
    ASSERT_TRUE(copy_transposes(pack));
    if (nd == 4) {
      ASSERT_EQ(pack.dims.size(), 4u);  // two outer loops, not coalesced
    }
    int64_t n = 1;
    for (int64_t x : c.shape) n *= x;
    std::vector<uint8_t> host(size_t(n * c.eb));
    for (size_t i = 0; i < host.size(); ++i) host[i] = uint8_t((i * 0x9E3779B97F4A7C15ull) >> 56);  // no period
    // Also a transpose from a dense buffer: the packed elements, read back in the source's order.
    CopyDesc unpack = pack;
    for (CopyDim& k : unpack.dims) std::swap(k.src_stride, k.dst_stride);
    std::swap(unpack.src_offset, unpack.dst_offset);
    const size_t m = unpack.dims.size();
    std::swap(unpack.dims[m - 2], unpack.dims[m - 1]);  // the source's layout runs along the last loop
    const int64_t out = pack.numel + c.at;
    DeviceBuffer src(gpu.get(), n * c.eb), dst(gpu.get(), out * c.eb), back(gpu.get(), n * c.eb);
    gpu->from_host(src.data(), host.data(), n * c.eb);
    std::vector<uint8_t> fill(size_t(std::max(n, out) * c.eb), 0xEE);
    gpu->from_host(dst.data(), fill.data(), out * c.eb);
    gpu->from_host(back.data(), fill.data(), n * c.eb);
    const CopyDesc plain = make_pack_desc(SubView::contiguous({std::max<int64_t>(c.at, 1)}), 0);  // joins the launch
    std::vector<CopyJob> jobs = {CopyJob{src.data(), dst.data(), pack, c.eb}};
    if (c.at > 0) jobs.push_back(CopyJob{src.data(), dst.data(), plain, c.eb});  // before the packed elements
    gpu->copy(jobs);
    gpu->copy({CopyJob{dst.data(), back.data(), unpack, c.eb}});
    gpu->synchronize();
    std::vector<uint8_t> want(fill.begin(), fill.begin() + out * c.eb), got(want.size());
    execute_copy(pack, host.data(), want.data(), c.eb);
    if (c.at > 0) execute_copy(plain, host.data(), want.data(), c.eb);
    gpu->to_host(got.data(), dst.data(), int64_t(got.size()));
    ASSERT_EQ(got, want) << "pack, shape " << c.shape.size() << "-d, " << c.len << " wide, eb " << c.eb;
    std::vector<uint8_t> want_back(fill.begin(), fill.begin() + n * c.eb), got_back(want_back.size());
    ASSERT_TRUE(copy_transposes(unpack));
    execute_copy(unpack, want.data(), want_back.data(), c.eb);
    gpu->to_host(got_back.data(), back.data(), int64_t(got_back.size()));
    ASSERT_EQ(got_back, want_back) << "unpack, shape " << c.shape.size() << "-d, " << c.len << " wide, eb " << c.eb;
  }
}

TEST(Kernels, SynthAndVerifyMatchCpuTwins) {
  REQUIRE_GPU();
  auto gpu = make_cuda_device(0);
  std::mt19937_64 rng(11);
  // zero: the padding's jobs (the loaders' zero_() entries), filled and checked as zeros.
  // Keys: every element at version 3, and weights that change at a density (--update-density:
  // 2% of the elements, or of rows of 7 elements, at their own phases) at version 9.
  const SynthKey keys[] = {SynthKey(synth_seed(5, 3)), synth_key(5, 9, uint32_t(0.02 * 4294967296.0), 0),
                           synth_key(5, 9, uint32_t(0.02 * 4294967296.0), 7)};
  for (const SynthKey& key : keys)
  for (int32_t eb : {2, 4})
   for (bool zero : {false, true}) {
    std::vector<int64_t> shape;
    CopyDesc d = random_desc(rng, &shape);
    int64_t lo = 0, hi = 0;
    dest_range(d, &lo, &hi);
    std::vector<uint8_t> cpu(size_t(hi * eb), 0x5a);
    DeviceBuffer dev(gpu.get(), hi * eb);
    gpu->from_host(dev.data(), cpu.data(), hi * eb);
    SynthJob cj{cpu.data(), key, d, eb, zero};
    SynthJob gj{dev.data(), key, d, eb, zero};
    cpu_synth(cj);
    gpu->synth({gj});
    gpu->synchronize();
    std::vector<uint8_t> got(cpu.size());
    gpu->to_host(got.data(), dev.data(), hi * eb);
    ASSERT_EQ(got, cpu) << "key of version " << key.version << ", unit " << key.unit << ", eb " << eb;
    EXPECT_EQ(gpu->verify({gj}).mismatches, 0);
    // One flipped byte: one mismatch, found at the right element by both.
    int64_t victim = d.dst_offset;
    got[size_t(victim * eb)] ^= 0x40;
    gpu->from_host(dev.data(), got.data(), hi * eb);
    std::memcpy(cpu.data(), got.data(), got.size());
    VerifyResult g = gpu->verify({gj}), c = cpu_verify({cj});
    EXPECT_EQ(g.mismatches, 1);
    EXPECT_EQ(c.mismatches, 1);
    EXPECT_EQ(g.first_index, victim);
    EXPECT_EQ(c.first_index, victim);
  }
}

TEST(Kernels, CpuTwinSynthMatchesFillOnEveryElement) {
  // No GPU needed: the twin over a strided view equals the flat fill read back through it.
  std::mt19937_64 rng(3);
  for (int t = 0; t < 50; ++t) {
    std::vector<int64_t> shape;
    CopyDesc d = random_desc(rng, &shape);
    int64_t lo = 0, hi = 0;
    dest_range(d, &lo, &hi);
    std::vector<uint8_t> out(size_t(hi * 2), 0);
    cpu_synth(SynthJob{out.data(), 99, d, 2, false});
    for_each_index(d, [&](int64_t s, int64_t t2) {
      uint16_t want = uint16_t(synth_element(99, s, 2)), got;
      std::memcpy(&got, out.data() + t2 * 2, 2);
      ASSERT_EQ(got, want);
    });
    EXPECT_EQ(cpu_verify({SynthJob{out.data(), 99, d, 2, false}}).mismatches, 0);
  }
}

// --checksum's twin: a piece's sum is that of its elements' terms however the piece is cut,
// the same read at the source (a trainer's slab) or at the destination (the receiver's copy),
// and one flipped bit changes it.
TEST(Kernels, CpuTwinChecksumIsTheSumOfItsElements) {
  std::mt19937_64 rng(5);
  for (int t = 0; t < 40; ++t) {
    std::vector<int64_t> shape;
    CopyDesc d = random_desc(rng, &shape);
    int64_t numel = 1;
    for (int64_t n : shape) numel *= n;
    std::vector<uint8_t> src(size_t(numel * 2));
    for (auto& b : src) b = uint8_t(rng());
    int64_t lo = 0, hi = 0;
    dest_range(d, &lo, &hi);
    std::vector<uint8_t> dst(size_t(hi * 2), 0);
    execute_copy(d, src.data(), dst.data(), 2);
    uint64_t want = 0;
    for_each_index(d, [&](int64_t s, int64_t) {
      uint16_t v;
      std::memcpy(&v, src.data() + s * 2, 2);
      want += checksum_term(7, s + 1000, v);
    });
    const uint64_t at_src = cpu_checksum({HashJob{src.data(), d, 2, 7, 1000, true}})[0];
    const uint64_t at_dst = cpu_checksum({HashJob{dst.data(), d, 2, 7, 1000, false}})[0];
    EXPECT_EQ(at_src, want);
    EXPECT_EQ(at_dst, want);
    int64_t victim = -1;
    for_each_index(d, [&](int64_t, int64_t t2) { if (victim < 0) victim = t2; });
    dst[size_t(victim * 2)] ^= 0x01;
    EXPECT_NE(cpu_checksum({HashJob{dst.data(), d, 2, 7, 1000, false}})[0], want);
    EXPECT_NE(cpu_checksum({HashJob{src.data(), d, 2, 8, 1000, true}})[0], want) << "another tensor, another sum";
  }
}

// The GPU's checksum against its twin, on random pieces of every element size in one batch.
TEST(Kernels, ChecksumMatchesCpuTwin) {
  REQUIRE_GPU();
  auto gpu = make_cuda_device(0);
  std::mt19937_64 rng(17);
  for (int t = 0; t < 20; ++t) {
    std::vector<HashJob> cj, gj;
    std::vector<std::vector<uint8_t>> host;
    std::vector<DeviceBuffer> dev;
    for (int32_t eb : {1, 2, 4, 8}) {
      std::vector<int64_t> shape;
      CopyDesc d = random_desc(rng, &shape);
      const bool at_src = (t + eb) % 2 == 0;  // a trainer's strided read, or a receiver's landed piece
      int64_t lo = 0, hi = 0;
      if (at_src) source_range(d, &lo, &hi);
      else dest_range(d, &lo, &hi);
      host.emplace_back(size_t(hi * eb));
      for (auto& b : host.back()) b = uint8_t(rng());
      dev.emplace_back(gpu.get(), hi * eb);
      gpu->from_host(dev.back().data(), host.back().data(), hi * eb);
      cj.push_back(HashJob{host.back().data(), d, eb, int32_t(t), int64_t(eb) * 3, at_src});
      gj.push_back(HashJob{dev.back().data(), d, eb, int32_t(t), int64_t(eb) * 3, at_src});
    }
    EXPECT_EQ(gpu->checksum(gj), cpu_checksum(cj)) << "round " << t;
  }
}

// --checksum inside a copy: random pieces of every element size, packed (read strided, the
// piece's index on the source side) and unpacked (read packed, written strided, the index
// still the piece's source positions), some transposing, some not hashed, in one batch. Each
// hashed job's sum is that of the bits it moved at its indices (the CPU twin, read where they
// landed) and, for the packed ones, the source's own sum (what a trainer sends); the GPU's
// copy and sums match the CPU's.
struct HashedCase {
  std::vector<std::vector<uint8_t>> src, dst;
  std::vector<CopyDesc> descs, index;
  std::vector<CopyJob> jobs;
  std::vector<uint64_t> at_source;  // the packed jobs: the source's sum; else 0
};

HashedCase hashed_case(std::mt19937_64& rng, int round) {
  HashedCase c;
  const int n = 24;
  c.src.reserve(n + 1);
  c.dst.reserve(n + 1);
  c.descs.reserve(n + 1);
  c.index.reserve(n + 1);
  for (int k = 0; k < n; ++k) {
    const int32_t eb = int32_t(1) << (k % 4);
    std::vector<int64_t> shape;
    CopyDesc d = random_desc(rng, &shape);
    int64_t numel = 1;
    for (int64_t x : shape) numel *= x;
    int64_t lo = 0, hi = 0;
    dest_range(d, &lo, &hi);
    const bool unpack = k % 3 == 1, hashed = k % 5 != 4;
    CopyDesc u = d, ix = d;
    if (unpack) {  // the reverse copy: packed in, strided out; the index stays on d's source side
      u.src_offset = d.dst_offset;
      u.dst_offset = d.src_offset;
      for (CopyDim& x : u.dims) std::swap(x.src_stride, x.dst_stride);
      ix.dst_offset = d.src_offset;
      for (size_t i = 0; i < ix.dims.size(); ++i) ix.dims[i].dst_stride = d.dims[i].src_stride;
    }
    c.descs.push_back(u);
    c.index.push_back(ix);
    const int64_t src_elems = unpack ? hi : numel + 64, dst_elems = unpack ? numel + 64 : hi;
    c.src.emplace_back(size_t(src_elems * eb));
    for (auto& b : c.src.back()) b = uint8_t(rng());
    c.dst.emplace_back(size_t(dst_elems * eb), 0);
    c.at_source.push_back(!unpack && hashed ? cpu_checksum({HashJob{c.src.back().data(), d, eb, round * 100 + k, 0, true}})[0] : 0);
  }
  for (int k = 0; k < n; ++k)
    c.jobs.push_back(CopyJob{c.src[size_t(k)].data(), c.dst[size_t(k)].data(), c.descs[size_t(k)], int32_t(1) << (k % 4),
                             k % 5 != 4 ? round * 100 + k : -1, &c.index[size_t(k)]});
  // A whole tensor of many tiles (the one-run path), its index 2^32 - 1000 on: across 2^32.
  const int64_t big = (int64_t(1) << 20) + 5 + round;
  c.descs.push_back(make_pack_desc(SubView::contiguous({big}), 3));
  c.index.push_back(c.descs.back());
  c.index.back().src_offset = (int64_t(1) << 32) - 1000;
  c.src.emplace_back(size_t(big * 2));
  for (auto& b : c.src.back()) b = uint8_t(rng());
  c.dst.emplace_back(size_t((big + 3) * 2), 0);
  c.at_source.push_back(cpu_checksum({HashJob{c.src.back().data(), c.descs.back(), 2, 7, (int64_t(1) << 32) - 1000, true}})[0]);
  c.jobs.push_back(CopyJob{c.src.back().data(), c.dst.back().data(), c.descs.back(), 2, 7, &c.index.back()});
  return c;
}

TEST(Kernels, CpuTwinHashedCopyHashesWhatItMoved) {
  auto cpu = make_cpu_device();
  std::mt19937_64 rng(23);
  for (int round = 0; round < 6; ++round) {
    HashedCase c = hashed_case(rng, round);
    const std::vector<uint64_t> got = cpu->sums(cpu->copy_hashed(c.jobs));
    ASSERT_EQ(got.size(), c.jobs.size());
    for (size_t k = 0; k < c.jobs.size(); ++k) {
      const CopyJob& j = c.jobs[k];
      if (j.hash_tensor < 0) {
        EXPECT_EQ(got[k], 0u) << "job " << k << " is not hashed";
        continue;
      }
      EXPECT_EQ(got[k], cpu_checksum({HashJob{j.dst, c.index[k], j.elem_bytes, j.hash_tensor, 0, false}})[0]) << "job " << k;
      if (c.at_source[k]) {
        EXPECT_EQ(got[k], c.at_source[k]) << "job " << k << ": the source's sum";
      }
    }
  }
}

TEST(Kernels, HashedCopyMatchesCpuTwin) {
  REQUIRE_GPU();
  auto gpu = make_cuda_device(0);
  auto cpu = make_cpu_device();
  std::mt19937_64 rng(29);
  for (int round = 0; round < 6; ++round) {
    HashedCase c = hashed_case(rng, round);
    std::vector<DeviceBuffer> src, dst;
    std::vector<CopyJob> gj = c.jobs;
    for (size_t k = 0; k < c.jobs.size(); ++k) {
      src.emplace_back(gpu.get(), int64_t(c.src[k].size()));
      dst.emplace_back(gpu.get(), int64_t(c.dst[k].size()));
      gpu->from_host(src.back().data(), c.src[k].data(), int64_t(c.src[k].size()));
      gpu->from_host(dst.back().data(), c.dst[k].data(), int64_t(c.dst[k].size()));
      gj[k].src = src.back().data();
      gj[k].dst = dst.back().data();
    }
    const std::vector<uint64_t> want = cpu->sums(cpu->copy_hashed(c.jobs));
    const std::vector<uint64_t> got = gpu->sums(gpu->copy_hashed(gj));
    EXPECT_EQ(got, want) << "round " << round;
    for (size_t k = 0; k < c.jobs.size(); ++k) {
      std::vector<uint8_t> back(c.dst[k].size());
      gpu->to_host(back.data(), dst[k].data(), int64_t(back.size()));
      EXPECT_EQ(back, c.dst[k]) << "round " << round << " job " << k << ": the copy itself";
      if (c.at_source[k]) {
        EXPECT_EQ(got[k], c.at_source[k]) << "round " << round << " job " << k << ": the source's sum";
      }
    }
  }
}

// Block FP8 on the GPU against its CPU twin, bit for bit (codes and scales): full blocks
// (the register path), partial edge blocks and an odd row stride (the element path), over
// random bf16 bit patterns of every exponent and a matrix of edge cases (a zero block, Inf,
// NaN, bf16 subnormals, values on ties once scaled).
// Delta records (device/delta.hpp) on the GPU against the host codec, byte for byte: chunks of
// odd and partial-segment sizes at densities 0 .. 1, several in one batch, anchors and first
// sends; the kept copies after encoding; the GPU's apply of those records; and malformed
// records refused with the host's words.
TEST(Kernels, DeltaRecordsMatchTheHostCodec) {
  REQUIRE_GPU();
  auto gpu = make_cuda_device(0);
  auto cpu = make_cpu_device();
  std::mt19937_64 rng(21);
  struct Case {
    int64_t bytes;
    double density;
    bool whole, have_kept;
  };
  const std::vector<Case> cases = {{4 << 20, 0.02, false, true}, {2048 * 5 + 6, 0.0, false, true},
                                   {2048 * 3, 1.0, false, true},  {1000, 0.3, false, true},
                                   {777, 0.02, false, true},      {(1 << 20) + 2, 0.001, false, true},
                                   {64 << 10, 0.02, true, true},  {64 << 10, 0.02, false, false},
                                   {2, 1.0, false, true},         {3 << 20, 0.6, false, true}};
  std::vector<std::vector<uint8_t>> fresh(cases.size()), kept(cases.size());
  std::vector<DeltaEncodeJob> cjobs, gjobs;
  std::vector<uint8_t*> grec, gkept;
  std::vector<std::vector<uint8_t>> crec(cases.size()), ckept(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    kept[i].resize(size_t(c.bytes));
    for (auto& b : kept[i]) b = uint8_t(rng());
    fresh[i] = kept[i];
    for (int64_t w = 0; w + 1 < c.bytes; w += 2)
      if (std::uniform_real_distribution<double>(0, 1)(rng) < c.density) fresh[i][size_t(w)] ^= uint8_t(1 + rng() % 255);
    crec[i].assign(size_t(kDeltaHeaderBytes + c.bytes), 0);
    std::memcpy(crec[i].data() + kDeltaHeaderBytes, fresh[i].data(), size_t(c.bytes));
    ckept[i] = kept[i];
    cjobs.push_back(DeltaEncodeJob{crec[i].data(), c.bytes, c.have_kept ? ckept[i].data() : nullptr, 7, 8, c.whole});
    grec.push_back(gpu->alloc(kDeltaHeaderBytes + c.bytes));
    gkept.push_back(gpu->alloc(c.bytes));
    gpu->from_host(grec[i] + kDeltaHeaderBytes, fresh[i].data(), c.bytes);
    gpu->from_host(gkept[i], kept[i].data(), c.bytes);
    gjobs.push_back(DeltaEncodeJob{grec[i], c.bytes, c.have_kept ? gkept[i] : nullptr, 7, 8, c.whole});
  }
  const std::vector<DeltaRecord> cr = cpu->delta_encode(cjobs), gr = gpu->delta_encode(gjobs);
  ASSERT_EQ(cr.size(), gr.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i) + ": " + std::to_string(c.bytes) + " bytes at density " + std::to_string(c.density));
    EXPECT_EQ(gr[i].bytes, cr[i].bytes);
    EXPECT_EQ(gr[i].index_bytes, cr[i].index_bytes);
    EXPECT_EQ(gr[i].changed_bytes, cr[i].changed_bytes);
    EXPECT_EQ(gr[i].whole, cr[i].whole);
    std::vector<uint8_t> rec(size_t(gr[i].bytes)), k(size_t(c.bytes));
    gpu->to_host(rec.data(), grec[i], gr[i].bytes);
    EXPECT_TRUE(std::equal(rec.begin(), rec.end(), crec[i].begin())) << "records differ";
    if (c.have_kept) {
      gpu->to_host(k.data(), gkept[i], c.bytes);
      EXPECT_EQ(k, fresh[i]) << "the GPU's kept chunk is not the fresh one";
      EXPECT_EQ(ckept[i], fresh[i]) << "the host's kept chunk is not the fresh one";
    }
    // The GPU applies the record to the old chunk and gets the fresh one.
    gpu->from_host(gkept[i], kept[i].data(), c.bytes);
    const DeltaRecord a = gpu->delta_apply(DeltaApplyJob{grec[i], gr[i].bytes, gkept[i], c.bytes, true, 7});
    EXPECT_EQ(a.index_bytes, cr[i].index_bytes);
    EXPECT_EQ(a.whole, cr[i].whole);
    gpu->to_host(k.data(), gkept[i], c.bytes);
    EXPECT_EQ(k, fresh[i]) << "apply did not bring the kept chunk to the fresh one";
  }
  // Malformed: the same refusals as the host's.
  const size_t d = 0;  // a delta record
  ASSERT_FALSE(cr[d].whole);
  auto refusal = [&](Device& dev, const uint8_t* rec, int64_t bytes, uint8_t* k, bool have, uint64_t version) {
    try {
      dev.delta_apply(DeltaApplyJob{rec, bytes, k, cases[d].bytes, have, version});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  std::vector<uint8_t> hk(size_t(cases[d].bytes));
  const std::string wrong_version = refusal(*gpu, grec[d], gr[d].bytes, gkept[d], true, 6);
  EXPECT_EQ(wrong_version, refusal(*cpu, crec[d].data(), cr[d].bytes, hk.data(), true, 6));
  EXPECT_NE(wrong_version.find("this rank holds version 6"), std::string::npos) << wrong_version;
  EXPECT_NE(refusal(*gpu, grec[d], gr[d].bytes, gkept[d], false, 7).find("never received"), std::string::npos);
  EXPECT_NE(refusal(*gpu, grec[d], gr[d].bytes - 2, gkept[d], true, 7).find("bytes for a chunk"), std::string::npos);
  const uint8_t zero = 0;
  gpu->from_host(grec[d], &zero, 1);  // the magic
  EXPECT_NE(refusal(*gpu, grec[d], gr[d].bytes, gkept[d], true, 7).find("no DLT1 header"), std::string::npos);
  for (size_t i = 0; i < cases.size(); ++i) {
    gpu->release(grec[i]);
    gpu->release(gkept[i]);
  }
}

TEST(Kernels, Fp8QuantizeMatchesCpuTwin) {
  REQUIRE_GPU();
  auto gpu = make_cuda_device(0);
  std::mt19937 rng(20);
  struct Case {
    int64_t rows, cols, src_ld;
  };
  for (const Case& c :
       {Case{256, 384, 384}, Case{300, 200, 200}, Case{130, 129, 131}, Case{1, 5, 5}, Case{1024, 2048, 2048}}) {
    for (int pattern = 0; pattern < 4; ++pattern) {
      std::vector<uint16_t> w(size_t(c.rows * c.src_ld));
      for (auto& x : w) x = uint16_t(rng());  // every exponent, NaN and Inf patterns too
      if (pattern == 2) {
        // Every bf16 of magnitude <= 448, and every Inf and NaN, both signs, in blocks whose
        // scale is 1 (each block's first element is 448): each code is the value's own
        // conversion, every tie and subnormal of e4m3fn among them.
        if ((c.rows / kFp8Block) * (c.cols / kFp8Block) < 3) continue;
        std::vector<uint16_t> every;
        for (uint32_t m = 0; m <= 0x7fff; ++m)
          if (m <= 0x43e0 || m >= 0x7f80) every.insert(every.end(), {uint16_t(m), uint16_t(m | 0x8000)});
        size_t next = 0;
        for (int64_t r0 = 0; r0 + kFp8Block <= c.rows; r0 += kFp8Block)
          for (int64_t c0 = 0; c0 + kFp8Block <= c.cols; c0 += kFp8Block)
            for (int64_t i = 0; i < kFp8Block * kFp8Block; ++i)
              w[size_t((r0 + i / kFp8Block) * c.src_ld + c0 + i % kFp8Block)] =
                  i == 0 ? uint16_t(0x43e0) : every[next++ % every.size()];
        ASSERT_GE(next, every.size());
      }
      if (pattern == 3) {
        // Weights as a trained model's: finite, both signs, magnitudes over 2^-16 .. 2^5 with
        // every mantissa, so block scales differ and quotients fall anywhere between codes
        // (the register path divides by the block's reciprocal and a correction: this checks
        // it against the twin's plain division).
        for (auto& x : w) x = uint16_t((rng() & 0x807f) | ((127 - 16 + rng() % 22) << 7));
      }
      if (pattern == 1) {
        for (int64_t r = 0; r < c.rows; ++r)
          for (int64_t k = 0; k < c.cols; ++k) {
            uint16_t& x = w[size_t(r * c.src_ld + k)];
            x = uint16_t(0x3f80 + (r * 7 + k) % 64);  // values 1 .. 1.49: many ties once scaled
            if (r < 128 && k < 128 && c.rows >= 256) x = 0;  // one zero block
          }
        w[0] = 0x7f80;                                                   // +Inf
        w[size_t(c.src_ld - 1 + (c.rows > 1 ? c.src_ld : 0))] = 0x7fc1;  // NaN
        w[size_t((c.rows - 1) * c.src_ld)] = 0x0003;                     // a bf16 subnormal
      }
      const int64_t br = (c.rows + kFp8Block - 1) / kFp8Block,
                    bc = (c.cols + kFp8Block - 1) / kFp8Block;
      const int64_t dst_ld = c.src_ld;
      std::vector<uint8_t> want(size_t(c.rows * dst_ld), 0xaa);
      std::vector<float> want_s(size_t(br * bc), -1.0f);
      cpu_quantize_fp8_blocks(w.data(), c.src_ld, c.rows, c.cols, want.data(), dst_ld,
                              want_s.data(), bc);
      DeviceBuffer src(gpu.get(), int64_t(w.size() * 2)), dst(gpu.get(), int64_t(want.size())),
          sc(gpu.get(), int64_t(want_s.size() * 4));
      std::vector<uint8_t> got(want.size(), 0xaa);
      std::vector<float> got_s(want_s.size(), -1.0f);
      gpu->from_host(src.data(), w.data(), int64_t(w.size() * 2));
      gpu->from_host(dst.data(), got.data(), int64_t(got.size()));
      gpu->from_host(sc.data(), got_s.data(), int64_t(got_s.size() * 4));
      gpu->quantize_fp8({QuantJob{src.data(), c.src_ld, dst.data(), dst_ld,
                                  reinterpret_cast<float*>(sc.data()), bc, c.rows, c.cols}});
      gpu->synchronize();
      gpu->to_host(got.data(), dst.data(), int64_t(got.size()));
      gpu->to_host(got_s.data(), sc.data(), int64_t(got_s.size() * 4));
      ASSERT_EQ(got, want) << c.rows << " x " << c.cols << " ld " << c.src_ld << " pattern "
                           << pattern;
      ASSERT_EQ(0, std::memcmp(got_s.data(), want_s.data(), want_s.size() * 4))
          << c.rows << " x " << c.cols;
    }
  }
  // Many jobs in one launch (more than ride in the launch's parameters: the job table is
  // uploaded): 40 bands of 128 rows of one matrix, each its own job, equal the whole matrix's.
  const int64_t rows = 40 * kFp8Block, cols = 256, bc = cols / kFp8Block;
  std::vector<uint16_t> w(size_t(rows * cols));
  for (auto& x : w) x = uint16_t((rng() & 0x807f) | ((127 - 16 + rng() % 22) << 7));
  std::vector<uint8_t> want(w.size()), got(w.size());
  std::vector<float> want_s(size_t(40 * bc)), got_s(want_s.size());
  cpu_quantize_fp8_blocks(w.data(), rows, cols, want.data(), want_s.data());
  DeviceBuffer src(gpu.get(), int64_t(w.size() * 2)), dst(gpu.get(), int64_t(got.size())),
      sc(gpu.get(), int64_t(got_s.size() * 4));
  gpu->from_host(src.data(), w.data(), int64_t(w.size() * 2));
  std::vector<QuantJob> jobs;
  for (int64_t band = 0; band < 40; ++band)
    jobs.push_back(QuantJob{src.data() + 2 * band * kFp8Block * cols, cols, dst.data() + band * kFp8Block * cols, cols,
                            reinterpret_cast<float*>(sc.data()) + band * bc, bc, kFp8Block, cols});
  gpu->quantize_fp8(jobs);
  gpu->synchronize();
  gpu->to_host(got.data(), dst.data(), int64_t(got.size()));
  gpu->to_host(got_s.data(), sc.data(), int64_t(got_s.size() * 4));
  EXPECT_EQ(got, want) << "40 jobs in one launch";
  EXPECT_EQ(0, std::memcmp(got_s.data(), want_s.data(), want_s.size() * 4)) << "40 jobs in one launch";
}

}  // namespace
}  // namespace shardsync
