// The tracked kinds TrainingState::track() builds, one factory per kind (each in its own file).
// Errors: throw preempt::Error (kInvalidArgument) for an object this layer cannot capture.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <torch/data/samplers/distributed.h>
#include <torch/data/samplers/sequential.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include "preempt/torch/sampler.h"
#include "preempt/torch/tracked.h"

namespace preempt::torch::internal {

std::unique_ptr<Tracked> TrackModule(const std::string& name, ::torch::nn::Module& module);
std::unique_ptr<Tracked> TrackOptimizer(const std::string& name, ::torch::optim::Optimizer& optimizer);
std::unique_ptr<Tracked> TrackLrScheduler(const std::string& name, ::torch::optim::LRScheduler& scheduler);
std::unique_ptr<Tracked> TrackSampler(const std::string& name, ::torch::data::samplers::SequentialSampler& s);
std::unique_ptr<Tracked> TrackSampler(const std::string& name, ::torch::data::samplers::DistributedSequentialSampler& s);
std::unique_ptr<Tracked> TrackSampler(const std::string& name, ::torch::data::samplers::DistributedRandomSampler& s);
std::unique_ptr<Tracked> TrackSampler(const std::string& name, ResumableRandomSampler& s);
std::unique_ptr<Tracked> TrackBlob(const std::string& name, std::function<std::string()> save,
                                   std::function<void(const std::string&)> load);
// The default CPU generator and every CUDA device's default generator, as "rng".
std::unique_ptr<Tracked> TrackDefaultGenerators();

}  // namespace preempt::torch::internal
