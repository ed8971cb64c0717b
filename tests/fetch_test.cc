// `herd fetch`: the trained model comes back through the coordinator from a
// worker that holds it, checked against the SHA-256 the job recorded, and
// evaluates in PyTorch exactly as herd evaluated it. A real coordinator,
// daemons, trainers, CLI and Debian's python3-torch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/auth.h"
#include "common/rpc_options.h"
#include "common/sha256.h"
#include "proto/herd.grpc.pb.h"
#include "tests/harness/local_cluster.h"

namespace herd::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

// examples/fetch-mnist-cnn.yaml with a checkpoint every 20 steps.
constexpr char kJob[] = R"(
name: fetch
model: mnist_cnn
dataset: {kind: idx, path: /usr/share/datasets/fashion-mnist}
batch_size: 32
max_steps: 40
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
eval: {max_samples: 2000}
checkpoint: {interval_steps: 20}
min_workers: 2
max_workers: 2
seed: 3
threads: 1
log_interval_steps: 10
)";

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// FetchModelFile called directly, as a hostile client could, with alice's token.
grpc::Status FetchDirectly(LocalCluster& cluster, const std::string& job, int64_t step, const std::string& file,
                           std::string* data) {
  auto channel = MakeChannel(cluster.address(), {});
  EXPECT_TRUE(channel.ok()) << channel.status();
  auto stub = v1::JobService::NewStub(*channel);
  auto call = NewCallContext(ReadTokenFile(cluster.credentials().user_token_file).value_or(""), seconds(30));
  v1::FetchModelFileRequest request;
  request.set_job_id(job);
  request.set_checkpoint_step(step);
  request.set_file(file);
  auto reader = stub->FetchModelFile(call.get(), request);
  v1::FileChunk chunk;
  while (reader->Read(&chunk)) *data += chunk.data();
  return reader->Finish();
}

TEST(Fetch, TheFinalModelComesBackCheckedAndEvaluatesInPyTorchAsInHerd) {
  LocalCluster cluster;
  const std::string job = cluster.Submit(kJob);
  nlohmann::json done = cluster.WaitForState(job, {"SUCCEEDED", "FAILED"}, seconds(240));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump() << cluster.Logs();

  // The job recorded both files, as its workers hold them.
  const std::string worker_copy = cluster.job_dir(0, job) + "/model-final.safetensors";
  const std::string bytes = ReadFile(worker_copy);
  ASSERT_GT(bytes.size(), 400'000u) << worker_copy;
  std::map<std::string, std::string> recorded;
  for (const auto& file : done.at("final_model")) recorded[file.at("name")] = file.at("sha256");
  EXPECT_EQ(recorded.at("model-final.safetensors"), Sha256Hex(bytes));
  EXPECT_EQ(recorded.at("model-final.pt"), Sha256Hex(ReadFile(cluster.job_dir(1, job) + "/model-final.pt")));

  const std::string out = cluster.root() + "/fetched";
  fs::create_directories(out);
  CommandResult fetched = cluster.Herd({"fetch", job, "--out", out, "-o", "json"}, seconds(60));
  ASSERT_EQ(fetched.exit_code, 0) << fetched.err;
  const std::string model = out + "/" + job + ".safetensors";
  EXPECT_EQ(ReadFile(model), bytes);
  EXPECT_EQ(Names(out), std::vector<std::string>{job + ".safetensors"});  // no temporary left
  nlohmann::json report = nlohmann::json::parse(fetched.out);
  EXPECT_EQ(report.at("files").at(0).value("sha256", ""), Sha256Hex(bytes));

  // PyTorch's twin of mnist_cnn, loaded from the fetched file, scores the
  // same 2000 test images as herd's own final evaluation did.
  CommandResult evaluated = RunCommand(
      {"/usr/bin/python3", LocalCluster::Binary("examples/evaluate_fetched_model.py"), model, "--max-samples", "2000"},
      seconds(120));
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.err;
  nlohmann::json torch = nlohmann::json::parse(evaluated.out);
  EXPECT_EQ(torch.value("samples", 0), 2000);
  const double herd_accuracy = done.at("eval").at("accuracy").get<double>();
  EXPECT_GT(herd_accuracy, 0.3);  // trained: chance is 0.1
  std::cout << "herd eval " << done.at("eval").dump() << "; PyTorch on the fetched file " << evaluated.out;
  EXPECT_NEAR(torch.at("accuracy").get<double>(), herd_accuracy, 1e-4) << evaluated.out;
  EXPECT_NEAR(torch.at("loss").get<double>(), done.at("eval").at("loss").get<double>(), 1e-4) << evaluated.out;

  // The LibTorch archive too.
  CommandResult archive = cluster.Herd({"fetch", job, "--out", out, "--format", "pt"}, seconds(60));
  ASSERT_EQ(archive.exit_code, 0) << archive.err;
  EXPECT_EQ(ReadFile(out + "/" + job + ".pt"), ReadFile(cluster.job_dir(0, job) + "/model-final.pt"));

  // A recorded checkpoint: its MANIFEST and every file it lists, as written.
  const nlohmann::json checkpoints = cluster.HerdJson({"checkpoints", job})["checkpoints"];
  ASSERT_FALSE(checkpoints.empty()) << checkpoints.dump();
  const nlohmann::json& first = checkpoints.at(0);
  const int64_t step = first.at("step").get<int64_t>();
  CommandResult checkpoint =
      cluster.Herd({"fetch", job, "--out", out, "--checkpoint", std::to_string(step)}, seconds(60));
  ASSERT_EQ(checkpoint.exit_code, 0) << checkpoint.err;
  const std::string on_disk = cluster.checkpoint_root() + "/" + first.at("path").get<std::string>();
  const std::string copy = out + "/" + job + "-step-" + std::to_string(step);
  ASSERT_EQ(Names(copy), Names(on_disk));
  for (const std::string& name : Names(on_disk))
    EXPECT_EQ(ReadFile(copy + "/" + name), ReadFile(on_disk + "/" + name)) << name;

  // Names that would leave the job's dir or checkpoint folder are refused,
  // and so is a link in a checkpoint folder that leads out of it.
  const std::string secret = cluster.root() + "/secret";
  std::ofstream(secret) << "not for fetching";
  for (const auto& [at, file] : std::vector<std::pair<int64_t, std::string>>{
           {0, "../model-final.safetensors"}, {0, "trainer.log"}, {step, "../../../secret"}, {step, "."}}) {
    std::string data;
    grpc::Status refused = FetchDirectly(cluster, job, at, file, &data);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << file << ": " << refused.error_message();
    EXPECT_EQ(data, "") << file;
  }
  fs::create_symlink(secret, on_disk + "/leak");
  std::string leaked;
  grpc::Status link = FetchDirectly(cluster, job, step, "leak", &leaked);
  EXPECT_EQ(link.error_code(), grpc::StatusCode::NOT_FOUND) << link.error_message();
  EXPECT_NE(link.error_message().find("leak of checkpoint " + first.at("path").get<std::string>() +
                                      " leads outside its folder"),
            std::string::npos)
      << link.error_message();
  EXPECT_EQ(leaked, "");

  // Only the owner or an admin.
  CommandResult bob = cluster.HerdAs(cluster.credentials().other_user_token_file, {"fetch", job, "--out", out});
  EXPECT_EQ(bob.exit_code, 1);
  EXPECT_NE(bob.err.find("may fetch only their own jobs' models"), std::string::npos) << bob.err;
  CommandResult admin = cluster.HerdAs(cluster.credentials().admin_token_file, {"fetch", job, "--out", out});
  EXPECT_EQ(admin.exit_code, 0) << admin.err;

  // A worker that lacks the file passes the request on to the next member.
  const std::string first_worker = report.at("files").at(0).value("worker_id", "");
  const int first_index = first_worker == cluster.worker_id(0) ? 0 : 1;
  ASSERT_EQ(cluster.worker_id(first_index), first_worker);
  fs::remove(cluster.job_dir(first_index, job) + "/model-final.safetensors");
  fs::remove(model);
  CommandResult fallback = cluster.Herd({"fetch", job, "--out", out, "-o", "json"}, seconds(60));
  ASSERT_EQ(fallback.exit_code, 0) << fallback.err;
  EXPECT_EQ(nlohmann::json::parse(fallback.out).at("files").at(0).value("worker_id", ""),
            cluster.worker_id(1 - first_index));
  EXPECT_EQ(ReadFile(model), bytes);

  // A corrupted copy on one worker is refused, and nothing named as the model is written.
  fs::remove(model);
  std::ofstream(cluster.job_dir(1 - first_index, job) + "/model-final.safetensors", std::ios::binary | std::ios::in)
      << "corrupt";
  CommandResult corrupt = cluster.Herd({"fetch", job, "--out", out});
  EXPECT_EQ(corrupt.exit_code, 1);
  EXPECT_NE(corrupt.err.find("differs from the recorded " + Sha256Hex(bytes)), std::string::npos) << corrupt.err;
  EXPECT_FALSE(fs::exists(model));

  // Once no worker holds it, the refusal names the job and the file.
  fs::remove(cluster.job_dir(1 - first_index, job) + "/model-final.safetensors");
  CommandResult gone = cluster.Herd({"fetch", job, "--out", out});
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.err.find("no worker holds model-final.safetensors of job " + job + " any more"), std::string::npos)
      << gone.err;
  EXPECT_NE(gone.err.find("NOT_FOUND"), std::string::npos) << gone.err;
  std::cout << "once no worker holds it: " << gone.err;
  EXPECT_NE(gone.err.find("worker " + cluster.worker_id(0) + " has no model-final.safetensors of job " + job),
            std::string::npos)
      << gone.err;
  EXPECT_FALSE(fs::exists(model));
  EXPECT_EQ(Names(out), (std::vector<std::string>{job + "-step-" + std::to_string(step), job + ".pt"}));
}

// A GPT-style char_transformer on a token file, then on a text file: the
// PyTorch twin is rebuilt from the file's herd_config (non-default heads, a
// context longer than the windows, a padded vocabulary) and scores the same
// validation windows as herd's own final evaluation did.
TEST(Fetch, TokenAndTextTransformersEvaluateInPyTorchAsInHerd) {
  LocalCluster cluster;
  // The next token is a fixed function of the current one (a cycle through
  // 97 of 100 ids), so a trained model beats chance.
  std::vector<uint16_t> tokens(6000);
  uint16_t next = 1;
  for (uint16_t& token : tokens) {
    token = next;
    next = static_cast<uint16_t>((next * 7 + 3) % 97);
  }
  const std::string corpus = cluster.root() + "/corpus.bin";
  std::ofstream(corpus, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  const std::string job = cluster.Submit(
      "model: {name: char_transformer, width: 32, heads: 2, layers: 2, context: 24, vocab_size: 112}\n"
      "dataset: {kind: tokens, path: " + corpus + ", dtype: uint16, vocab_size: 100, sequence_length: 16}\n"
      "batch_size: 8\nmax_steps: 60\noptimizer: {name: adam, lr: 0.01}\neval: {max_samples: 30}\n"
      "min_workers: 2\nmax_workers: 2\nseed: 5\nthreads: 1\n");
  nlohmann::json done = cluster.WaitForState(job, {"SUCCEEDED", "FAILED"}, seconds(240));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump() << cluster.Logs();

  const std::string out = cluster.root() + "/fetched";
  fs::create_directories(out);
  CommandResult fetched = cluster.Herd({"fetch", job, "--out", out}, seconds(60));
  ASSERT_EQ(fetched.exit_code, 0) << fetched.err;
  // The validation split is the last 10% of the file: (600 - 1) / 16 = 37
  // windows, of which eval.max_samples takes the first 30.
  CommandResult evaluated = RunCommand({"/usr/bin/python3", LocalCluster::Binary("examples/evaluate_fetched_model.py"),
                                        out + "/" + job + ".safetensors", "--kind", "tokens", "--data", corpus,
                                        "--dtype", "uint16", "--sequence-length", "16", "--max-samples", "30"},
                                       seconds(120));
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.err;
  nlohmann::json torch = nlohmann::json::parse(evaluated.out);
  std::cout << "herd eval " << done.at("eval").dump() << "; PyTorch on the fetched file " << evaluated.out;
  EXPECT_EQ(torch.value("model", ""), "char_transformer");
  EXPECT_EQ(torch.at("config"),
            nlohmann::json::parse(R"({"vocab_size": 112, "context": 24, "width": 32, "heads": 2, "layers": 2})"));
  EXPECT_EQ(torch.value("samples", 0), 30);
  const double herd_loss = done.at("eval").at("loss").get<double>();
  EXPECT_LT(herd_loss, 0.5 * std::log(100.0));  // trained: chance is ln(100)
  EXPECT_NEAR(torch.at("loss").get<double>(), herd_loss, 1e-4) << evaluated.out;
  EXPECT_NEAR(torch.at("accuracy").get<double>(), done.at("eval").at("accuracy").get<double>(), 1e-4)
      << evaluated.out;

  // A text file: bytes, the last 10% of them ((400 - 1) / 16 = 24 windows, all evaluated).
  std::string text;
  while (text.size() < 4000) text += "the quick brown fox jumps over the lazy dog. ";
  text.resize(4000);
  const std::string text_file = cluster.root() + "/corpus.txt";
  std::ofstream(text_file, std::ios::binary) << text;
  const std::string text_job = cluster.Submit(
      "model: {name: char_transformer, width: 32, heads: 8, layers: 1}\n"
      "dataset: {kind: text, path: " + text_file + ", sequence_length: 16}\n"
      "batch_size: 8\nmax_steps: 40\noptimizer: {name: adam, lr: 0.01}\n"
      "min_workers: 2\nmax_workers: 2\nseed: 5\nthreads: 1\n");
  nlohmann::json text_done = cluster.WaitForState(text_job, {"SUCCEEDED", "FAILED"}, seconds(240));
  ASSERT_EQ(text_done.value("state", ""), "SUCCEEDED") << text_done.dump() << cluster.Logs();
  ASSERT_EQ(cluster.Herd({"fetch", text_job, "--out", out}, seconds(60)).exit_code, 0);
  CommandResult text_evaluated =
      RunCommand({"/usr/bin/python3", LocalCluster::Binary("examples/evaluate_fetched_model.py"),
                  out + "/" + text_job + ".safetensors", "--kind", "text", "--data", text_file, "--sequence-length",
                  "16"},
                 seconds(120));
  ASSERT_EQ(text_evaluated.exit_code, 0) << text_evaluated.err;
  nlohmann::json text_torch = nlohmann::json::parse(text_evaluated.out);
  std::cout << "herd eval " << text_done.at("eval").dump() << "; PyTorch on the fetched file " << text_evaluated.out;
  EXPECT_EQ(text_torch.at("config"),
            nlohmann::json::parse(R"({"vocab_size": 256, "context": 16, "width": 32, "heads": 8, "layers": 1})"));
  EXPECT_EQ(text_torch.value("samples", 0), 24);
  EXPECT_LT(text_done.at("eval").at("loss").get<double>(), 0.5 * std::log(256.0));
  EXPECT_NEAR(text_torch.at("loss").get<double>(), text_done.at("eval").at("loss").get<double>(), 1e-4)
      << text_evaluated.out;
  EXPECT_NEAR(text_torch.at("accuracy").get<double>(), text_done.at("eval").at("accuracy").get<double>(), 1e-4)
      << text_evaluated.out;
}

// The image models' twins too: an mlp of non-default width and a
// resnet_small with batch norm, whose running statistics (buffers) travel in
// the file and drive PyTorch's evaluation as they drove herd's.
TEST(Fetch, MlpAndResnetEvaluateInPyTorchAsInHerd) {
  LocalCluster cluster;
  const std::string common =
      "dataset: {kind: idx, path: /usr/share/datasets/fashion-mnist}\nbatch_size: 32\nmax_steps: 30\n"
      "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\neval: {max_samples: 1000}\n"
      "min_workers: 2\nmax_workers: 2\nseed: 4\nthreads: 1\n";
  const std::vector<std::pair<std::string, std::string>> models = {
      {"model: {name: mlp, hidden: [64, 32]}\n", R"({"hidden": [64, 32]})"},
      {"model: {name: resnet_small, widths: [8, 16], norm: batch}\n", R"({"widths": [8, 16], "norm": "batch"})"}};
  std::vector<std::string> jobs;
  for (const auto& [model, config] : models) jobs.push_back(cluster.Submit(model + common));
  const std::string out = cluster.root() + "/fetched";
  fs::create_directories(out);
  for (size_t i = 0; i < jobs.size(); ++i) {
    nlohmann::json done = cluster.WaitForState(jobs[i], {"SUCCEEDED", "FAILED"}, seconds(240));
    ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump() << cluster.Logs();
    CommandResult fetched = cluster.Herd({"fetch", jobs[i], "--out", out}, seconds(60));
    ASSERT_EQ(fetched.exit_code, 0) << fetched.err;
    CommandResult evaluated =
        RunCommand({"/usr/bin/python3", LocalCluster::Binary("examples/evaluate_fetched_model.py"),
                    out + "/" + jobs[i] + ".safetensors", "--max-samples", "1000"},
                   seconds(120));
    ASSERT_EQ(evaluated.exit_code, 0) << evaluated.err;
    nlohmann::json torch = nlohmann::json::parse(evaluated.out);
    std::cout << "herd eval " << done.at("eval").dump() << "; PyTorch on the fetched file " << evaluated.out;
    EXPECT_EQ(torch.at("config"), nlohmann::json::parse(models[i].second));
    EXPECT_EQ(torch.value("samples", 0), 1000);
    EXPECT_LT(done.at("eval").at("loss").get<double>(), 0.8 * std::log(10.0));  // trained: chance is ln(10)
    EXPECT_NEAR(torch.at("accuracy").get<double>(), done.at("eval").at("accuracy").get<double>(), 1e-4)
        << evaluated.out;
    EXPECT_NEAR(torch.at("loss").get<double>(), done.at("eval").at("loss").get<double>(), 1e-4) << evaluated.out;
  }
}

}  // namespace
}  // namespace herd::testing
