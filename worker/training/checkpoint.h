// A training cell's checkpoint: the state it resumes from (TrainState: the next step,
// the sampler's cursor, the trajectory so far) with the trainer's parameters and
// optimizer state, in one file format for every backend (worker/training/checkpoint_impl.h: the
// layout and its version), written atomically. For BasicTrainer<CpuBackend> and, with
// ATTNSWEEP_HAVE_CUDA, BasicTrainer<CudaBackend> (worker/training/trainer.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/training/train_config.h"

namespace attnsweep {

// What a cell has logged so far: the rows of /train, /norms and /eval of its result file.
struct Trajectory {
  std::vector<int64_t> step;
  std::vector<float> loss, accuracy, lr, grad_norm;
  std::vector<float> attn_fro, jac_fro;  // [T, L, H]
  std::vector<int64_t> eval_step;
  std::vector<float> eval_loss, eval_accuracy;
  std::vector<double> eval_task;  // [E, M]: the task's eval_metrics (TrainingData::measure)
};

// Where a cell stands between steps, with the trainer's parameters and optimizer state.
struct TrainState {
  int64_t step = 0;          // the next step to run (= updates done)
  int64_t samples_seen = 0;  // the sampler's cursor
  Trajectory traj;
};

// Writes the checkpoint of this cell (its config as text, the sampler's seed, the
// trainer's host state and `st`) to PATH atomically; throws std::runtime_error.
template <class TrainerT>
void save_checkpoint(const std::string& path, const std::string& config_text, const TrainConfig& tc, TrainerT& tr,
                     const TrainState& st);

// Loads a checkpoint of this very cell; false (with *why) when absent or not usable.
// A complete checkpoint of another format throws instead: the cell fails, naming the file.
template <class TrainerT>
bool load_checkpoint(const std::string& path, const std::string& config_text, TrainerT& tr, TrainState& st,
                     std::string* why);

}  // namespace attnsweep
