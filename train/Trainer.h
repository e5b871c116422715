// train::Trainer: what one rank of a training job does, phase by phase.
// Public API (docs/architecture.md, "Public API"); run(), or the phases in order:
//
//   Trainer t(config);
//   t.setUp();      // MPI world matches the config, threads, model, captured graph
//   t.plan();       // the split: pipeline.cuts, pipeline.plan, or a plan made now;
//                   // and this stage's memory plan (keep / swap / recompute);
//                   // under interleaved the rank's stages (chunks) r, r + p, ...
//   t.buildStage(); // communicators, run outputs, the stage worker, the optimizer
//   t.restore();    // from a checkpoint (checkpoint.resume), into this layout
//   t.train();      // the step loop: metrics.jsonl with losses and per-stage memory
//                   // peaks, checkpoints every checkpoint.interval steps
//   t.report();     // per rank: compiles, compute per micro-batch, memory measured vs
//                   // predicted; rank 0 prints the per-stage memory table
//
// Every phase is collective over the world (all ranks call it in order) and
// throws on error; the CLI reports the error and stops all ranks. Waits on
// peers give up after cluster.init_timeout_s until training starts, then
// cluster.timeout_s (the communicator's watchdog). Memory is measured with
// the counting allocator (memory/CountingAllocator.h), which the trainer
// installs; bytes allocated outside the model (data, the communicator's
// buffers of other code) at the start of training are reported apart, so the
// model's peak is comparable with the plan's.
//
// Note [stopping]: SIGUSR1 (and SIGTERM when not started by mpirun, as under
// Slurm) asks to stop. Every step ends with a nonblocking all-reduce of this
// rank's request, read at the end of the next step, so all ranks stop after
// the same step; they write a checkpoint and train() returns normally.
#pragma once

#include <memory>

#include "config/Config.h"

namespace sluice {

// Note [stopping]'s signal handlers; installed by setUp(), and by the CLI
// before MPI starts so that a signal during start-up is not fatal.
void installStopHandlers();

// What each rank of a training job runs (`sluice worker`): Trainer(config).run().
void runWorker(const Config& config);

class TrainerImpl;  // train/TrainerImpl.h: the members, hidden from users of this header

class Trainer {
 public:
  explicit Trainer(Config config);
  ~Trainer();
  Trainer(Trainer&&) noexcept;
  Trainer& operator=(Trainer&&) noexcept;

  void setUp();
  void plan();
  void buildStage();
  void restore();
  void train();
  void report();
  void run();  // every phase in order

 private:
  std::unique_ptr<TrainerImpl> impl_;
};

}  // namespace sluice
