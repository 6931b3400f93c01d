// shardsync-fp8-bench: block FP8 quantization (Device::quantize_fp8, device/fp8.hpp) on a
// device, every code and scale checked against the CPU twin, timed against a plain copy.
//
//   shardsync-fp8-bench --device cuda --rows 16384 --cols 16384 --reps 20 --json fp8.json
//       synthetic bf16 weights [rows, cols] (synth_element: bell-shaped, outliers) quantized
//       into e4m3fn codes and fp32 scales per 128 x 128 block. Bytes of a quantization: the
//       bf16 read, the codes and scales written; its rate against that of a device copy of the
//       bf16 matrix (read + write) in the same run, the memory bound this device reaches.
//   shardsync-fp8-bench --device cuda --rows R --cols C --in X.bf16 --out DIR
//       quantizes the raw little-endian bf16 matrix in X.bf16 on the device and with the CPU
//       twin and writes DIR/{device,twin}.{codes,scales}: what scripts/gpu/fp8_vs_torch.py
//       compares with PyTorch's float8_e4m3fn conversion.
//
// Exit status: 0 every code and scale equal to the twin's, 1 a mismatch, 2 bad input.
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/table.hpp"
#include "device/device.hpp"
#include "device/fp8.hpp"
#include "device/synth_hash.hpp"
#include "tensor/view.hpp"  // make_pack_desc
#include "git_sha.hpp"  // SHARDSYNC_GIT_SHA

using namespace shardsync;

namespace {

struct Options {
  std::string device = "cpu";
  int64_t rows = 4096, cols = 4096;
  int reps = 10;
  std::string in, out, json;
};

std::vector<uint8_t> read_file(const std::string& path, int64_t bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path, "--in", "a readable file");
  std::vector<uint8_t> v(static_cast<size_t>(bytes));
  f.read(reinterpret_cast<char*>(v.data()), bytes);
  if (f.gcount() != bytes || f.peek() != std::ifstream::traits_type::eof())
    throw InputError(path, "--in", "exactly rows x cols x 2 = " + std::to_string(bytes) + " bytes of bf16");
  return v;
}

void write_file(const std::filesystem::path& p, const void* data, int64_t bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), bytes);
  if (!f) throw Error("cannot write " + p.string());
}

int run(const Options& o) {
  const int64_t n = o.rows * o.cols, br = (o.rows + kFp8Block - 1) / kFp8Block,
                bc = (o.cols + kFp8Block - 1) / kFp8Block;
  std::unique_ptr<Device> dev = o.device == "cuda" ? make_cuda_device(0) : make_cpu_device();
  DeviceBuffer src(dev.get(), 2 * n), codes(dev.get(), n), scales(dev.get(), 4 * br * bc), copy(dev.get(), 2 * n);
  std::vector<uint8_t> host;
  if (!o.in.empty()) {
    host = read_file(o.in, 2 * n);
    dev->from_host(src.data(), host.data(), 2 * n);
  } else {
    dev->synth({SynthJob{src.data(), synth_seed(0, 1), make_pack_desc(SubView::contiguous({o.rows, o.cols}), 0), 2, false}});
    host.resize(size_t(2 * n));
    dev->to_host(host.data(), src.data(), 2 * n);
  }
  const QuantJob job{src.data(), o.cols, codes.data(), o.cols, reinterpret_cast<float*>(scales.data()), bc, o.rows, o.cols};
  auto time_it = [&](const std::function<void()>& f) {
    f();
    dev->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o.reps; ++i) f();
    dev->synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.reps;
  };
  const double t_quant = time_it([&] { dev->quantize_fp8({job}); });
  const double t_copy = time_it([&] { dev->memcpy(copy.data(), src.data(), 2 * n); });

  // The twin's bits, and the device's compared with them.
  std::vector<uint8_t> want_codes(static_cast<size_t>(n)), got_codes(static_cast<size_t>(n));
  std::vector<float> want_scales(size_t(br * bc)), got_scales(size_t(br * bc));
  cpu_quantize_fp8_blocks(reinterpret_cast<const uint16_t*>(host.data()), o.rows, o.cols, want_codes.data(),
                          want_scales.data());
  dev->to_host(got_codes.data(), codes.data(), n);
  dev->to_host(got_scales.data(), scales.data(), 4 * br * bc);
  int64_t wrong_codes = 0, wrong_scales = 0;
  for (int64_t i = 0; i < n; ++i) wrong_codes += got_codes[size_t(i)] != want_codes[size_t(i)];
  for (int64_t i = 0; i < br * bc; ++i)
    wrong_scales += float_to_bits(got_scales[size_t(i)]) != float_to_bits(want_scales[size_t(i)]);
  if (!o.out.empty()) {
    const std::filesystem::path d(o.out);
    std::filesystem::create_directories(d);
    write_file(d / "device.codes", got_codes.data(), n);
    write_file(d / "device.scales", got_scales.data(), 4 * br * bc);
    write_file(d / "twin.codes", want_codes.data(), n);
    write_file(d / "twin.scales", want_scales.data(), 4 * br * bc);
  }

  const double q_bytes = double(2 * n + n + 4 * br * bc), c_bytes = double(4 * n);
  const double q_rate = q_bytes / t_quant / 1e9, c_rate = c_bytes / t_copy / 1e9;
  std::cout << "# " << dev->describe() << ": bf16 [" << o.rows << ", " << o.cols << "] -> e4m3fn codes and "
            << br * bc << " fp32 scales (128 x 128 blocks), " << o.reps << " timed repetitions, commit "
            << SHARDSYNC_GIT_SHA << "\n";
  Table t({{"op", "", true}, {"bytes", "B"}, {"time", "us"}, {"rate", "GB/s"}, {"of_copy", "%"}, {"#wrong", ""}});
  t.add_row({"copy", fmt_int(int64_t(c_bytes)), fmt_fixed(t_copy * 1e6, 1), fmt_fixed(c_rate, 1), "100.0", "-"});
  t.add_row({"quantize", fmt_int(int64_t(q_bytes)), fmt_fixed(t_quant * 1e6, 1), fmt_fixed(q_rate, 1),
             fmt_fixed(100 * q_rate / c_rate, 1), fmt_int(wrong_codes + wrong_scales)});
  t.print(std::cout);
  if (wrong_codes + wrong_scales)
    std::cout << "# MISMATCH with the CPU twin: " << wrong_codes << " codes, " << wrong_scales << " scales\n";
  if (!o.json.empty()) {
    nlohmann::json j = {{"device", dev->describe()}, {"rows", o.rows}, {"cols", o.cols}, {"blocks", br * bc},
                        {"reps", o.reps}, {"input", o.in.empty() ? "synthetic" : o.in},
                        {"quantize_s", t_quant}, {"quantize_bytes", q_bytes}, {"quantize_GBps", q_rate},
                        {"copy_s", t_copy}, {"copy_bytes", c_bytes}, {"copy_GBps", c_rate},
                        {"quantize_of_copy", q_rate / c_rate}, {"wrong_codes", wrong_codes},
                        {"wrong_scales", wrong_scales}, {"commit", SHARDSYNC_GIT_SHA}};
    std::ofstream(o.json) << j.dump(1) << "\n";
  }
  return wrong_codes + wrong_scales == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Block FP8 quantization on a device: checked against the CPU twin, timed against a copy"};
  Options o;
  app.add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--rows", o.rows, "Rows of the bf16 matrix")->check(CLI::Range(int64_t(1), int64_t(1) << 20))->capture_default_str();
  app.add_option("--cols", o.cols, "Columns of the bf16 matrix")->check(CLI::Range(int64_t(1), int64_t(1) << 20))->capture_default_str();
  app.add_option("--reps", o.reps, "Timed repetitions")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--in", o.in, "Quantize this raw little-endian bf16 matrix (rows x cols) instead of synthetic weights");
  app.add_option("--out", o.out, "Write {device,twin}.{codes,scales} to this directory");
  app.add_option("--json", o.json, "Write the numbers to this JSON file");
  try {
    app.parse(argc, argv);
    if (o.rows * o.cols > (int64_t(1) << 34))
      throw InputError("--rows x --cols", std::to_string(o.rows * o.cols), "at most 2^34 elements");
    return run(o);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "shardsync-fp8-bench: error: " << e.what() << "\n";
    return 2;
  }
}
