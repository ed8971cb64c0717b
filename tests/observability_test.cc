// Metrics and dashboards against the real thing: a real Prometheus scrapes a
// real coordinator and two worker daemons (whose /metrics carry their
// trainers' metrics) while they train; then every PromQL expression of the
// Grafana dashboard and every recording rule must return data, promtool must
// accept every /metrics page, and the scraped throughput must agree with the
// throughput the trainers report to the coordinator.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "tests/harness/http_client.h"
#include "tests/harness/local_cluster.h"

namespace herd::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kPromtool[] = "/usr/bin/promtool";
constexpr int kWorkers = 2;
constexpr int kBatch = 32;  // kJob's batch_size

// Long enough never to finish during the test (it is cancelled at the end);
// a small synthetic set so epochs, and with them evaluations, come often.
constexpr char kJob[] =
    "name: observability\n"
    "model: mlp\n"
    "dataset: {kind: synthetic, synthetic_samples: 2048}\n"
    "batch_size: 32\n"
    "max_steps: 1000000\n"
    "optimizer: {name: sgd, lr: 0.05}\n"
    "seed: 7\n"
    "min_workers: 2\n"
    "max_workers: 2\n";

// Every trainer series the worker pages must carry, and the coordinator's.
const std::vector<std::string> kTrainerMetrics = {
    "herd_train_samples_total",
    "herd_train_steps_total",
    "herd_train_step_duration_seconds_bucket",
    "herd_train_forward_seconds_total",
    "herd_train_backward_seconds_total",
    "herd_train_optimizer_seconds_total",
    "herd_train_allreduce_wait_seconds_total",
    "herd_train_allreduce_bytes_total",
    "herd_train_buckets_launched_during_backward_total",
    "herd_train_loss",
    "herd_train_epoch",
    "herd_train_step",
    "herd_train_world_size",
    "herd_train_generation",
    "herd_train_last_checkpoint_timestamp_seconds",
    "herd_train_eval",
};
const std::vector<std::string> kCoordinatorMetrics = {
    "herd_coordinator_jobs",
    "herd_coordinator_workers_alive",
    "herd_coordinator_generations_started_total",
    "herd_coordinator_rendezvous_duration_seconds_bucket",
    "herd_coordinator_rpcs_total",
    "herd_coordinator_checkpoints_recorded_total",
};

std::string Runfile(const std::string& path) { return LocalCluster::Binary(path); }

// One cluster, one job and one Prometheus for the whole suite.
struct Env {
  std::unique_ptr<LocalCluster> cluster;
  std::string job_id;
  std::string coordinator_metrics;
  std::vector<std::string> worker_metrics;
  std::unique_ptr<Process> prometheus;
  std::string prometheus_address;
};
Env* env = nullptr;

// The example configuration with this cluster's targets and 1 s intervals.
std::string WritePrometheusConfig(const std::string& dir) {
  YAML::Node config = YAML::LoadFile(Runfile("dashboards/prometheus.yml"));
  config["global"]["scrape_interval"] = "1s";
  config["global"]["evaluation_interval"] = "1s";
  YAML::Node rules(YAML::NodeType::Sequence);
  rules.push_back(Runfile("dashboards/herd-rules.yml"));
  config["rule_files"] = rules;
  std::set<std::string> jobs;
  for (YAML::Node scrape : config["scrape_configs"]) {
    const std::string name = scrape["job_name"].as<std::string>();
    jobs.insert(name);
    // Trainer series carry their own `job` label; without honor_labels
    // Prometheus would rename it and the dashboard's $job would match nothing.
    EXPECT_TRUE(scrape["honor_labels"] && scrape["honor_labels"].as<bool>()) << name << " needs honor_labels: true";
    YAML::Node targets(YAML::NodeType::Sequence);
    if (name == "herd-coordinator") {
      targets.push_back(env->coordinator_metrics);
    } else if (name == "herd-worker") {
      for (const std::string& address : env->worker_metrics) targets.push_back(address);
    } else {
      ADD_FAILURE() << "unexpected scrape job " << name << " in dashboards/prometheus.yml";
    }
    YAML::Node static_config;
    static_config["targets"] = targets;
    YAML::Node static_configs(YAML::NodeType::Sequence);
    static_configs.push_back(static_config);
    scrape["static_configs"] = static_configs;
  }
  EXPECT_EQ(jobs, (std::set<std::string>{"herd-coordinator", "herd-worker"}));
  YAML::Emitter out;
  out << config;
  const std::string path = dir + "/prometheus.yml";
  std::ofstream(path) << out.c_str() << "\n";
  return path;
}

std::string Get(const std::string& address, const std::string& target) {
  auto response = HttpGet(address, target);
  if (!response.ok()) return "";
  return response->status == 200 ? response->body : "";
}

// An instant query's result, or an error with Prometheus' words.
absl::StatusOr<json> Query(const std::string& expr, double time = 0) {
  std::string target = "/api/v1/query?query=" + UrlEncode(expr);
  if (time > 0) absl::StrAppend(&target, "&time=", absl::StrFormat("%.3f", time));
  auto response = HttpGet(env->prometheus_address, target);
  if (!response.ok()) return response.status();
  json parsed = json::parse(response->body, nullptr, false);
  if (parsed.is_discarded() || parsed.value("status", "") != "success") {
    return absl::InvalidArgumentError(absl::StrCat("HTTP ", response->status, ": ", response->body));
  }
  return parsed["data"];
}

// "" when the query returned at least one sample that is a number (not
// NaN); otherwise why not.
std::string WhyNoData(const std::string& expr) {
  auto data = Query(expr);
  if (!data.ok()) return std::string(data.status().message());
  const json& result = (*data)["result"];
  if ((*data)["resultType"] == "scalar") return result[1] == "NaN" ? "NaN" : "";
  if (!result.is_array() || result.empty()) return "no data";
  for (const json& series : result) {
    if (series.contains("value") && series["value"][1] != "NaN") return "";
  }
  return "only NaN: " + result.dump();
}

double ScalarOf(const std::string& expr, double time = 0) {
  auto data = Query(expr, time);
  if (!data.ok() || (*data)["result"].empty()) return NAN;
  return std::stod((*data)["result"][0]["value"][1].get<std::string>());
}

// Waits until Prometheus holds `scrapes` samples of every rank's step counter
// within the last 30 s, i.e. about that many seconds of training were scraped.
bool WaitForScrapes(int scrapes, seconds timeout) {
  const std::string expr =
      absl::StrCat("min(count_over_time(herd_train_steps_total{job=\"", env->job_id, "\"}[30s])) >= ", scrapes,
                   " and count(count_over_time(herd_train_steps_total{job=\"", env->job_id, "\"}[30s])) == ", kWorkers);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (WhyNoData(expr).empty()) return true;
    std::this_thread::sleep_for(milliseconds(500));
  }
  return false;
}

class ObservabilityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(std::filesystem::exists(kPrometheus)) << "prometheus is missing: run scripts/setup.sh";
    ASSERT_TRUE(std::filesystem::exists(kPromtool)) << "promtool is missing: run scripts/setup.sh";
    auto* e = new Env;
    ClusterOptions options;
    options.workers = kWorkers;
    e->cluster = std::make_unique<LocalCluster>(options);
    env = e;
    e->coordinator_metrics = e->cluster->coordinator_metrics_address();
    for (int i = 0; i < kWorkers; ++i) {
      const std::string ready = e->cluster->root() + "/" + e->cluster->worker_id(i) + ".json";
      ASSERT_TRUE(WaitForFile(ready, seconds(30))) << e->cluster->Logs();
      e->worker_metrics.push_back(json::parse(ReadFile(ready))["metrics"].get<std::string>());
    }

    // Prometheus first, so it scrapes the job from its start.
    const std::string dir = e->cluster->root() + "/prometheus";
    std::filesystem::create_directories(dir + "/data");
    const std::string config = WritePrometheusConfig(dir);
    e->prometheus_address = absl::StrCat("127.0.0.1:", FreeLoopbackPort());
    e->prometheus = std::make_unique<Process>(
        std::vector<std::string>{kPrometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir + "/data",
                                 "--web.listen-address=" + e->prometheus_address},
        dir + "/prometheus.log");
    const auto deadline = std::chrono::steady_clock::now() + seconds(60);
    bool ready = false;
    while (!ready && std::chrono::steady_clock::now() < deadline) {
      auto response = HttpGet(e->prometheus_address, "/-/ready", seconds(2));
      ready = response.ok() && response->status == 200;
      if (!ready) std::this_thread::sleep_for(milliseconds(200));
    }
    ASSERT_TRUE(ready) << "Prometheus did not become ready:\n" << e->prometheus->Log();
    // Every target scraped once before the job starts, so counters and
    // histograms have a zero sample to rate against (a rendezvous that
    // predates the first scrape would never show in a rate).
    const std::string all_up = absl::StrCat("count(up == 1) == ", 1 + kWorkers);
    while (!WhyNoData(all_up).empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(200));
    }
    ASSERT_EQ(WhyNoData(all_up), "") << "Prometheus cannot scrape every target:\n"
                                     << Get(e->prometheus_address, "/api/v1/targets");

    e->job_id = e->cluster->Submit(kJob);
    ASSERT_FALSE(e->job_id.empty());
    json job = e->cluster->WaitForState(e->job_id, {"RUNNING", "FAILED", "SUCCEEDED"}, seconds(120));
    ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2);
  }

  static void TearDownTestSuite() {
    if (env == nullptr) return;
    if (env->cluster && !env->job_id.empty()) env->cluster->Herd({"cancel", env->job_id});
    if (env->prometheus) {
      if (::testing::UnitTest::GetInstance()->failed_test_count() > 0) {
        std::cerr << "==== prometheus.log\n" << env->prometheus->Log();
      }
      env->prometheus->Signal(SIGTERM);
      env->prometheus->Wait(seconds(10));
    }
    delete env;
    env = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(env, nullptr);
    ASSERT_TRUE(env->prometheus && !env->job_id.empty()) << "the suite's set-up failed";
  }
};

TEST_F(ObservabilityTest, PromtoolAcceptsEveryMetricsPage) {
  // The daemons' pages carry the trainers' series once both trainers wrote a snapshot.
  const std::string job_label = "job=\"" + env->job_id + "\"";
  std::vector<std::string> pages(kWorkers);
  const auto deadline = std::chrono::steady_clock::now() + seconds(120);
  for (int i = 0; i < kWorkers; ++i) {
    while (std::chrono::steady_clock::now() < deadline) {
      pages[i] = Get(env->worker_metrics[i], "/metrics");
      if (pages[i].find("herd_train_eval{") != std::string::npos) break;  // eval: after the first epoch
      std::this_thread::sleep_for(milliseconds(500));
    }
  }
  std::set<std::string> ranks;
  for (int i = 0; i < kWorkers; ++i) {
    SCOPED_TRACE(env->cluster->worker_id(i));
    const std::string& page = pages[i];
    const std::string worker_label = "worker=\"" + env->cluster->worker_id(i) + "\"";
    for (const std::string& name : kTrainerMetrics) {
      // Each series with the job, rank and worker labels.
      const size_t at = page.find("\n" + name + "{");
      ASSERT_NE(at, std::string::npos) << name << " is missing from:\n" << page;
      const std::string line = page.substr(at + 1, page.find('\n', at + 1) - at - 1);
      EXPECT_NE(line.find(job_label), std::string::npos) << line;
      EXPECT_NE(line.find(worker_label), std::string::npos) << line;
      const size_t rank = line.find("rank=\"");
      ASSERT_NE(rank, std::string::npos) << line;
      ranks.insert(line.substr(rank, line.find('"', rank + 6) - rank + 1));
    }
    EXPECT_NE(page.find("herd_worker_trainers_running 1"), std::string::npos) << page;
    // Two trainers' families are merged: one TYPE line per name.
    EXPECT_EQ(page.find("# TYPE herd_train_steps_total"), page.rfind("# TYPE herd_train_steps_total"));
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"rank=\"0\"", "rank=\"1\""}));

  const std::string coordinator_page = Get(env->coordinator_metrics, "/metrics");
  for (const std::string& name : kCoordinatorMetrics) {
    EXPECT_NE(coordinator_page.find("\n" + name), std::string::npos) << name << " is missing from:\n"
                                                                     << coordinator_page;
  }

  auto promtool = [](const std::string& page, const std::string& name) {
    const std::string file = env->cluster->root() + "/" + name + ".metrics";
    std::ofstream(file) << page;
    return RunCommand({"/bin/sh", "-c", absl::StrCat(kPromtool, " check metrics < '", file, "'")}, seconds(60));
  };
  std::vector<std::pair<std::string, std::string>> named = {{"coordinator", coordinator_page}};
  for (int i = 0; i < kWorkers; ++i) named.push_back({env->cluster->worker_id(i), pages[i]});
  for (const auto& [name, page] : named) {
    ASSERT_FALSE(page.empty()) << name;
    CommandResult result = promtool(page, name);
    EXPECT_EQ(result.exit_code, 0) << name << ": " << result.out << result.err;
    EXPECT_EQ(result.out + result.err, "") << name << ": promtool has remarks";
  }
  // The check is not vacuous: promtool does flag a bad page.
  CommandResult bad =
      promtool("# HELP herd_bad A counter without _total.\n# TYPE herd_bad counter\nherd_bad 1\n", "bad");
  EXPECT_NE(bad.exit_code, 0) << bad.out << bad.err;
}

TEST_F(ObservabilityTest, ScrapedThroughputMatchesTheReportedThroughput) {
  ASSERT_TRUE(WaitForScrapes(8, seconds(120))) << env->cluster->Logs();
  // Over one window between two of rank 0's progress reports: the samples
  // the job reports having trained (step x world x batch: every step of this
  // job is whole) per second of the coordinator's clock, against Prometheus'
  // rate of the per-rank sample counters summed over ranks. Both are rates
  // of the same progress over the same wall time. (Averaging the per-report
  // samples/s instead was biased under load: polls that miss reports see
  // the slow intervals more often.)
  auto next_report = [](int64_t after_step) {
    json job;
    const auto deadline = std::chrono::steady_clock::now() + seconds(60);
    do {
      job = env->cluster->HerdJson({"status", env->job_id});
      if (job.value("step", int64_t{-1}) != after_step) return job;
      std::this_thread::sleep_for(milliseconds(100));
    } while (std::chrono::steady_clock::now() < deadline);
    ADD_FAILURE() << "no progress report after step " << after_step;
    return job;
  };
  const json first = next_report(env->cluster->HerdJson({"status", env->job_id}).value("step", int64_t{-1}));
  std::this_thread::sleep_for(seconds(20));
  const json last = next_report(first.value("step", int64_t{-1}));
  const double t0 = first.value("updated_unix", 0.0), t1 = last.value("updated_unix", 0.0);
  const int64_t steps = last.value("step", int64_t{0}) - first.value("step", int64_t{0});
  ASSERT_GT(steps, 0);
  ASSERT_GT(t1 - t0, 10.0);
  const double trainer = static_cast<double>(steps * kWorkers * kBatch) / (t1 - t0);
  const int64_t window_ms = static_cast<int64_t>((t1 - t0) * 1000);
  const double scraped = ScalarOf(
      absl::StrCat("sum(rate(herd_train_samples_total{job=\"", env->job_id, "\"}[", window_ms, "ms]))"), t1);
  EXPECT_NEAR(scraped, trainer, 0.10 * trainer)
      << "Prometheus: " << scraped << " samples/s over " << window_ms << " ms; the job reported steps "
      << first.value("step", 0) << " -> " << last.value("step", 0) << " (" << trainer << " samples/s)";
  EXPECT_GT(trainer, 0);
  std::cout << "throughput over " << window_ms << " ms: Prometheus " << scraped << " samples/s, reported progress "
            << trainer << " samples/s (" << steps << " steps)\n";
}

// Grafana's variables, as the test resolves them.
std::string Substitute(std::string expr, const std::string& job) {
  return absl::StrReplaceAll(expr, {{"${job}", job},
                                    {"$job", job},
                                    {"${__rate_interval}", "5s"},
                                    {"$__rate_interval", "5s"},
                                    {"${__interval}", "1s"},
                                    {"$__interval", "1s"},
                                    {"${__range}", "1m"},
                                    {"$__range", "1m"}});
}

void CollectExpressions(const json& panels, std::vector<std::pair<std::string, std::string>>* out) {
  for (const json& panel : panels) {
    for (const json& target : panel.value("targets", json::array())) {
      if (target.contains("expr")) {
        out->push_back({panel.value("title", "?") + " / " + target.value("refId", "?"), target["expr"]});
      }
    }
    if (panel.contains("panels")) CollectExpressions(panel["panels"], out);  // collapsed rows
  }
}

TEST_F(ObservabilityTest, EveryDashboardQueryReturnsData) {
  const json dashboard = json::parse(ReadFile(Runfile("dashboards/herd-overview.json")));
  // Provisionable: a fixed uid and no numeric id of some Grafana instance.
  EXPECT_EQ(dashboard.value("uid", ""), "herd-overview");
  EXPECT_TRUE(!dashboard.contains("id") || dashboard["id"].is_null());
  std::vector<std::pair<std::string, std::string>> expressions;
  CollectExpressions(dashboard["panels"], &expressions);
  ASSERT_GE(expressions.size(), 20u) << "the dashboard lost its panels";

  // Every metric a panel is meant to show is queried somewhere.
  std::string all;
  for (const auto& [panel, expr] : expressions) all += expr + "\n";
  for (const char* name :
       {"herd_train_samples_total", "herd_train_step_duration_seconds_bucket",
        "herd_train_allreduce_wait_seconds_total", "herd_train_allreduce_bytes_total", "herd_train_loss",
        "herd_train_eval", "herd_train_world_size", "herd_train_generation", "herd_coordinator_workers_alive",
        "herd_train_last_checkpoint_timestamp_seconds", "herd_coordinator_generations_started_total",
        "herd_train_checkpoint_failures_total", "herd_train_reform_seconds", "herd_train_straggler_holdback_ratio",
        "herd_train_compute_seconds_total", "herd_train_batch_share_samples"}) {
    EXPECT_NE(all.find(name), std::string::npos) << "no panel queries " << name;
  }

  // The job variable lists this job.
  bool found_job_variable = false;
  for (const json& variable : dashboard["templating"]["list"]) {
    if (variable.value("name", "") != "job") continue;
    found_job_variable = true;
    EXPECT_EQ(variable.value("definition", ""), "label_values(herd_train_steps_total, job)");
    const std::string values =
        Get(env->prometheus_address, "/api/v1/label/job/values?match[]=" + UrlEncode("herd_train_steps_total"));
    EXPECT_NE(values.find("\"" + env->job_id + "\""), std::string::npos) << values;
  }
  EXPECT_TRUE(found_job_variable);

  ASSERT_TRUE(WaitForScrapes(15, seconds(180))) << env->cluster->Logs();
  // Some series start later than others (evaluation after the first epoch):
  // retry the failing queries for a while, then name every one still empty.
  std::map<std::string, std::string> failing;
  for (const auto& [panel, expr] : expressions) failing[panel] = "";
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (!failing.empty() && std::chrono::steady_clock::now() < deadline) {
    for (const auto& [panel, expr] : expressions) {
      if (failing.count(panel) == 0) continue;
      const std::string query = Substitute(expr, env->job_id);
      if (query.find('$') != std::string::npos) {
        failing[panel] = "uses a variable the test does not know: " + query;
        continue;
      }
      const std::string why = WhyNoData(query);
      if (why.empty()) {
        failing.erase(panel);
      } else {
        failing[panel] = why + " for " + query;
      }
    }
    if (!failing.empty()) std::this_thread::sleep_for(seconds(1));
  }
  for (const auto& [panel, why] : failing) ADD_FAILURE() << "panel \"" << panel << "\": " << why;
}

TEST_F(ObservabilityTest, RecordingRulesProduceEverySeries) {
  const YAML::Node file = YAML::LoadFile(Runfile("dashboards/herd-rules.yml"));
  std::vector<std::string> selectors;
  for (const YAML::Node& group : file["groups"]) {
    for (const YAML::Node& rule : group["rules"]) {
      if (!rule["record"]) continue;
      std::vector<std::string> labels;
      if (rule["labels"]) {
        for (const auto& label : rule["labels"]) {
          labels.push_back(absl::StrCat(label.first.as<std::string>(), "=\"", label.second.as<std::string>(), "\""));
        }
      }
      selectors.push_back(absl::StrCat(rule["record"].as<std::string>(), "{", absl::StrJoin(labels, ","), "}"));
    }
  }
  ASSERT_GE(selectors.size(), 8u);

  ASSERT_TRUE(WaitForScrapes(15, seconds(180))) << env->cluster->Logs();
  // Prometheus loaded every rule and none failed to evaluate.
  const json rules = json::parse(Get(env->prometheus_address, "/api/v1/rules"), nullptr, false);
  ASSERT_FALSE(rules.is_discarded());
  size_t loaded = 0;
  for (const json& group : rules["data"]["groups"]) {
    for (const json& rule : group["rules"]) {
      ++loaded;
      EXPECT_EQ(rule.value("health", ""), "ok") << rule.dump();
    }
  }
  EXPECT_EQ(loaded, selectors.size());

  std::map<std::string, std::string> failing;
  for (const std::string& selector : selectors) failing[selector] = "";
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (!failing.empty() && std::chrono::steady_clock::now() < deadline) {
    for (const std::string& selector : selectors) {
      if (failing.count(selector) == 0) continue;
      const std::string why = WhyNoData(selector);
      if (why.empty()) {
        failing.erase(selector);
      } else {
        failing[selector] = why;
      }
    }
    if (!failing.empty()) std::this_thread::sleep_for(seconds(1));
  }
  for (const auto& [selector, why] : failing) ADD_FAILURE() << "recorded series " << selector << ": " << why;
}

}  // namespace
}  // namespace herd::testing
