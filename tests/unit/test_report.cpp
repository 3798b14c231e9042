// Report figures follow their written definitions (report/report.h).
#include <gtest/gtest.h>

#include "report/progress.h"
#include "report/report.h"

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
