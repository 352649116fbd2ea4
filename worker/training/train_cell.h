// The cell driver, on top of the training room: trains one cell (train_cell) or a group
// of alike cells in lockstep (train_group) on the CPU or a CUDA device, picked from the
// cell's ctx.device. The CPU paths are in worker/training/train_cell.cpp, the CUDA ones in
// worker/training/cuda_trainer.cpp (they throw in a build without the CUDA backend).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "experiments/task.h"
#include "worker/training/train_config.h"

namespace attnsweep {

struct GroupMember;  // worker/training/cell_group_loop.h

// Trains a cell: the `train` of a TaskContext (experiments/task.h), on ctx.device ("cpu",
// "cuda" = "cuda:0", "cuda:N"; a CUDA device without the CUDA backend, or not visible,
// is an error). Checkpoints to
// ctx.checkpoint_path ("" = none) every checkpoint_every steps and when ctx.stop is set
// (then returns status "interrupted"); resumes from it when it exists and is valid.
TaskOutput train_cell(const json& config, const TaskContext& ctx, const TrainingData& data);
// train_cell on CUDA device `gpu` (>= 0) with the cell's configs: worker/training/cuda_trainer.cpp;
// in a build without the CUDA backend it throws, naming the device and how to get one.
TaskOutput train_cell_cuda(const TrainConfig& tc, const ModelConfig& mc, const json& config, const TaskContext& ctx,
                           const TrainingData& data, int gpu);
// Throws unless CUDA devices gpu .. gpu + devices - 1 are visible (device: the cell's
// ctx.device, for the message), or in a build without the CUDA backend.
void check_cuda_devices(const std::string& device, int gpu, int64_t devices);

// The lockstep loop over the members that arrived (CellGroup::run, worker/training/cell_group.h; the loop:
// worker/training/cell_group_loop.h): on the CPU, or on the one CUDA device every member's ctx.device names. Each
// member's output or error is set.
void train_group(const std::vector<GroupMember>& members);
// train_group on CUDA device `gpu` (worker/training/cuda_trainer.cpp); in a build without the CUDA
// backend, every member's error says so.
void train_group_cuda(const std::vector<GroupMember>& members, int gpu);

}  // namespace attnsweep
