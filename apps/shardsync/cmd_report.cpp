// shardsync report: a comparison table across sync/bench result files, and plots of them
// (gnuplot, PNG): time per engine, bandwidth against the measured link, per-phase times.
//
//   shardsync report results/cpu/*.json results/gpu/2xh200/*.json --plots results/plots
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "common/error.hpp"
#include "common/table.hpp"
#include "engine/engine_table.hpp"
#include "report/result_reader.hpp"

extern char** environ;

namespace shardsync {

namespace {

struct ReportOptions {
  std::vector<std::string> files;
  std::string plots = "results/plots";
  bool no_plots = false;
};

const char* const kPhases[] = {"gather_s", "pack_s", "transfer_s", "process_s", "verify_s"};

struct RunRow {
  std::string label;   // which run: file path without results/ and .json
  std::string model, memory;
  int ranks = 0;
  double link_gbps = 0;
  std::map<std::string, nlohmann::json> engines;  // engine name -> its summary
};

double num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string label_of(const std::string& path) {
  std::filesystem::path p(path);
  std::string s = (p.parent_path() / p.stem()).generic_string();
  const size_t r = s.rfind("results/");
  if (r != std::string::npos) return s.substr(r + 8);
  return s.rfind("./", 0) == 0 ? s.substr(2) : s;
}

// A result of `shardsync sync|bench --json` (report/result_reader.hpp); other JSON files,
// and results whose fields have the wrong types, are named and skipped.
bool read_run(const std::string& path, RunRow* out, std::string* why) {
  try {
    ResultFile r = read_result_file(path);
    out->label = label_of(path);
    out->model = r.model;
    out->ranks = r.ranks;
    out->memory = r.memory;
    out->link_gbps = r.link_gbps;
    for (EngineResult& e : r.engines) out->engines[e.engine] = std::move(e.summary);
    return true;
  } catch (const InputError& e) {
    std::string msg = e.what();
    *why = msg.rfind(path + ": ", 0) == 0 ? msg.substr(path.size() + 2) : msg;
    return false;
  }
}

void print_table(const std::vector<RunRow>& runs) {
  Table t({{"run", "", true}, {"model", "", true}, {"ranks", ""}, {"mem", "", true}, {"engine", "", true}, {"time", "s"},
           {"min", "s"}, {"gather", "s"}, {"pack", "s"}, {"transfer", "s"}, {"process", "s"}, {"moved", "MB"},
           {"agg_bw", "GB/s"}, {"of_link", "%"}, {"#wrong", ""}, {"vs_bcast", ""}});
  t.add_title("comparison of " + std::to_string(runs.size()) + " result file(s); times are per sync, mean over timed syncs");
  for (const RunRow& r : runs) {
    const auto bc = r.engines.find("broadcast");
    for (const auto& [name, e] : r.engines) {
      const double time = num(e["time_s"], "avg");
      const double bw = num(e, "aggregate_gbps");
      const double bc_time = bc != r.engines.end() ? num(bc->second["time_s"], "avg") : 0.0;
      const std::string vs = bc_time > 0 && time > 0 ? fmt_fixed(bc_time / time, 2) : "-";
      t.add_row({r.label, r.model, std::to_string(r.ranks), r.memory, name, fmt_fixed(time, 4),
                 fmt_fixed(num(e["time_s"], "min"), 4), fmt_fixed(num(e, "gather_s"), 4), fmt_fixed(num(e, "pack_s"), 4),
                 fmt_fixed(num(e, "transfer_s"), 4), fmt_fixed(num(e, "process_s"), 4),
                 fmt_fixed(num(e, "bytes_moved") / 1e6, 1), fmt_fixed(bw, 2),
                 r.link_gbps > 0 ? fmt_fixed(100 * bw / r.link_gbps, 1) : "-", fmt_int(int64_t(num(e, "wrong"))), vs});
    }
  }
  t.print(std::cout);
}

// gnuplot: one data file and one script per plot, kept next to the PNG so that anyone can
// restyle a plot without running anything again.
void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p);
  if (!(f << text)) throw InputError(p.string(), "(output)", "cannot write (directory not writable?)");
}

// A label column of a gnuplot data file: double-quoted (a double quote inside would end it).
std::string dat_label(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' ? '\'' : c;
  return q + "\"";
}

// A gnuplot string: single quotes take everything literally ('' is one quote).
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

// gnuplot SCRIPT, run without a shell (the path is an argument, never parsed); its output
// goes to gnuplot.log next to the script and is quoted on failure.
void run_gnuplot(const std::filesystem::path& script) {
  const std::filesystem::path log = script.parent_path() / "gnuplot.log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::string file = script.string();
  char prog[] = "gnuplot";
  char* argv[] = {prog, file.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "gnuplot", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    throw Error("cannot run gnuplot: " + std::string(std::strerror(rc)) + " (Debian package gnuplot-nox; make deps installs it)");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream f(log);
    std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    throw Error("gnuplot " + file + " failed: " + out.substr(0, 400));
  }
  std::filesystem::remove(log);
}

std::string plot_header(const std::string& png, const std::string& title, const std::string& ylabel, int runs) {
  const int width = std::max(900, 170 * runs + 300);
  return "set terminal pngcairo size " + std::to_string(width) + ",560 font 'sans,10'\nset output " + quoted(png) +
         "\nset title " + quoted(title) + "\nset ylabel " + quoted(ylabel) +
         "\nset style data histograms\nset style fill solid 0.85 border -1\nset boxwidth 0.9\nset grid ytics\n"
         "set key outside right top\nset xtics rotate by -25 left noenhanced\nset datafile missing '-'\n";
}

// The engines the plots show: every row of the engine table, then any other engine the runs
// hold (the PyTorch peers, "peer:..."), so that peers stand next to the engines.
std::vector<std::string> plotted_engines(const std::vector<RunRow>& runs) {
  std::vector<std::string> names;
  for (const EngineSpec& e : engine_table()) names.push_back(e.name);
  for (const RunRow& r : runs)
    for (const auto& [name, summary] : r.engines)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  return names;
}

// One data row per run: its label, then value(engine summary) for each plotted engine ("-"
// where the run lacks it), then `extra(run)` if given; a comment line names the columns.
template <class F, class G>
std::string engine_rows(const std::vector<RunRow>& runs, const std::vector<std::string>& names, const std::string& extra_name,
                        F&& value, G&& extra) {
  std::string d = "# run";
  for (const std::string& name : names) d += " " + name;
  d += (extra_name.empty() ? "" : " " + extra_name) + "\n";
  for (const RunRow& r : runs) {
    d += dat_label(r.label);
    for (const std::string& name : names) {
      auto it = r.engines.find(name);
      d += " " + (it == r.engines.end() ? std::string("-") : value(it->second));
    }
    d += extra(r) + "\n";
  }
  return d;
}

// gnuplot's plot clauses for the engine columns of engine_rows (labels in 1, then one
// column per plotted engine).
std::string engine_columns(const std::string& dat, const std::vector<std::string>& names) {
  std::string p;
  int col = 2;
  for (const std::string& name : names) {
    p += (col == 2 ? quoted(dat) + " using 2:xtic(1)" : ", '' using " + std::to_string(col)) + " title " + quoted(name);
    ++col;
  }
  return p;
}

std::vector<std::filesystem::path> write_plots(const std::vector<RunRow>& runs, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(dir.string(), "--plots", "cannot create the directory: " + ec.message());
  std::vector<std::filesystem::path> pngs;
  auto dat = [&](const std::string& stem) { return (dir / (stem + ".dat")).string(); };
  auto png = [&](const std::string& stem) { return (dir / (stem + ".png")).string(); };
  auto emit = [&](const std::string& stem, const std::string& data, const std::string& script) {
    write_file(dat(stem), data);
    write_file(dir / (stem + ".gp"), script);
    run_gnuplot(dir / (stem + ".gp"));
    pngs.push_back(png(stem));
  };
  const int n = int(runs.size());
  auto none = [](const RunRow&) { return std::string(); };
  const std::vector<std::string> names = plotted_engines(runs);

  // 1. Time per engine: one cluster per run, one bar per engine (log scale: the runs span
  //    milliseconds on GPUs to seconds on an oversubscribed CPU).
  {
    const std::string d =
        engine_rows(runs, names, "", [](const nlohmann::json& e) { return fmt_fixed(num(e["time_s"], "avg"), 6); }, none);
    std::string gp = plot_header(png("time-per-engine"), "Sync time per engine (mean over timed syncs, every byte verified)",
                                 "seconds per sync (log scale)", n) +
                     "set logscale y\nplot " + engine_columns(dat("time-per-engine"), names) + "\n";
    emit("time-per-engine", d, gp);
  }
  // 2. Bandwidth against the link: aggregate bandwidth per engine, and the pull path's raw
  //    bandwidth measured in the same run (--measure-link) where it was.
  {
    const bool any_link = std::any_of(runs.begin(), runs.end(), [](const RunRow& r) { return r.link_gbps > 0; });
    const std::string d =
        engine_rows(runs, names, "link", [](const nlohmann::json& e) { return fmt_fixed(num(e, "aggregate_gbps"), 3); },
                    [](const RunRow& r) { return " " + (r.link_gbps > 0 ? fmt_fixed(r.link_gbps, 3) : std::string("-")); });
    std::string gp = plot_header(png("bandwidth"),
                                 std::string("Aggregate bandwidth per engine") +
                                     (any_link ? " vs the measured pull-path link (hatched)" : " (no run measured its link: --measure-link)"),
                                 "GB/s received by all inference ranks (log scale)", n) +
                     "set logscale y\nplot " + engine_columns(dat("bandwidth"), names) +
                     (any_link ? ", '' using " + std::to_string(int(names.size()) + 2) +
                                     " title 'link limit' lc rgb 'black' fs pattern 4"
                               : "") +
                     "\n";
    emit("bandwidth", d, gp);
  }
  // 3. Per-phase breakdown: each phase's share of the busy time of a (run, engine), so that
  //    runs of milliseconds and of seconds compare (the times are in the .dat file and the
  //    table). Phases overlap in v3, and transfer sums overlapping gets.
  {
    std::string d = "# run/engine gather% pack% transfer% process% verify% | gather_s pack_s transfer_s process_s verify_s sync_s\n";
    for (const RunRow& r : runs)
      for (const std::string& name : names) {
        auto it = r.engines.find(name);
        if (it == r.engines.end()) continue;
        double sum = 0;
        for (const char* ph : kPhases) sum += num(it->second, ph);
        d += dat_label(r.label + " " + name);
        for (const char* ph : kPhases) d += " " + fmt_fixed(sum > 0 ? 100 * num(it->second, ph) / sum : 0.0, 2);
        for (const char* ph : kPhases) d += " " + fmt_fixed(num(it->second, ph), 6);
        d += " " + fmt_fixed(num(it->second["time_s"], "avg"), 6) + "\n";
      }
    int bars = 0;
    for (const RunRow& r : runs) bars += int(r.engines.size());
    std::string gp = plot_header(png("phases"),
                                 "Where the time goes: share of busy time per phase (trainer: gather, pack; inference: "
                                 "transfer, process, verify)",
                                 "% of the summed phase times", std::max(n, bars / 2)) +
                     "set style histogram rowstacked\nset yrange [0:100]\nplot " + quoted(dat("phases")) +
                     " using 2:xtic(1) title 'gather', '' using 3 title 'pack', '' using 4 title 'transfer', '' using 5 title "
                     "'process', '' using 6 title 'verify'\n";
    emit("phases", d, gp);
  }
  return pngs;
}

void run_report(const ReportOptions& o) {
  std::vector<RunRow> runs;
  for (const std::string& f : o.files) {
    RunRow r;
    std::string why;
    if (read_run(f, &r, &why)) runs.push_back(std::move(r));
    else std::cerr << "shardsync report: skipped " << f << ": " << why << "\n";
  }
  if (runs.empty()) throw InputError("report", "FILES", "none of the " + std::to_string(o.files.size()) + " file(s) is a sync/bench result (shardsync bench --json)");
  print_table(runs);
  if (o.no_plots) return;
  for (const auto& png : write_plots(runs, o.plots)) std::cout << "# wrote " << png.string() << "\n";
}

}  // namespace

void setup_report_command(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  auto* cmd = app.add_subcommand("report", "Compare sync/bench result files: a table, and PNG plots (gnuplot)");
  cmd->add_option("files", o->files, "Result JSON files (shardsync sync|bench --json); others are skipped with a note")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--plots", o->plots, "Directory for the PNGs (with the .dat and .gp files that made them)")
      ->capture_default_str();
  cmd->add_flag("--no-plots", o->no_plots, "Print the table only");
  cmd->callback([o] { run_report(*o); });
}

}  // namespace shardsync
