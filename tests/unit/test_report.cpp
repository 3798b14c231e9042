// Report figures follow their written definitions (report/report.h).
#include <gtest/gtest.h>

#include "report/progress.h"
#include "report/report.h"
#include "report/series.h"

using namespace sluice;

namespace {
RankReport rank(int r, int64_t samples, double wall, int64_t batches = 10, double first = 0.5) {
  RankReport x;
  x.rank = r;
  x.host = "h";
  x.device = "host";
  x.engine = "cpu";
  x.stats.samples = samples;
  x.stats.batches = batches;
  x.stats.wall_s = wall;
  x.stats.first_batch_s = first;
  x.stats.compute_s = wall / 2;
  return x;
}
}  // namespace

TEST(Report, ThroughputIsSamplesOverMakespan) {
  JobReport j;
  j.ranks = {rank(0, 100, 10), rank(1, 300, 20)};
  EXPECT_EQ(j.samples(), 400);
  EXPECT_DOUBLE_EQ(j.makespan_s(), 20);
  EXPECT_DOUBLE_EQ(j.throughput(), 20);
  EXPECT_DOUBLE_EQ(j.imbalance(), 20 / 15.0);
}

TEST(Report, SteadyRateLeavesTheFirstBatchOut) {
  RankReport r = rank(0, 100, 10.5, 10, 0.5);  // 10 batches of 10; the first took 0.5 s
  EXPECT_DOUBLE_EQ(r.steady_images_per_s(), 90 / 10.0);
  EXPECT_NEAR(r.images_per_s(), 100 / 10.5, 1e-12);
}

TEST(Report, RankRoundTripsThroughJson) {
  RankReport a = rank(3, 77, 4.25);
  a.stats.stall_output_s = 0.125;
  a.stats.encode_s = 0.75;
  RankReport b = RankReport::from_json(a.to_json());
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.stats.samples, 77);
  EXPECT_DOUBLE_EQ(b.stats.wall_s, 4.25);
  EXPECT_DOUBLE_EQ(b.stats.stall_output_s, 0.125);
  EXPECT_DOUBLE_EQ(b.stats.encode_s, 0.75);
  EXPECT_DOUBLE_EQ(a.to_json()["busy"]["compute"].get<double>(), 0.5);
}

TEST(Report, JsonHasTheJobSummary) {
  JobReport j;
  j.total_samples = 400;
  j.complete = true;
  j.ranks = {rank(0, 100, 10), rank(1, 300, 20)};
  auto js = j.to_json();
  EXPECT_EQ(js["job"]["samples"].get<int64_t>(), 400);
  EXPECT_DOUBLE_EQ(js["job"]["rank_images_per_s"]["min"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(js["job"]["rank_images_per_s"]["max"].get<double>(), 15);
  EXPECT_TRUE(js["job"]["complete"].get<bool>());
  EXPECT_NE(format_report_table(j).find("complete"), std::string::npos);
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(65.4), "1:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Report, LimitNamesTheBusiestStagePerThread) {
  RankReport r = rank(0, 100, 10);
  r.stats.compute_s = 9.7;
  EXPECT_EQ(r.limit(), "compute-bound: compute 97 % busy");
  r.stats.compute_s = 3;
  r.reader_threads = 2;
  r.stats.read_s = 19.4;  // two readers, 97 % busy each
  EXPECT_EQ(r.limit(), "input-bound: read (2 reader threads) 97 % busy");
  r.stats.read_s = 1;
  r.stats.write_s = 8.8;
  EXPECT_EQ(r.limit(), "output-bound: write 88 % busy");
  r.stats.write_s = 1;
  EXPECT_EQ(r.limit().rfind("latency-bound: no stage is busy (busiest: compute 30 %)", 0), 0u) << r.limit();
}

TEST(Report, SlowestRankIsTheLongestWall) {
  JobReport j;
  j.ranks = {rank(0, 100, 10), rank(1, 300, 20), rank(2, 50, 5)};
  ASSERT_NE(j.slowest(), nullptr);
  EXPECT_EQ(j.slowest()->rank, 1);
  EXPECT_EQ(j.to_json()["job"]["slowest"]["rank"], 1);
}

TEST(ReportSeries, ThinningKeepsTotalsAndDoublesTheInterval) {
  SeriesRecorder rec(nullptr, 1.0, 8);
  for (int i = 1; i <= 20; ++i) {
    PipelineStats s;
    s.wall_s = i;
    s.samples = 10 * i;
    s.compute_s = 0.5 * i;
    rec.add(s);
  }
  PipelineStats last;
  last.wall_s = 20.5;
  last.samples = 205;
  rec.stop(last);
  const auto j = rec.to_json();
  const auto& t = j["t"];
  ASSERT_LE(t.size(), 9u);
  EXPECT_GT(j["interval_s"].get<double>(), 1.0);
  EXPECT_EQ(j["samples"].back(), 205);  // the final point is always there: totals survive thinning
  for (std::size_t i = 1; i < t.size(); ++i) EXPECT_LT(t[i - 1].get<double>(), t[i].get<double>());
  for (std::size_t i = 0; i < t.size(); ++i)  // every array keeps the same points
    if (t[i].get<double>() <= 20) EXPECT_DOUBLE_EQ(j["busy"]["compute"][i].get<double>(), 0.5 * t[i].get<double>());
}

TEST(ReportAttempts, ThinSeriesKeepsEveryArrayAligned) {
  nlohmann::json s;
  std::vector<double> t, c;
  for (int i = 0; i < 100; ++i) {
    t.push_back(i);
    c.push_back(2.0 * i);
  }
  s["t"] = t;
  s["samples"] = t;
  s["busy"] = {{"compute", c}};
  const auto thin = thin_series(s, 10);
  ASSERT_EQ(thin["t"].size(), 10u);
  EXPECT_EQ(thin["t"].front(), 0.0);
  EXPECT_EQ(thin["t"].back(), 99.0);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(thin["busy"]["compute"][i].get<double>(), 2 * thin["t"][i].get<double>());
}

TEST(Report, LimitNamesTheStallWhenTheDriverMostlyWaits) {
  RankReport r = rank(0, 100, 10);
  r.reader_threads = 8;
  r.stats.compute_s = 5.6;
  r.stats.read_s = 33.6;       // 42 % per thread: no single stage looks busy
  r.stats.stall_input_s = 9.4;
  EXPECT_EQ(r.limit(), "input-bound: the driver waited for input 94 % of the time (read (8 reader threads) 42 % busy per thread)");
}

namespace {
// A rank with a different value in every figure, so a stage that lands under the wrong key, or
// drops out of one of the report's views, changes the text.
RankReport every_figure_set() {
  RankReport r = rank(2, 1000, 8, 20, 0.25);
  r.reader_threads = 3;
  r.writer_threads = 2;
  r.start_unix = 1700000000.5;
  auto& s = r.stats;
  s.chunks = 5;
  s.nonfinite_rows = 7;
  s.read_s = 1.5;
  s.decode_cpu_s = 0.75;
  s.decode_s = 1.25;
  s.h2d_s = 0.5;
  s.compute_s = 6.0;
  s.d2h_s = 0.375;
  s.encode_s = 2.25;
  s.write_s = 1.125;
  s.stall_input_s = 0.625;
  s.stall_output_s = 0.875;
  r.setup_s = 3.5;
  r.setup.input_s = 0.125;
  r.setup.model_load_s = 0.5;
  r.setup.engine_build_s = 0.75;
  r.setup.autotune_s = 1.25;
  r.setup.capture_s = 0.375;
  r.setup.algos_measured = 11;
  r.setup.algos_cached = 13;
  return r;
}
}  // namespace

TEST(Report, EveryStageKeepsItsPlaceInTheJsonTheTableAndTheSeries) {
  RankReport r = every_figure_set();
  SeriesRecorder rec(nullptr, 1.0);
  rec.add(r.stats);
  r.series = rec.to_json();
  EXPECT_EQ(r.to_json().dump(), "{\"bad_files\":[],\"bad_samples\":0,\"batches\":20,\"busy\":{\"compute\":0.75,\"d2h\":0.046875,\"decode\":0.15625,\"encode\":0.28125,\"h2d\":0.0625,\"read\":0.1875,\"write\":0.140625},\"chunks\":5,\"clock_offset_s\":0.0,\"device\":\"host\",\"engine\":\"cpu\",\"first_batch_s\":0.25,\"gpu\":-1,\"host\":\"h\",\"images_per_s\":125.0,\"limit\":\"compute-bound: compute 75 % busy\",\"local_rank\":0,\"local_size\":1,\"nonfinite_rows\":7,\"rank\":2,\"reader_threads\":3,\"samples\":1000,\"seconds\":{\"compute\":6.0,\"d2h\":0.375,\"decode\":1.25,\"decode_cpu\":0.75,\"encode\":2.25,\"h2d\":0.5,\"read\":1.5,\"stall_input\":0.625,\"stall_output\":0.875,\"write\":1.125},\"series\":{\"busy\":{\"compute\":[6.0],\"d2h\":[0.375],\"decode\":[1.25],\"encode\":[2.25],\"h2d\":[0.5],\"read\":[1.5],\"write\":[1.125]},\"interval_s\":1.0,\"samples\":[1000],\"stall\":{\"input\":[0.625],\"output\":[0.875]},\"t\":[8.0]},\"setup\":{\"algorithms_cached\":13,\"algorithms_measured\":11,\"autotune_s\":1.25,\"engine_build_s\":0.75,\"graph_capture_s\":0.375,\"input_s\":0.125,\"model_load_s\":0.5,\"other_s\":0.5,\"share_s\":0.0},\"setup_s\":3.5,\"stall\":{\"input\":0.078125,\"output\":0.109375},\"start_unix\":1700000000.5,\"steady_images_per_s\":122.58064516129032,\"wall_s\":8.0,\"writer_threads\":2}");
  EXPECT_EQ(RankReport::from_json(r.to_json()).to_json().dump(), r.to_json().dump());
  JobReport j;
  j.total_samples = 1000;
  j.complete = true;
  j.ranks = {r};
  EXPECT_EQ(format_report_table(j), "\nrank host           device                  samples chunks   wall s     img/s  steady/s   read    h2d   comp    d2h  write   st.in  st.out\n   2 h              host                       1000      5     8.00     125.0     122.6    19%     6%    75%     5%    14%      8%     11%\njob: 1000 samples on 1 rank(s) in 8.00 s: 125.0 images/s  (rank min/mean/max 125.0/125.0/125.0, imbalance 1.00)\nlimit: compute-bound: compute 75 % busy\nset-up: 3.50 s: input 0.12 s, model load 0.50 s, engine build 0.75 s, autotune 1.25 s (11 measured, 13 cached), graph capture 0.38 s, other 0.50 s; then the first batch 0.25 s\ninputs: 7 sample(s) held NaN or Inf values (computed as given; /sample_status 2)\nstatus: complete: all 1000 samples committed\n");
}

TEST(Report, LimitCanNameEveryStage) {
  const auto limit_with = [](double PipelineStats::*field, double seconds, int readers = 1, int writers = 1) {
    RankReport r = rank(0, 100, 10);
    r.stats.compute_s = 1;
    r.reader_threads = readers;
    r.writer_threads = writers;
    r.stats.*field = seconds;
    return r.limit();
  };
  EXPECT_EQ(limit_with(&PipelineStats::h2d_s, 9.5), "copy-bound: h2d 95 % busy");
  EXPECT_EQ(limit_with(&PipelineStats::d2h_s, 9.25), "copy-bound: d2h 92 % busy");
  EXPECT_EQ(limit_with(&PipelineStats::decode_s, 9.0), "input-bound: GPU decode 90 % busy");
  EXPECT_EQ(limit_with(&PipelineStats::encode_s, 19.0, 1, 2), "output-bound: encode (2 writer threads) 95 % busy");
  EXPECT_EQ(limit_with(&PipelineStats::read_s, 9.6), "input-bound: read (1 reader thread) 96 % busy");
  RankReport cpu = rank(0, 100, 10);
  cpu.stats.compute_s = 1;
  cpu.stats.read_s = 4;
  cpu.stats.decode_s = cpu.stats.decode_cpu_s = 5.5;  // decoded on the reader thread
  EXPECT_EQ(cpu.limit(), "input-bound: read + decode (1 reader thread) 95 % busy");
  RankReport waits = rank(0, 100, 10);
  waits.stats.write_s = 3;
  waits.stats.stall_output_s = 7;
  EXPECT_EQ(waits.limit(), "output-bound: the driver waited for a free output slot 70 % of the time (write 30 % busy)");
  RankReport none = rank(0, 100, 10);
  none.stats.compute_s = 0;
  EXPECT_EQ(none.limit(), "latency-bound: no stage is busy (busiest: compute 0 %); more batches in flight (--prefetch, larger --batch-size) or a longer run would help");
  EXPECT_EQ(rank(0, 100, 10, 0).limit(), "idle: no batch");
}

TEST(Report, SetUpPartsRoundTripAndTheRestIsOther) {
  RankReport r = rank(0, 100, 10);
  r.setup_s = 10;
  r.setup.input_s = 0.5;
  r.setup.model_load_s = 1;
  r.setup.engine_build_s = 2;
  r.setup.autotune_s = 5;
  r.setup.capture_s = 0.25;
  r.setup.algos_measured = 37;
  r.setup.algos_cached = 12;
  EXPECT_DOUBLE_EQ(r.setup_other_s(), 1.25);
  const RankReport back = RankReport::from_json(r.to_json());
  EXPECT_DOUBLE_EQ(back.setup.autotune_s, 5);
  EXPECT_DOUBLE_EQ(back.setup.capture_s, 0.25);
  EXPECT_EQ(back.setup.algos_measured, 37);
  EXPECT_EQ(back.setup.algos_cached, 12);
  EXPECT_DOUBLE_EQ(r.to_json()["setup"]["other_s"].get<double>(), 1.25);
  // A report written before the parts existed reads back with the total alone.
  nlohmann::json old = r.to_json();
  old.erase("setup");
  EXPECT_DOUBLE_EQ(RankReport::from_json(old).setup.autotune_s, 0);
  EXPECT_DOUBLE_EQ(RankReport::from_json(old).setup_other_s(), 10);
}

TEST(Report, TheSetUpLineShowsTheLongestRanksPartsAndOnlyThoseItHad) {
  JobReport j;
  j.world_size = 2;
  j.ranks = {rank(0, 100, 10), rank(1, 100, 10)};
  j.ranks[0].setup_s = 1;
  j.ranks[0].setup.model_load_s = 0.5;
  j.ranks[1].setup_s = 3;
  j.ranks[1].setup.engine_build_s = 1;
  j.ranks[1].setup.autotune_s = 1.5;
  j.ranks[1].setup.algos_measured = 4;
  const std::string line = format_setup_line(j);
  EXPECT_EQ(line.rfind("set-up: 3.00 s (rank 1, the longest): ", 0), 0u) << line;
  EXPECT_NE(line.find("autotune 1.50 s (4 measured, 0 cached)"), std::string::npos) << line;
  EXPECT_EQ(line.find("graph capture"), std::string::npos) << "no capture happened: " << line;
  EXPECT_NE(line.find("other 0.50 s; then the first batch 0.50 s"), std::string::npos) << line;
  EXPECT_NE(format_report_table(j).find(line), std::string::npos);
}

TEST(Report, TheSetUpLineNamesTheAutotuneModeAndWhetherItTimedAnything) {
  JobReport j;
  j.world_size = 1;
  j.ranks = {rank(0, 100, 10)};
  j.ranks[0].setup_s = 2;
  j.ranks[0].setup.autotune_s = 0.3;
  j.ranks[0].setup.algos_measured = 31;
  j.ranks[0].setup.algos_cached = 30;
  j.ranks[0].setup.autotune = "off";
  EXPECT_NE(format_setup_line(j).find("autotune 0.30 s (off: 31 by cuDNN's first choice, 30 cached)"), std::string::npos)
      << format_setup_line(j);
  j.ranks[0].setup.autotune = "full";
  EXPECT_NE(format_setup_line(j).find("autotune 0.30 s (full: 31 measured, 30 cached)"), std::string::npos)
      << format_setup_line(j);
  const RankReport back = RankReport::from_json(j.ranks[0].to_json());
  EXPECT_EQ(back.setup.autotune, "full");
  // The CPU engine has no mode: the key is left out.
  j.ranks[0].setup.autotune.clear();
  EXPECT_FALSE(j.ranks[0].to_json()["setup"].contains("autotune"));
}
