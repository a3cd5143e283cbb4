//===- runtime/exec/RankContext.h - What one rank has for a job -----------===//
//
// A rank context owns everything one rank of a job holds: the manifest, the
// placement of stages on ranks, the schedule, this rank's stages, the
// transport to the other ranks, the compute device, the metadata settler
// (runtime/exec/MetaSettle.h), the executor's plan and the trace recorder.
// Pipeline (inference) and Trainer (training) each hold one and differ only
// in the job they give it: which schedule to build over the manifest, and
// for training where the loss is. Nothing below asks which of the two it
// serves: what differs follows from the schedule (its backward actions, its
// OUT actions).
//
// Creation, every step bounded by the options' timeout:
//   1. check the options that need no manifest (they bound allocations);
//   2. load the manifest and let the job place its stages and plan its
//      schedule, simulated (planSchedule(), runtime/schedule/Plan.h: a
//      deadlock is refused before any rank runs it);
//   3. meet the other ranks (rendezvous, the start-up agreement on what
//      must be alike: RunOptions::agreement, process groups, NCCL pairs),
//      before loading stages, so that a rank that fails to load makes the
//      others fail fast with "lost rank R" instead of waiting at a rendezvous;
//   4. load this rank's stages onto the device; build the executor's plan.
//
// Internal to libppc_runtime: not installed.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_RANKCONTEXT_H
#define PPC_RUNTIME_EXEC_RANKCONTEXT_H

#include "lib/Manifest.h"
#include "lib/Stage.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/MetaSettle.h"
#include "runtime/exec/RunOptions.h"
#include "runtime/exec/Trace.h"
#include "runtime/link/LaunchEnv.h"
#include "runtime/link/Rendezvous.h"
#include "runtime/link/Transport.h"
#include "runtime/schedule/Schedule.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ppc {

/// What a job decides once the manifest is loaded: its schedule, which
/// simulateSchedule() has accepted (planSchedule() returns such schedules)
/// and which holds the placement of stages on ranks, and, for training,
/// where the loss is computed.
struct JobPlan {
  Schedule schedule;
  std::optional<LossSpec> loss;
};

/// Builds the schedule of a job for another microbatch count (streaming
/// windows, Pipeline::submit), on the job's placement.
using ScheduleBuilder = std::function<llvm::Expected<Schedule>(
    const Manifest &manifest, const Placement &placement, int microbatches)>;

/// The job's ranks as several pipelines of the same stages (data
/// parallelism: runtime/train/DataParallel.h makes one, pipelineMesh()).
/// A rank context without one runs the whole job as one pipeline.
struct PipelineMesh {
  /// How many pipelines, and which one this rank is in (0..replicas-1).
  int replicas = 1;
  int replica = 0;
  /// The job's environment as this rank's pipeline sees it: RANK and
  /// WORLD_SIZE of the pipeline, the rest the job's.
  LaunchEnv pipelineEnv;
  /// The groups to connect (connectGroupTransports(), link/Rendezvous.h):
  /// this rank's pipeline, then its replica group (the ranks that hold
  /// the same stages in every pipeline).
  RankGroup pipeline, replicaGroup;
};

/// Plans a job over a loaded manifest for `worldSize` ranks. Errors:
/// whatever makes the job impossible (stages that cannot be placed, a
/// schedule that does not fit the placement, a loss output that is not a
/// Tensor, ...).
using JobPlanner = std::function<llvm::Expected<JobPlan>(
    const Manifest &manifest, int worldSize)>;

class RankContext {
public:
  /// Creates the context of rank env.rank (the steps above). Errors:
  /// Pipeline::create's, and the planner's.
  ///
  /// With a `mesh` the job's WORLD_SIZE ranks run mesh->replicas replicas
  /// of one pipeline: env(), rank(), transport() and placement() are then
  /// this rank's pipeline's (ranks 0..R-1), and replicaTransport()
  /// connects the rank's replica group.
  static llvm::Expected<std::unique_ptr<RankContext>>
  create(llvm::StringRef manifestPath, const LaunchEnv &env,
         const RunOptions &options, const JobPlanner &planner,
         const PipelineMesh *mesh = nullptr);

  const LaunchEnv &env() const { return env_; }
  int rank() const { return env_.rank; }
  /// The environment of the job (env() is the pipeline's), this rank's
  /// replica (0..replicas-1), the number of replicas, and the transport
  /// over this rank's replica group (null with one replica).
  const LaunchEnv &jobEnv() const { return jobEnv_; }
  int replica() const { return mesh_ ? mesh_->replica : 0; }
  int replicas() const { return mesh_ ? mesh_->replicas : 1; }
  Transport *replicaTransport() { return replicaTransport_.get(); }
  /// The job's rank of pipeline rank `rank` of this rank's pipeline.
  int jobRank(int rank) const { return transport_->globalRank(rank); }
  /// The trace recorder when a trace is kept, else null.
  TraceRecorder *trace() { return trace_ ? &*trace_ : nullptr; }
  /// --- end data parallel
  const RunOptions &options() const { return options_; }
  const std::string &manifestPath() const { return manifestPath_; }
  const Manifest &manifest() const { return manifest_; }
  const Placement &placement() const { return schedule_.placement; }
  const Schedule &schedule() const { return schedule_; }
  const std::optional<LossSpec> &loss() const { return loss_; }
  /// This rank's stages by index.
  std::map<int, Stage> &stages() { return stages_; }
  const std::map<int, Stage> &stages() const { return stages_; }
  /// Checkpoint bytes this rank's stages read (--weights): mapped in place
  /// or copied; 0 without a checkpoint.
  uint64_t weightBytesRead() const;
  Transport &transport() { return *transport_; }
  /// Where this rank's stages run and its payloads live: the CPU, or
  /// cuda:LOCAL_RANK with RunOptions::device "cuda".
  c10::Device device() const { return device_; }
  MetaSettler &meta() { return *meta_; }
  const MetaSettler &meta() const { return *meta_; }
  llvm::raw_ostream &warnings() {
    return options_.warnings ? *options_.warnings : llvm::errs();
  }

  /// Settles the metadata of `inputs`' microbatches and fills `step` for
  /// execute() (MetaSettler::prepare), over the job's own schedule.
  llvm::Error prepare(const std::vector<c10::IValue> &inputs,
                      ExecutorStep &step);
  /// The same over the evaluation schedule of the job's training schedule
  /// (evaluationSchedule(), runtime/schedule/Build.h: its forwards alone,
  /// the loss computed in the loss stage's F), built and simulated on the
  /// first call and kept. Errors: simulateSchedule()'s;
  /// MetaSettler::prepare's.
  llvm::Error prepareEvaluation(const std::vector<c10::IValue> &inputs,
                                ExecutorStep &step);
  /// The same for a window of `count` microbatches (given already split on
  /// ranks that read model inputs, ignored elsewhere), over the schedule of
  /// `count` microbatches: the job's own when `count` is its count, else
  /// one `build` makes, simulated, and kept with its executor plan for later
  /// windows of that count (every rank builds the same). The input root
  /// does not wait for its signature messages to arrive (no drain between
  /// windows, runtime/run/Pipeline.h). Errors: `build`'s and
  /// simulateSchedule()'s; MetaSettler::prepare's.
  llvm::Error prepareWindow(std::vector<std::vector<c10::IValue>> microbatches,
                            int count, const ScheduleBuilder &build,
                            ExecutorStep &step);
  /// The same over `schedule` (a decode schedule, runtime/schedule/Decode.h,
  /// on the job's placement), simulated first and kept with its executor
  /// plan until the next call. Errors: simulateSchedule()'s;
  /// MetaSettler::prepareMicrobatches's.
  llvm::Error
  prepareSchedule(std::vector<std::vector<c10::IValue>> microbatches,
                  Schedule schedule, ExecutorStep &step);
  /// Runs this rank's actions of the schedule the last prepare() chose over
  /// `step`, recorded in the trace if one is kept. Errors:
  /// runtime/exec/Executor.h's, a mismatch with cached metadata as a
  /// StaleCacheError.
  llvm::Expected<ExecutorResult> execute(ExecutorStep &step);
  /// After a step that succeeded: saves what it inferred to the meta cache.
  void finishStep() { meta_->finish(); }

  /// Ships every rank's trace events to rank 0, which writes the trace
  /// file (if one is kept), then waits until every rank gets here. With
  /// replicas, the pipelines' rank 0 ship theirs on to the job's rank 0,
  /// which writes one trace of every job rank (pid = job rank). Errors:
  /// "lost rank R (...)", the trace cannot be written.
  llvm::Error finish();

private:
  RankContext() = default;
  llvm::Error loadManifest();
  llvm::Error connect();
  Agreement agreement() const;
  llvm::Error loadStages();

  LaunchEnv env_;
  /// Data parallel: see jobEnv().
  LaunchEnv jobEnv_;
  /// The job's pipelines, with replicas: connect() connects its groups.
  std::optional<PipelineMesh> mesh_;
  std::unique_ptr<Transport> replicaTransport_;
  RunOptions options_;
  std::string manifestPath_;
  Manifest manifest_;
  std::string manifestSha256_;
  Schedule schedule_;
  std::optional<LossSpec> loss_;
  c10::Device device_ = c10::kCPU;
  DeviceKind deviceKind_ = DeviceKind::CPU;
  std::map<int, Stage> stages_;
  /// The checkpoint the stages' weights come from (--weights), kept while
  /// tensors map its bytes.
  std::shared_ptr<WeightSource> weights_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<MetaSettler> meta_;
  ExecutorPlan executorPlan_;
  /// Schedules of other microbatch counts (prepareWindow), each with its
  /// executor plan (which points into it), by count; and the plan the last
  /// prepare chose.
  struct Variant {
    Schedule schedule;
    ExecutorPlan plan;
  };
  std::map<int, std::unique_ptr<Variant>> variants_;
  /// The schedule of the last prepareSchedule(); the evaluation schedule.
  std::unique_ptr<Variant> given_;
  std::unique_ptr<Variant> evaluation_;
  /// What every prepare gives its step once its metadata is settled: the
  /// trace recorder and the run's index.
  void beginRun(ExecutorStep &step);
  /// `schedule` with its executor plan for this rank.
  std::unique_ptr<Variant> makeVariant(Schedule schedule);
  const ExecutorPlan *current_ = &executorPlan_;
  /// The actions of every run, when RunOptions::tracePath asks for them,
  /// and how many runs there were.
  std::optional<TraceRecorder> trace_;
  int64_t runs_ = 0;
};

/// `value` with every tensor it holds (in lists and tuples too) on
/// `device`. Throws what LibTorch throws (a device copy failing).
c10::IValue valueOnDevice(const c10::IValue &value, c10::Device device);

/// valueOnDevice() of each of `values`. Errors: "cannot move WHAT to
/// cuda:0: ..." with the first line of LibTorch's message.
llvm::Expected<std::vector<c10::IValue>>
valuesOnDevice(const std::vector<c10::IValue> &values, c10::Device device,
               const std::string &what);

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_RANKCONTEXT_H
