// `herd fetch JOB [--out DIR] [--checkpoint STEP] [--format F]`: the trained
// model (or a recorded checkpoint), streamed through the coordinator from a
// worker that holds it and checked against the SHA-256 the job recorded.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/format.h"
#include "client/model_download.h"
#include "client/progress.h"
#include "common/model_files.h"
#include "common/rpc_options.h"
#include "common/status_convert.h"

namespace herd::client {
namespace {

namespace fs = std::filesystem;

// A model is large; reading one takes longer than a unary call.
constexpr std::chrono::hours kFetchDeadline{6};

// What one fetched file came to.
struct Fetched {
  std::string path;
  std::string worker_id;
  int64_t size_bytes = 0;
  std::string sha256;
};

// Redraws "[####......] 42% 12.0 MiB / 28.5 MiB model-final.safetensors" on
// stderr when it is a terminal; nothing otherwise.
class ProgressLine {
 public:
  ProgressLine(const CommandContext& context, std::string name, int64_t total)
      : err_(context.options.tty && context.options.output == OutputFormat::kTable ? context.err : nullptr),
        name_(std::move(name)),
        total_(total) {}
  void Show(int64_t bytes) {
    if (err_ == nullptr) return;
    const double fraction = total_ > 0 ? static_cast<double>(bytes) / total_ : 1.0;
    *err_ << "\r" << ProgressBar(fraction, 30) << " " << static_cast<int>(fraction * 100) << "% " << FormatBytes(bytes)
          << " / " << FormatBytes(total_) << " " << name_ << "\x1b[K" << std::flush;
  }
  void Close() {
    if (err_ != nullptr) *err_ << "\n" << std::flush;
  }

 private:
  std::ostream* err_;
  const std::string name_;
  const int64_t total_;
};

// Streams one file into `destination` (atomically, see ModelDownload).
absl::StatusOr<Fetched> FetchOne(const CommandContext& context, const v1::FetchModelFileRequest& request,
                                 const std::string& destination, int64_t expected_size,
                                 const std::string& expected_sha256) {
  auto download = ModelDownload::Start(destination);
  if (!download.ok()) return download.status();
  auto deadline = std::max<std::chrono::milliseconds>(kFetchDeadline, context.options.timeout);
  auto call = NewCallContext(context.options.token, deadline);
  auto reader = context.stub->FetchModelFile(call.get(), request);
  ProgressLine progress(context, request.file(), expected_size);
  Fetched fetched;
  v1::FileChunk chunk;
  absl::Status written;
  while (written.ok() && reader->Read(&chunk)) {
    if (!chunk.worker_id().empty()) fetched.worker_id = chunk.worker_id();
    written = (*download)->Append(chunk.data());
    progress.Show((*download)->bytes());
  }
  if (!written.ok()) call->TryCancel();
  progress.Close();
  absl::Status status = FromGrpcStatus(reader->Finish());
  if (!written.ok()) return written;
  if (!status.ok()) return status;
  if (auto finished = (*download)->Finish(expected_size, expected_sha256); !finished.ok()) return finished;
  fetched.path = destination;
  fetched.size_bytes = (*download)->bytes();
  fetched.sha256 = expected_sha256;
  return fetched;
}

int Report(const CommandContext& context, const std::string& job_id, int64_t step, const std::string& path,
           const std::vector<Fetched>& files) {
  if (context.options.output == OutputFormat::kJson) {
    nlohmann::json json = {{"job_id", job_id}, {"checkpoint_step", step}, {"path", path}};
    json["files"] = nlohmann::json::array();
    for (const Fetched& f : files) {
      json["files"].push_back(
          {{"path", f.path}, {"worker_id", f.worker_id}, {"size_bytes", f.size_bytes}, {"sha256", f.sha256}});
    }
    *context.out << json.dump() << "\n";
    return kExitOk;
  }
  for (const Fetched& f : files) {
    *context.out << f.path << "  " << FormatBytes(f.size_bytes) << "  sha256 " << f.sha256 << "  from worker "
                 << f.worker_id << "\n";
  }
  return kExitOk;
}

int FetchFinal(const CommandContext& context, const FetchOptions& fetch, const v1::JobInfo& job) {
  const std::string name = fetch.format == "pt" ? kFinalModelFile : kFinalSafetensorsFile;
  const v1::ModelFile* recorded = nullptr;
  for (const v1::ModelFile& file : job.final_model()) {
    if (file.name() == name) recorded = &file;
  }
  if (recorded == nullptr) {
    const std::string why = job.state() == v1::SUCCEEDED ? "it finished before herd recorded final models"
                                                         : absl::StrCat("it is ", v1::JobState_Name(job.state()),
                                                                        " and only a job that succeeded has one");
    return ReportRpcError(
        context, absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " has no recorded ", name, ": ", why)));
  }
  v1::FetchModelFileRequest request;
  request.set_job_id(job.id());
  request.set_file(name);
  const std::string extension = fetch.format == "pt" ? ".pt" : ".safetensors";
  const std::string destination = (fs::path(fetch.out_dir) / (job.id() + extension)).string();
  auto fetched = FetchOne(context, request, destination, recorded->size_bytes(), recorded->sha256());
  if (!fetched.ok()) return ReportRpcError(context, fetched.status());
  return Report(context, job.id(), 0, destination, {*fetched});
}

// A checkpoint: its MANIFEST (checked against the recorded digest), then
// every file it lists (checked against the MANIFEST), into a folder that is
// renamed into place once all of them are there.
int FetchCheckpoint(const CommandContext& context, const FetchOptions& fetch, const v1::JobInfo& job) {
  v1::ListCheckpointsRequest list;
  list.set_job_id(job.id());
  v1::ListCheckpointsResponse checkpoints;
  auto list_call = NewCallContext(context.options.token, context.options.timeout);
  absl::Status listed = FromGrpcStatus(context.stub->ListCheckpoints(list_call.get(), list, &checkpoints));
  if (!listed.ok()) return ReportRpcError(context, listed);
  const v1::CheckpointInfo* recorded = nullptr;
  for (const v1::CheckpointInfo& c : checkpoints.checkpoints()) {
    if (c.step() == fetch.checkpoint_step) recorded = &c;
  }
  if (recorded == nullptr) {
    return ReportRpcError(
        context, absl::NotFoundError(absl::StrCat("job ", job.id(), " has no recorded checkpoint of step ",
                                                  fetch.checkpoint_step, " (see herd checkpoints ", job.id(), ")")));
  }
  const fs::path destination = fs::path(fetch.out_dir) / absl::StrCat(job.id(), "-step-", fetch.checkpoint_step);
  std::error_code error;
  if (fs::exists(destination, error)) {
    return ReportRpcError(context, absl::AlreadyExistsError(absl::StrCat(
                                       destination.string(), " exists: remove it or choose another --out")));
  }
  const fs::path partial =
      fs::path(fetch.out_dir) / absl::StrCat(".", destination.filename().string(), ".part-", getpid());
  fs::create_directory(partial, error);
  if (error) {
    return ReportRpcError(context, absl::FailedPreconditionError(
                                       absl::StrCat("cannot create ", partial.string(), ": ", error.message())));
  }
  auto fail = [&](const absl::Status& status) {
    fs::remove_all(partial, error);
    return ReportRpcError(context, status);
  };
  v1::FetchModelFileRequest request;
  request.set_job_id(job.id());
  request.set_checkpoint_step(fetch.checkpoint_step);
  request.set_file(kCheckpointManifestFile);
  std::vector<Fetched> files;
  auto manifest = FetchOne(context, request, (partial / kCheckpointManifestFile).string(), -1, recorded->sha256());
  if (!manifest.ok()) return fail(manifest.status());
  files.push_back(*manifest);
  std::ifstream manifest_file(manifest->path);
  const std::string text((std::istreambuf_iterator<char>(manifest_file)), std::istreambuf_iterator<char>());
  auto entries = ParseManifest(text);
  if (!entries.ok()) return fail(entries.status());
  for (const auto& [name, entry] : *entries) {
    request.set_file(name);
    auto fetched = FetchOne(context, request, (partial / name).string(), entry.size_bytes, entry.sha256);
    if (!fetched.ok()) return fail(fetched.status());
    files.push_back(*fetched);
  }
  fs::rename(partial, destination, error);
  if (error) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("cannot rename ", partial.string(), " to ", destination.string(), ": ", error.message())));
  }
  for (Fetched& f : files) f.path = (destination / fs::path(f.path).filename()).string();
  return Report(context, job.id(), fetch.checkpoint_step, destination.string(), files);
}

}  // namespace

int FetchCommand(const CommandContext& context, const FetchOptions& fetch) {
  std::error_code error;
  if (!fs::is_directory(fetch.out_dir, error)) {
    *context.err << "herd: --out " << fetch.out_dir << " is not a folder\n";
    return kExitUsage;
  }
  v1::GetJobRequest get;
  get.set_id(fetch.job_id);
  v1::GetJobResponse response;
  auto call = NewCallContext(context.options.token, context.options.timeout);
  absl::Status status = FromGrpcStatus(context.stub->GetJob(call.get(), get, &response));
  if (!status.ok()) return ReportRpcError(context, status);
  return fetch.checkpoint_step > 0 ? FetchCheckpoint(context, fetch, response.job())
                                   : FetchFinal(context, fetch, response.job());
}

}  // namespace herd::client
